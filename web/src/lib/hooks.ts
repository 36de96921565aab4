// Hooks shared by the pages: data loading with polling and retry, URL state,
// the connection state and the live stream.
import { useCallback, useEffect, useRef, useState, useSyncExternalStore } from "react";
import { useLocation, useSearchParams } from "react-router-dom";
import { ApiError, connection, type ConnectionState } from "../api/client";
import { StreamClient, type StreamEvent } from "../api/stream";

/** The result of useApi. */
export interface ApiState<T> {
  data: T | undefined;
  error: ApiError | undefined;
  loading: boolean;
  /** Loads again now. */
  reload: () => void;
}

/**
 * Loads `load()` on mount and whenever deps change; with `pollMs` again
 * every pollMs. After an unreachable dashboard it retries every 2 s, and the
 * last good data stays on screen meanwhile.
 */
export function useApi<T>(load: (signal: AbortSignal) => Promise<T>, deps: unknown[], pollMs = 0): ApiState<T> {
  const [data, setData] = useState<T>();
  const [error, setError] = useState<ApiError>();
  const [loading, setLoading] = useState(true);
  const [tick, setTick] = useState(0);
  const loadRef = useRef(load);
  loadRef.current = load;

  useEffect(() => {
    const ac = new AbortController();
    let timer: ReturnType<typeof setTimeout> | undefined;
    setLoading(true);
    loadRef
      .current(ac.signal)
      .then((d) => {
        if (ac.signal.aborted) return;
        setData(d);
        setError(undefined);
        if (pollMs > 0) timer = setTimeout(() => setTick((t) => t + 1), pollMs);
      })
      .catch((e: unknown) => {
        if (ac.signal.aborted) return;
        const err = e instanceof ApiError ? e : new ApiError(0, "error", String(e));
        setError(err);
        if (err.unreachable || pollMs > 0) timer = setTimeout(() => setTick((t) => t + 1), err.unreachable ? 2000 : pollMs);
      })
      .finally(() => {
        if (!ac.signal.aborted) setLoading(false);
      });
    return () => {
      ac.abort();
      if (timer) clearTimeout(timer);
    };
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, [...deps, tick, pollMs]);

  const reload = useCallback(() => setTick((t) => t + 1), []);
  return { data, error, loading, reload };
}

/** The state of useAction. */
export interface ActionState {
  busy: boolean;
  error: unknown;
  setError: (e: unknown) => void;
  /** Runs fn (clearing the last error, busy meanwhile); true when it succeeded. */
  run: (fn: () => Promise<unknown>) => Promise<boolean>;
  /** Clears busy and the error (a dialog opening afresh). */
  reset: () => void;
}

/** One user action (save, delete, start...) with its busy flag and its last error, for forms and dialogs. */
export function useAction(): ActionState {
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<unknown>();
  const run = useCallback(async (fn: () => Promise<unknown>) => {
    setBusy(true);
    setError(undefined);
    try {
      await fn();
      return true;
    } catch (e) {
      setError(e);
      return false;
    } finally {
      setBusy(false);
    }
  }, []);
  const reset = useCallback(() => {
    setBusy(false);
    setError(undefined);
  }, []);
  return { busy, error, setError, run, reset };
}

/** The dashboard connection state (online, token needed). */
export function useConnection(): ConnectionState {
  return useSyncExternalStore(
    (cb) => connection.subscribe(cb),
    () => connection.get(),
  );
}

/**
 * Sets several URL parameters in one navigation ("" or null removes one),
 * starting from the URL as it is now rather than as it was at the last
 * render: updates in a row (a click, then a debounced search) never undo
 * each other.
 */
export function useSetQueryParams(): (updates: Record<string, string | null>) => void {
  const [, setParams] = useSearchParams();
  const { pathname } = useLocation();
  return useCallback(
    (updates: Record<string, string | null>) =>
      setParams(
        (prev) => {
          // The browser's URL is the latest state; under a MemoryRouter (tests)
          // it is not this page's, so the router's copy is used.
          const live = window.location.pathname === pathname;
          const next = new URLSearchParams(live ? window.location.search : prev);
          for (const [k, v] of Object.entries(updates)) {
            if (v === null || v === "") next.delete(k);
            else next.set(k, v);
          }
          return next;
        },
        { replace: true },
      ),
    [setParams, pathname],
  );
}

/**
 * One URL search parameter as state, so a view can be shared by its URL.
 * Setting the default value removes the parameter.
 */
export function useQueryParam(name: string, def = ""): [string, (v: string) => void] {
  const [params] = useSearchParams();
  const setMany = useSetQueryParams();
  const fromURL = params.get(name) ?? def;
  // The router renders URL changes in a transition, later than the click
  // that made them: a checkbox or slider bound to the URL alone would snap
  // back meanwhile. The value is kept here too, set at once, and follows the
  // URL when it changes by navigation (back, a link).
  const [value, setValue] = useState(fromURL);
  useEffect(() => setValue(fromURL), [fromURL]);
  const set = useCallback(
    (v: string) => {
      setValue(v === "" ? def : v);
      setMany({ [name]: v === def ? null : v });
    },
    [name, def, setMany],
  );
  return [value, set];
}

/** Follows runs (or "*") on the live stream while the component is mounted. */
export function useStream(
  runs: string[] | "*" | null,
  onEvent: (e: StreamEvent) => void,
  onResync?: () => void,
): boolean {
  const [connected, setConnected] = useState(false);
  const handler = useRef(onEvent);
  handler.current = onEvent;
  const resync = useRef(onResync);
  resync.current = onResync;
  const key = runs === null ? null : runs === "*" ? "*" : runs.join(",");
  const client = useRef<StreamClient | null>(null);

  useEffect(() => {
    if (key === null) return;
    const c = new StreamClient({
      runs: key === "*" ? "*" : key.split(",").filter(Boolean),
      onEvent: (e) => handler.current(e),
      onResync: () => resync.current?.(),
      onState: setConnected,
    });
    client.current = c;
    return () => {
      c.close();
      client.current = null;
    };
  }, [key]);
  return connected;
}

/** Re-renders every ms milliseconds (for "3 s ago" labels and ETAs). */
export function useNow(ms = 1000): number {
  const [now, setNow] = useState(Date.now());
  useEffect(() => {
    const t = setInterval(() => setNow(Date.now()), ms);
    return () => clearInterval(t);
  }, [ms]);
  return now;
}
