// A run's MLflow traces (MLflow's tracing API: @mlflow.trace, start_span,
// autologged GenAI calls made in the run, or linked to it): listed newest
// first from GET /api/runs/{id}/traces, the picked one's spans as a
// waterfall (GET /api/traces/{trace_id}, the same view as a deployment's
// requests).
import { useState } from "react";
import { get, seg } from "../api/client";
import type { RunTraceList, TraceSummary } from "../api/types";
import { useApi } from "../lib/hooks";
import { fmtTime } from "../lib/format";
import { DataTable, numCol } from "./DataTable";
import { Waterfall } from "./Requests";
import { Empty, ErrorNote } from "./ui";

/** The run status whose badge colour a trace's state takes. */
export function traceStatus(t: TraceSummary): string {
  switch (t.state) {
    case "OK":
      return "finished";
    case "ERROR":
      return "failed";
    case "IN_PROGRESS":
      return "running";
  }
  return "unknown";
}

/** A time of Unix milliseconds, "–" when it is not one a date holds. */
export function fmtMs(ms: number): string {
  const d = new Date(ms);
  return Number.isNaN(d.getTime()) ? "–" : fmtTime(d.toISOString());
}

/** Cuts a preview to n characters. */
export function preview(s: string | undefined, n = 80): string {
  if (!s) return "";
  return s.length > n ? `${s.slice(0, n - 1)}…` : s;
}

export function RunTraces({ runId }: { runId: string }) {
  const list = useApi((signal) => get<RunTraceList>(`/api/runs/${seg(runId)}/traces`, { limit: 100 }, signal), [runId]);
  const [open, setOpen] = useState<string>();
  const traces = list.data?.traces ?? [];
  return (
    <div className="stack">
      <ErrorNote error={list.error} />
      {!list.loading && !list.error && traces.length === 0 && (
        <Empty>No traces: code traced with MLflow (@mlflow.trace, mlflow.start_span) inside this run, with MLFLOW_TRACKING_URI pointing here, shows its traces on this tab.</Empty>
      )}
      {traces.length > 0 && (
        <DataTable columns={["Trace", "State", "Started", numCol("Duration"), "Request", "Response"]}>
          {traces.map((t) => (
            <tr key={t.trace_id} className={open === t.trace_id ? "selected" : undefined}>
              <td>
                <button type="button" className="link" onClick={() => setOpen(open === t.trace_id ? undefined : t.trace_id)} aria-expanded={open === t.trace_id}>
                  {t.name || t.trace_id}
                </button>
              </td>
              <td>
                <span className={`badge badge-${traceStatus(t)}`} data-status={t.state}>
                  {t.state}
                </span>
              </td>
              <td className="muted">{fmtMs(t.request_time_ms)}</td>
              <td className="num">{t.duration_ms !== undefined ? `${t.duration_ms} ms` : "—"}</td>
              <td className="mono small" title={t.request_preview}>
                {preview(t.request_preview)}
              </td>
              <td className="mono small" title={t.response_preview}>
                {preview(t.response_preview)}
              </td>
            </tr>
          ))}
        </DataTable>
      )}
      {open && <Waterfall traceId={open} onOpen={setOpen} />}
    </div>
  );
}
