// Hand-drawn SVG charts: a time-series line chart with a grid, labels and a hover read-out,
// and a sparkline. No dependency; sized by their container.
//
// Time axes read in local clock time (HH:MM, HH:MM:SS for spans under 10 minutes, with the
// date when the span crosses days). The y-scale is robust to outliers: when the largest value
// is far above the 95th percentile of the plotted values, the scale is clipped just above that
// percentile and each clipped point is drawn as a red marker at the top, with a note saying
// how many points were clipped and the largest value (docs/operations/history-and-reports.md, "Reading the
// console's figures").
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

const pad2 = (n: number) => String(n).padStart(2, "0");

/** Local clock time of Unix ms `t`: HH:MM (HH:MM:SS with `seconds`), the date before it with `date`. */
export function clockLabel(t: number, seconds = false, date = false): string {
  const d = new Date(t);
  const hm = `${pad2(d.getHours())}:${pad2(d.getMinutes())}${seconds ? `:${pad2(d.getSeconds())}` : ""}`;
  return date ? `${d.toLocaleDateString(undefined, { month: "short", day: "numeric" })} ${hm}` : hm;
}

/** How a time axis spanning `times` labels its ticks: seconds under 10 minutes, the date across days. */
export function axisStyle(times: number[]): { seconds: boolean; date: boolean } {
  const first = times[0];
  const last = times[times.length - 1];
  if (first === undefined || last === undefined) return { seconds: false, date: false };
  const crossesDays = new Date(first).toDateString() !== new Date(last).toDateString();
  return { seconds: last - first < 10 * 60_000, date: crossesDays };
}

/** The `q` quantile (0..1) of the finite values, nearest rank. */
export function quantile(values: number[], q: number): number | null {
  const v = values.filter((x) => Number.isFinite(x)).sort((a, b) => a - b);
  if (v.length === 0) return null;
  return v[Math.min(v.length - 1, Math.max(0, Math.ceil(q * v.length) - 1))];
}

/**
 * The top of a y-scale over `values` that an outlier cannot flatten: with at least 10 values
 * and the largest more than 3 times the 95th percentile, the scale stops just above that
 * percentile (`clipped`: true); otherwise it covers every value.
 */
export function robustMax(values: number[]): { top: number; clipped: boolean } {
  const finite = values.filter((x) => Number.isFinite(x));
  const hi = finite.length ? Math.max(...finite) : 0;
  const p95 = quantile(finite, 0.95);
  if (finite.length >= 10 && p95 !== null && p95 > 0 && hi > 3 * p95) return { top: niceMax(p95 * 1.25), clipped: true };
  return { top: hi, clipped: false };
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
  const { max, min, clipped } = useMemo(() => {
    let lo = Infinity;
    const all: number[] = [];
    for (const s of props.series)
      for (const v of s.values)
        if (v !== null && Number.isFinite(v)) {
          all.push(v);
          lo = Math.min(lo, v);
        }
    const min = props.yMin ?? 0;
    const robust = robustMax(all);
    const max = props.yMax ?? niceMax(all.length === 0 ? 1 : Math.max(robust.top, min + 1e-9));
    return { max, min: Math.min(min, lo === Infinity ? min : lo), clipped: props.yMax === undefined && robust.clipped };
  }, [props.series, props.yMin, props.yMax]);
  const n = props.times.length;
  const x = (i: number) => pad.l + (n <= 1 ? 0 : (i / (n - 1)) * (W - pad.l - pad.r));
  const y = (v: number) => pad.t + (1 - (v - min) / (max - min || 1)) * (H - pad.t - pad.b);
  const ticks = [0, 0.25, 0.5, 0.75, 1].map((f) => min + f * (max - min));
  const marks: { x: number; v: number; color: string; name: string }[] = [];
  const paths = props.series.map((s) => {
    let d = "";
    let pen = false;
    s.values.forEach((v, i) => {
      if (v === null || !Number.isFinite(v)) {
        pen = false;
        return;
      }
      if (v > max) marks.push({ x: x(i), v, color: s.color, name: s.name });
      d += `${pen ? "L" : "M"}${x(i).toFixed(1)},${y(Math.min(max, v)).toFixed(1)}`;
      pen = true;
    });
    return { s, d };
  });
  const style = axisStyle(props.times);
  // Five ticks (three on narrow charts), each at a sample's time.
  const tickCount = Math.min(n, W < 420 ? 3 : 5);
  const xLabels = tickCount > 1 ? Array.from(new Set(Array.from({ length: tickCount }, (_, k) => Math.round((k * (n - 1)) / (tickCount - 1))))) : [];
  const hi = hover ?? n - 1;
  const largest = marks.reduce((m, p) => Math.max(m, p.v), -Infinity);
  return (
    <div class="chart">
      <div class="chart-head">
        <span class="chart-title">
          {props.title}
          {n > 0 && props.times[hi] !== undefined && (
            <span class="chart-note" data-testid="chart-time">
              {clockLabel(props.times[hi], style.seconds, style.date)}
            </span>
          )}
          {clipped && marks.length > 0 && (
            <span class="chart-note" data-testid="chart-clipped" title="The scale stops above the 95th percentile of the plotted values; red marks at the top are the points above it.">
              ▲ {marks.length} {marks.length === 1 ? "point" : "points"} above the scale (max {fmt(largest)}
              {props.unit ?? ""})
            </span>
          )}
        </span>
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
          <text key={i} x={x(i)} y={H - 5} class="axis x-tick" text-anchor={i === 0 ? "start" : i === n - 1 ? "end" : "middle"}>
            {clockLabel(props.times[i], style.seconds, style.date)}
          </text>
        ))}
        {paths.map(({ s, d }) => (
          <path key={s.name} d={d} fill="none" stroke={s.color} stroke-width="2" stroke-linejoin="round" />
        ))}
        {marks.map((m, k) => (
          <path key={k} class="clip-mark" d={`M${m.x.toFixed(1)},${pad.t - 1} l-4,7 h8 z`} style={{ stroke: m.color }}>
            <title>{`${m.name} ${fmt(m.v)}${props.unit ?? ""} (above the scale)`}</title>
          </path>
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
