// A run's log tail: the last 500 lines over REST, then new lines as they
// arrive (from the live stream's "log" events, or from a `lines` prop when
// the parent already follows the stream), scrolled to the end while
// "Follow" is on, stderr lines marked, and at most MAX_LINES kept.
import { useCallback, useEffect, useLayoutEffect, useRef, useState } from "react";
import { get, seg } from "../api/client";
import type { StreamEvent } from "../api/stream";
import type { LogLine, RunLogs } from "../api/types";
import { useStream } from "../lib/hooks";
import { ErrorNote } from "./ui";

/** Lines kept in memory; older ones are dropped. */
export const MAX_LINES = 5000;

/**
 * One line of output: a LogLine from REST, or a line of a stream "log" event
 * (docs/stream.md), which has no id (the store's cursor) and maybe no time.
 */
export type TailLine = Omit<LogLine, "id" | "time"> & Partial<Pick<LogLine, "id" | "time">>;

/** Appends lines, keeping the last `max`. */
export function appendBounded<T>(prev: T[], add: T[], max = MAX_LINES): T[] {
  if (add.length === 0) return prev;
  const next = prev.concat(add);
  return next.length > max ? next.slice(next.length - max) : next;
}

/** Turns a stream "log" event into lines. */
export function linesOfEvent(e: StreamEvent): TailLine[] {
  if (e.type !== "log") return [];
  const stream = typeof e.data.stream === "string" ? e.data.stream : "stdout";
  const lines = Array.isArray(e.data.lines) ? e.data.lines : [];
  return lines.map((l) => ({ stream, line: String(l), time: e.time }));
}

/** Props of LogTail. */
export interface LogTailProps {
  runId: string;
  /** Lines from the parent's stream (then LogTail does not subscribe itself). */
  lines?: TailLine[];
  /** Follow (auto-scroll) at first; the user can turn it off. */
  follow?: boolean;
  /** Height of the scrolling box in px. */
  height?: number;
}

/** The log tail of one run (see LogTailProps). */
export function LogTail({ runId, lines: fed, follow: followInit = true, height = 320 }: LogTailProps) {
  const [initial, setInitial] = useState<TailLine[]>([]);
  const [streamed, setStreamed] = useState<TailLine[]>([]);
  const [error, setError] = useState<unknown>();
  const [follow, setFollow] = useState(followInit);
  const [tick, setTick] = useState(0);
  const box = useRef<HTMLPreElement>(null);

  // Initial tail (again after a resync); streamed lines from before it are dropped.
  useEffect(() => {
    const ac = new AbortController();
    get<RunLogs>(`/api/runs/${seg(runId)}/logs`, { tail: 500 }, ac.signal)
      .then((a) => {
        setInitial((a.lines ?? []).map((l) => ({ id: l.id, stream: l.stream, line: l.line, time: l.time })));
        setStreamed([]);
        setError(undefined);
      })
      .catch((e: unknown) => {
        if (!ac.signal.aborted) setError(e);
      });
    return () => ac.abort();
  }, [runId, tick]);

  const onEvent = useCallback((e: StreamEvent) => {
    if (e.type === "log") setStreamed((prev) => appendBounded(prev, linesOfEvent(e)));
  }, []);
  useStream(fed ? null : [runId], onEvent, () => setTick((t) => t + 1));

  const all = appendBounded(initial, fed ?? streamed);

  useLayoutEffect(() => {
    const el = box.current;
    if (follow && el) el.scrollTop = el.scrollHeight;
  }, [all.length, all[all.length - 1], follow]);

  return (
    <div className="logtail">
      <div className="row logtail-bar">
        <label className="check">
          <input type="checkbox" checked={follow} onChange={(e) => setFollow(e.target.checked)} /> Follow
        </label>
        <span className="muted">{all.length === MAX_LINES ? `last ${MAX_LINES} lines` : `${all.length} lines`}</span>
      </div>
      <ErrorNote error={error} />
      <pre className="logs" ref={box} style={{ maxHeight: height }} tabIndex={0} aria-label={`Logs of run ${runId}`} data-testid="log-tail">
        {all.length === 0 ? (
          <span className="muted">No output yet.</span>
        ) : (
          all.map((l, i) => (
            <span key={i} className={l.stream === "stderr" ? "log-line stderr" : "log-line"}>
              {l.line}
              {"\n"}
            </span>
          ))
        )}
      </pre>
    </div>
  );
}
