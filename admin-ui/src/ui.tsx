// The console's own pieces: dialogs, the error banner (code + request id), toasts, badges,
// fields, polling; the buttons and code blocks it shares with the portal come from
// shared/ui.tsx and are re-exported here.
import type { ComponentChildren } from "preact";
import { useEffect, useRef, useState } from "preact/hooks";
import { ApiError } from "./api";
import { onLink } from "./router";
import { useAction } from "./shared/hooks";
import { Button, Code, copyText, cx } from "./shared/ui";

export { Button, Code, cx };

export function Link(props: { to: string; class?: string; children: ComponentChildren; title?: string }) {
  return (
    <a href={props.to} class={props.class} title={props.title} onClick={(e) => onLink(e as unknown as MouseEvent, props.to)}>
      {props.children}
    </a>
  );
}

export function Spinner({ label }: { label?: string }) {
  return (
    <div class="loading" role="status">
      <span class="spinner" aria-hidden="true" /> {label ?? "Loading…"}
    </div>
  );
}

export function Badge({ tone = "neutral", children, title }: { tone?: string; children: ComponentChildren; title?: string }) {
  return (
    <span class={`badge badge-${tone}`} title={title}>
      {children}
    </span>
  );
}

export function MethodBadge({ method }: { method: string }) {
  return <span class={`method method-${method.toLowerCase()}`}>{method}</span>;
}

/** An error as the registry reported it: code, message, request id and details. */
export function ErrorBanner({ error, onClose, title }: { error: unknown; onClose?: () => void; title?: string }) {
  if (!error) return null;
  const e = error instanceof ApiError ? error : new ApiError(0, "ERROR", String((error as Error)?.message ?? error));
  return (
    <div class="error-banner" role="alert" data-code={e.code}>
      <div class="error-head">
        <strong>{title ?? "The request failed"}</strong>
        <code class="error-code">{e.status ? `${e.status} ` : ""}{e.code}</code>
        {onClose && (
          <button class="icon-btn" aria-label="Dismiss" onClick={onClose}>
            ×
          </button>
        )}
      </div>
      <div class="error-message">{e.message}</div>
      {e.details.length > 0 && (
        <ul class="error-details">
          {e.details.map((d, i) => (
            <li key={i}>
              {d.path && <code>{d.path}</code>} {d.field && <code>{d.field}</code>} {d.reason}
            </li>
          ))}
        </ul>
      )}
      {e.requestId && (
        <div class="error-rid">
          request id <code class="selectable">{e.requestId}</code>
        </div>
      )}
    </div>
  );
}

export function Modal(props: {
  title: ComponentChildren;
  onClose: () => void;
  children: ComponentChildren;
  footer?: ComponentChildren;
  wide?: boolean;
  tone?: "danger" | "default";
  dismissable?: boolean;
}) {
  const ref = useRef<HTMLDivElement>(null);
  const dismissable = props.dismissable ?? true;
  useEffect(() => {
    const onKey = (e: KeyboardEvent) => {
      if (e.key === "Escape" && dismissable) props.onClose();
    };
    window.addEventListener("keydown", onKey);
    const first = ref.current?.querySelector<HTMLElement>("[data-autofocus], textarea, input, select");
    first?.focus();
    return () => window.removeEventListener("keydown", onKey);
  }, []);
  return (
    <div class="modal-backdrop" onMouseDown={(e) => e.target === e.currentTarget && dismissable && props.onClose()}>
      <div ref={ref} class={cx("modal", props.wide && "modal-wide", props.tone === "danger" && "modal-danger")} role="dialog" aria-modal="true">
        <div class="modal-head">
          <h2>{props.title}</h2>
          {dismissable && (
            <button class="icon-btn" aria-label="Close" onClick={props.onClose}>
              ×
            </button>
          )}
        </div>
        <div class="modal-body">{props.children}</div>
        {props.footer && <div class="modal-foot">{props.footer}</div>}
      </div>
    </div>
  );
}

// ---- toasts ----
type Toast = { id: number; text: string; tone: "ok" | "error" | "info" };
let toastSeq = 0;
const toastListeners = new Set<(t: Toast[]) => void>();
let toasts: Toast[] = [];
export function toast(text: string, tone: Toast["tone"] = "ok") {
  const t = { id: ++toastSeq, text, tone };
  toasts = [...toasts, t].slice(-3);
  toastListeners.forEach((l) => l(toasts));
  setTimeout(() => {
    toasts = toasts.filter((x) => x.id !== t.id);
    toastListeners.forEach((l) => l(toasts));
  }, tone === "error" ? 8000 : 3500);
}
export function Toasts() {
  const [list, setList] = useState<Toast[]>(toasts);
  useEffect(() => {
    toastListeners.add(setList);
    return () => void toastListeners.delete(setList);
  }, []);
  return (
    <div class="toasts" aria-live="polite">
      {list.map((t) => (
        <div key={t.id} class={`toast toast-${t.tone}`}>
          {t.text}
        </div>
      ))}
    </div>
  );
}

export function pretty(value: unknown): string {
  if (typeof value === "string") {
    try {
      return JSON.stringify(JSON.parse(value), null, 2);
    } catch {
      return value;
    }
  }
  return JSON.stringify(value, null, 2);
}

export function CopyButton({ text, label = "Copy" }: { text: string; label?: string }) {
  const [done, setDone] = useState(false);
  return (
    <Button
      small
      kind="ghost"
      onClick={async () => {
        if (await copyText(text)) {
          setDone(true);
          setTimeout(() => setDone(false), 1500);
        } else toast("Copy failed: select the text and copy it by hand", "error");
      }}
    >
      {done ? "Copied" : label}
    </Button>
  );
}

export function Field(props: { label: string; hint?: ComponentChildren; error?: string; children: ComponentChildren; class?: string }) {
  return (
    <label class={cx("field", props.error && "has-error", props.class)}>
      <span class="field-label">{props.label}</span>
      {props.children}
      {props.error ? <span class="field-error">{props.error}</span> : props.hint ? <span class="field-hint">{props.hint}</span> : null}
    </label>
  );
}

export function Empty({ title, children }: { title: string; children?: ComponentChildren }) {
  return (
    <div class="empty">
      <div class="empty-title">{title}</div>
      {children && <div class="empty-body">{children}</div>}
    </div>
  );
}

export function ago(iso?: string | number | null): string {
  if (iso === undefined || iso === null || iso === "") return "—";
  const t = typeof iso === "number" ? iso : Date.parse(iso);
  if (Number.isNaN(t)) return String(iso);
  const s = Math.round((Date.now() - t) / 1000);
  if (s < 5) return "just now";
  if (s < 60) return `${s}s ago`;
  if (s < 3600) return `${Math.floor(s / 60)}m ago`;
  if (s < 86400) return `${Math.floor(s / 3600)}h ago`;
  return `${Math.floor(s / 86400)}d ago`;
}

export function fmtTime(iso?: string): string {
  if (!iso) return "—";
  const d = new Date(iso);
  if (Number.isNaN(d.getTime())) return iso;
  return d.toLocaleString(undefined, { month: "short", day: "numeric", hour: "2-digit", minute: "2-digit", second: "2-digit" });
}

/** Re-runs `fn` every `ms` while the tab is visible (and once at mount). */
export function usePoll(fn: () => void, ms: number, deps: unknown[] = []) {
  const saved = useRef(fn);
  saved.current = fn;
  useEffect(() => {
    saved.current();
    const id = setInterval(() => {
      if (document.visibilityState === "visible") saved.current();
    }, ms);
    return () => clearInterval(id);
  }, deps);
}

// ---- confirmation ----
/**
 * A confirmation naming the object a destructive or far-reaching action acts on: the dialog
 * says what will happen; nothing is done until `action` is pressed. `run` may throw: the
 * dialog stays open and shows the error.
 */
export function ConfirmDialog(props: {
  title: string;
  children: ComponentChildren;
  action: string;
  kind?: "danger" | "primary";
  run: () => Promise<void>;
  onClose: () => void;
  testid?: string;
}) {
  const { run: go, busy, error } = useAction(
    async () => {
      await props.run();
      props.onClose();
    },
    { keepError: true },
  );
  return (
    <Modal
      tone={props.kind === "primary" ? "default" : "danger"}
      title={props.title}
      onClose={props.onClose}
      footer={
        <>
          <Button onClick={props.onClose} data-testid="confirm-cancel">
            Cancel
          </Button>
          <Button kind={props.kind ?? "danger"} busy={busy} onClick={go} data-autofocus data-testid={props.testid ?? "confirm-action"}>
            {props.action}
          </Button>
        </>
      }
    >
      <ErrorBanner error={error} />
      {props.children}
    </Modal>
  );
}
