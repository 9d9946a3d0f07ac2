// Hand-drawn SVG charts: a time-series line chart with a grid, labels and a hover read-out,
// and a sparkline. No dependency; sized by their container.
import { useEffect, useMemo, useRef, useState } from "preact/hooks";

export type Series = { name: string; color: string; values: (number | null)[] };

function niceMax(v: number): number {
  if (!(v > 0)) return 1;
  const p = Math.pow(10, Math.floor(Math.log10(v)));
  for (const m of [1, 2, 2.5, 5, 10]) if (v <= m * p) return m * p;
  return 10 * p;
}

export function fmtNum(v: number | null | undefined, digits = 1): string {
  if (v === null || v === undefined || Number.isNaN(v)) return "—";
  if (Math.abs(v) >= 1000) return `${(v / 1000).toFixed(1)}k`;
  if (Math.abs(v) >= 100) return v.toFixed(0);
  return v.toFixed(digits);
}

export function LineChart(props: {
  title: string;
  times: number[];
  series: Series[];
  unit?: string;
  height?: number;
  yMin?: number;
  yMax?: number;
  format?: (v: number | null) => string;
}) {
  // Drawn at the container's pixel width, so text and strokes are never stretched.
  const box = useRef<HTMLDivElement>(null);
  const [W, setW] = useState(560);
  useEffect(() => {
    const el = box.current;
    if (!el) return;
    const ro = new ResizeObserver(() => setW(Math.max(200, Math.round(el.clientWidth))));
    ro.observe(el);
    setW(Math.max(200, Math.round(el.clientWidth)));
    return () => ro.disconnect();
  }, []);
  const H = props.height ?? 180;
  const pad = { l: 46, r: 12, t: 12, b: 22 };
  const fmt = props.format ?? ((v: number | null) => fmtNum(v));
  const [hover, setHover] = useState<number | null>(null);
  const { max, min } = useMemo(() => {
    let hi = -Infinity;
    let lo = Infinity;
    for (const s of props.series)
      for (const v of s.values)
        if (v !== null && Number.isFinite(v)) {
          hi = Math.max(hi, v);
          lo = Math.min(lo, v);
        }
    const min = props.yMin ?? 0;
    const max = props.yMax ?? niceMax(hi === -Infinity ? 1 : Math.max(hi, min + 1e-9));
    return { max, min: Math.min(min, lo === Infinity ? min : lo) };
  }, [props.series, props.yMin, props.yMax]);
  const n = props.times.length;
  const x = (i: number) => pad.l + (n <= 1 ? 0 : (i / (n - 1)) * (W - pad.l - pad.r));
  const y = (v: number) => pad.t + (1 - (v - min) / (max - min || 1)) * (H - pad.t - pad.b);
  const ticks = [0, 0.25, 0.5, 0.75, 1].map((f) => min + f * (max - min));
  const paths = props.series.map((s) => {
    let d = "";
    let pen = false;
    s.values.forEach((v, i) => {
      if (v === null || !Number.isFinite(v)) {
        pen = false;
        return;
      }
      d += `${pen ? "L" : "M"}${x(i).toFixed(1)},${y(Math.min(max, v)).toFixed(1)}`;
      pen = true;
    });
    return { s, d };
  });
  const now = props.times[n - 1] ?? Date.now();
  const xLabels = n > 1 ? [0, Math.floor((n - 1) / 2), n - 1] : [];
  const hi = hover ?? n - 1;
  return (
    <div class="chart">
      <div class="chart-head">
        <span class="chart-title">{props.title}</span>
        <span class="chart-legend">
          {props.series.map((s) => (
            <span key={s.name} class="legend-item">
              <i style={{ background: s.color }} />
              {s.name} <b>{n ? fmt(s.values[hi] ?? null) : "—"}</b>
              {props.unit ?? ""}
            </span>
          ))}
        </span>
      </div>
      <div class="chart-box" ref={box}>
      <svg
        width={W}
        height={H}
        viewBox={`0 0 ${W} ${H}`}
        role="img"
        aria-label={props.title}
        onMouseMove={(e) => {
          const r = (e.currentTarget as SVGElement).getBoundingClientRect();
          const fx = e.clientX - r.left;
          const i = Math.round(((fx - pad.l) / (W - pad.l - pad.r)) * (n - 1));
          setHover(n ? Math.max(0, Math.min(n - 1, i)) : null);
        }}
        onMouseLeave={() => setHover(null)}
      >
        {ticks.map((t) => (
          <g key={t}>
            <line x1={pad.l} x2={W - pad.r} y1={y(t)} y2={y(t)} class="grid" />
            <text x={pad.l - 6} y={y(t) + 4} class="axis" text-anchor="end">
              {fmt(t)}
            </text>
          </g>
        ))}
        {xLabels.map((i) => (
          <text key={i} x={x(i)} y={H - 5} class="axis" text-anchor={i === 0 ? "start" : i === n - 1 ? "end" : "middle"}>
            {i === n - 1 ? "now" : `-${Math.round((now - props.times[i]) / 1000)}s`}
          </text>
        ))}
        {paths.map(({ s, d }) => (
          <path key={s.name} d={d} fill="none" stroke={s.color} stroke-width="2" stroke-linejoin="round" />
        ))}
        {hover !== null && n > 0 && <line x1={x(hover)} x2={x(hover)} y1={pad.t} y2={H - pad.b} class="cursor" />}
        {n === 0 && (
          <text x={W / 2} y={H / 2} class="axis" text-anchor="middle">
            collecting samples…
          </text>
        )}
      </svg>
      </div>
    </div>
  );
}

export function Sparkline({ values, color = "#2f6fed", width = 90, height = 22 }: { values: (number | null)[]; color?: string; width?: number; height?: number }) {
  const vals = values.map((v) => (v === null || !Number.isFinite(v) ? 0 : v));
  const max = Math.max(1e-9, ...vals);
  const n = vals.length;
  if (n < 2) return <svg width={width} height={height} class="spark" />;
  const pts = vals.map((v, i) => `${((i / (n - 1)) * (width - 2) + 1).toFixed(1)},${(height - 2 - (v / max) * (height - 4)).toFixed(1)}`);
  return (
    <svg width={width} height={height} class="spark" aria-hidden="true">
      <polyline points={pts.join(" ")} fill="none" stroke={color} stroke-width="1.5" stroke-linejoin="round" />
    </svg>
  );
}
