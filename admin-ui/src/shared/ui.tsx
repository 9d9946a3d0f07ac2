// The pieces the console and the portal both draw: class lists, buttons, code blocks, copying
// to the clipboard and a one-line error. Each entry styles them with its own CSS (the portal is
// merchant-facing): the markup and the class names are what they share. Nothing here may name
// an operator-side path: the portal's bundle includes this file.
import type { ComponentChildren, JSX } from "preact";
import { errorLine } from "./http";

export function cx(...names: (string | false | null | undefined)[]) {
  return names.filter(Boolean).join(" ");
}

type ButtonProps = JSX.ButtonHTMLAttributes<HTMLButtonElement> & {
  kind?: "primary" | "danger" | "ghost" | "default" | "success";
  /** Disabled, with a spinner, while an action runs. */
  busy?: boolean;
  small?: boolean;
};
export function Button({ kind = "default", busy, small, children, class: klass, disabled, ...rest }: ButtonProps) {
  return (
    <button
      type="button"
      {...rest}
      disabled={(disabled as boolean) || busy}
      class={cx("btn", `btn-${kind}`, small && "btn-sm", busy && "is-busy", klass as string)}
    >
      {busy && <span class="spinner" aria-hidden="true" />}
      {children}
    </button>
  );
}

type CodeProps = Omit<JSX.HTMLAttributes<HTMLPreElement>, "children" | "class"> & { children: ComponentChildren; class?: string };
/** A block of code or JSON, shown as it is (`pre.code`). */
export function Code({ children, class: klass, ...rest }: CodeProps) {
  return (
    <pre {...rest} class={cx("code", klass)}>
      {children}
    </pre>
  );
}

/** Copies `text` to the clipboard (the Clipboard API, else a selected textarea); false when neither works. */
export async function copyText(text: string): Promise<boolean> {
  try {
    await navigator.clipboard.writeText(text);
    return true;
  } catch {
    const ta = document.createElement("textarea");
    ta.value = text;
    document.body.appendChild(ta);
    ta.select();
    const ok = document.execCommand("copy");
    ta.remove();
    return ok;
  }
}

/** A failure on one line ("CODE: message" for the registry's refusals), or nothing. */
export function ErrorText({ error, class: klass = "bad" }: { error: unknown; class?: string }) {
  if (!error) return null;
  return <span class={klass}>{errorLine(error)}</span>;
}
