// The busy/error bookkeeping every form, dialog and page of the console and the portal shares:
// `useAction` runs an action (a click, a submit) with its busy flag and its error; `useLoad`
// fetches what a page shows (once, or again every `ms` while the tab is visible) and keeps the
// last answer and the error of the last attempt.
import { useEffect, useRef, useState } from "preact/hooks";

export type Action<A extends unknown[]> = {
  /** Runs the action: busy while it runs, its error kept (never thrown). */
  run: (...args: A) => Promise<void>;
  busy: boolean;
  error: unknown;
  setError: (e: unknown) => void;
};

export type ActionOptions = {
  /**
   * What to keep as the error of a failure (a friendlier ApiError, say); it may do more on
   * the side (show a 422's details by their fields). By default the failure itself.
   */
  onError?: (e: unknown) => unknown;
  /** Keep the previous error while the action runs again (default: cleared at the start). */
  keepError?: boolean;
};

/** An action with its busy flag and its error: `setBusy(true)`, try, catch, finally, once. */
export function useAction<A extends unknown[]>(fn: (...args: A) => Promise<unknown> | unknown, opts: ActionOptions = {}): Action<A> {
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<unknown>(null);
  const run = async (...args: A) => {
    setBusy(true);
    if (!opts.keepError) setError(null);
    try {
      await fn(...args);
    } catch (e) {
      setError(opts.onError ? opts.onError(e) : e);
    } finally {
      setBusy(false);
    }
  };
  return { run, busy, error, setError };
}

export type Load<T> = {
  /** The last answer (kept while a later attempt fails), `null` before the first. */
  data: T | null;
  /** The error of the last attempt, `null` once one succeeds. */
  error: unknown;
  /** Fetches again now. */
  reload: () => Promise<void>;
  set: (data: T | null) => void;
};

/**
 * What a page shows, fetched at mount and whenever `deps` change (and, with `ms`, again every
 * `ms` while the tab is visible): the answer, or the error of the last attempt.
 */
export function useLoad<T>(fetcher: () => Promise<T>, deps: unknown[] = [], ms?: number): Load<T> {
  const [data, setData] = useState<T | null>(null);
  const [error, setError] = useState<unknown>(null);
  const saved = useRef(fetcher);
  saved.current = fetcher;
  const reload = async () => {
    try {
      setData(await saved.current());
      setError(null);
    } catch (e) {
      setError(e);
    }
  };
  useEffect(() => {
    reload();
    if (!ms) return;
    const id = setInterval(() => {
      if (document.visibilityState === "visible") reload();
    }, ms);
    return () => clearInterval(id);
  }, deps);
  return { data, error, reload, set: setData };
}
