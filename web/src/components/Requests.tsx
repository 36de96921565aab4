// A deployment's requests on a model's page: the traces its fw serve sent to
// the dashboard's trace store (GET /api/traces?deployment=...), newest or
// slowest first, and for the one picked its spans as a waterfall (GET
// /api/traces/{trace_id}): the request, its decode, queue, infer and
// encode; the engine call an infer span links to opens as its own trace,
// with every request it batched.
import { useMemo, useState } from "react";
import { get, seg } from "../api/client";
import type { Deployment, Span, TraceList, TraceSpans } from "../api/types";
import { useApi } from "../lib/hooks";
import { fmtAgo, fmtTime } from "../lib/format";
import { Empty, ErrorNote, StatusBadge } from "./ui";

/** The shared server's spawn ID: its spans' fw.deployment. */
export const SHARED_SERVER_DEPLOYMENT = "shared-server";

/** A span's duration in milliseconds. */
export function spanMs(s: Span): number {
  return (s.end_ns - s.start_ns) / 1e6;
}

/** The status a request was answered with: HTTP's code, or gRPC's. */
export function answerOf(s: Span): string {
  const a = s.attributes as Record<string, unknown>;
  if (a["http.response.status_code"] !== undefined) return String(a["http.response.status_code"]);
  if (a["rpc.grpc.status_code"] !== undefined) return `gRPC ${String(a["rpc.grpc.status_code"])}`;
  return "";
}

/** Whether a server span is a request of deployment d: its own, or on the shared server its model version's. */
export function ofDeployment(s: Span, d: Deployment): boolean {
  if (d.target !== "shared") return true;
  const a = s.attributes as Record<string, unknown>;
  return a["fw.model"] === d.model && String(a["fw.model.version"]) === String(d.version);
}

/** One row of a waterfall: a span with its depth under its trace's roots. */
export interface WaterfallRow {
  span: Span;
  depth: number;
}

/**
 * Orders a trace's spans as a tree, each after its parent, children by
 * start; a span whose parent is not in the trace (the caller's, kept
 * elsewhere) is a root.
 */
export function waterfall(spans: Span[]): WaterfallRow[] {
  const ids = new Set(spans.map((s) => s.span_id));
  const kids = new Map<string, Span[]>();
  const roots: Span[] = [];
  for (const s of spans) {
    if (s.parent_id && ids.has(s.parent_id)) {
      const k = kids.get(s.parent_id) ?? [];
      k.push(s);
      kids.set(s.parent_id, k);
    } else {
      roots.push(s);
    }
  }
  const byStart = (a: Span, b: Span) => a.start_ns - b.start_ns || a.span_id.localeCompare(b.span_id);
  const out: WaterfallRow[] = [];
  const seen = new Set<string>();
  const walk = (s: Span, depth: number) => {
    if (seen.has(s.span_id)) return; // a cycle in what a sender sent
    seen.add(s.span_id);
    out.push({ span: s, depth });
    for (const k of (kids.get(s.span_id) ?? []).sort(byStart)) walk(k, depth + 1);
  };
  for (const r of roots.sort(byStart)) walk(r, 0);
  return out;
}

/** A span attribute's value as text: strings as they are, the rest as JSON. */
export function attrText(v: unknown): string {
  return typeof v === "string" ? v : JSON.stringify(v);
}

export function Waterfall({ traceId, onOpen }: { traceId: string; onOpen: (traceId: string) => void }) {
  const trace = useApi((s) => get<TraceSpans>(`/api/traces/${seg(traceId)}`, undefined, s), [traceId]);
  const rows = useMemo(() => waterfall(trace.data?.spans ?? []), [trace.data]);
  const [picked, setPicked] = useState<string>();
  if (trace.error) return <ErrorNote error={trace.error} />;
  if (!trace.data) return <p className="muted">Loading…</p>;
  const t0 = Math.min(...rows.map((r) => r.span.start_ns));
  const t1 = Math.max(...rows.map((r) => r.span.end_ns));
  const total = Math.max(t1 - t0, 1);
  return (
    <div className="waterfall" data-testid="waterfall">
      <p className="muted small">
        trace {traceId} · {rows.length} span{rows.length === 1 ? "" : "s"} · {(total / 1e6).toFixed(2)} ms
      </p>
      {rows.map(({ span: s, depth }) => {
        const links = s.links ?? [];
        const a = s.attributes as Record<string, unknown>;
        const batch = a["fw.batch.requests"] !== undefined ? ` · batch of ${String(a["fw.batch.requests"])} (${String(a["fw.batch.rows"])} rows)` : "";
        return (
          <div key={s.span_id} className={`wf-row${s.status === 2 ? " wf-error" : ""}`} title={s.status_message || undefined}>
            <div className="wf-name" style={{ paddingLeft: `${depth * 1.1}em` }}>
              <button type="button" className="link" aria-expanded={picked === s.span_id} onClick={() => setPicked(picked === s.span_id ? undefined : s.span_id)} title="show its attributes">
                {s.name}
              </button>
              {links.length > 0 && (
                <>
                  {" "}
                  {links.slice(0, 3).map((l) => (
                    <button key={l.span_id} type="button" className="link small" onClick={() => onOpen(l.trace_id)} title={`open the linked trace ${l.trace_id}`}>
                      linked ↗
                    </button>
                  ))}
                </>
              )}
            </div>
            <div className="wf-track">
              <div
                className="wf-bar"
                style={{ left: `${((s.start_ns - t0) / total) * 100}%`, width: `max(2px, ${((s.end_ns - s.start_ns) / total) * 100}%)` }}
              />
            </div>
            <div className="wf-ms">
              {spanMs(s).toFixed(2)} ms<span className="muted small">{batch}</span>
            </div>
            {picked === s.span_id && (
              <dl className="wf-attrs" data-testid="span-attributes">
                {s.status_message && (
                  <>
                    <dt>status</dt>
                    <dd className="mono">{s.status_message}</dd>
                  </>
                )}
                {Object.keys(a)
                  .sort()
                  .map((k) => (
                    <div key={k} className="wf-attr">
                      <dt className="mono">{k}</dt>
                      <dd className="mono">{attrText(a[k])}</dd>
                    </div>
                  ))}
                {Object.keys(a).length === 0 && !s.status_message && <dd className="muted">no attributes</dd>}
              </dl>
            )}
          </div>
        );
      })}
    </div>
  );
}

/** Picks one of a model's deployments (nothing to pick with one). */
export function DeploymentSelect({ deployments, value, onChange }: { deployments: Deployment[]; value: string; onChange: (id: string) => void }) {
  if (deployments.length < 2) return null;
  return (
    <label className="inline">
      Deployment
      <select value={value} onChange={(e) => onChange(e.target.value)}>
        {deployments.map((d) => (
          <option key={d.id} value={d.id}>
            {d.id} (v{d.version})
          </option>
        ))}
      </select>
    </label>
  );
}

/** The requests of a model's ready deployments, and the waterfall of the one picked. */
export function Requests({ deployments }: { deployments: Deployment[] }) {
  const [depId, setDepId] = useState("");
  const [sort, setSort] = useState<"recent" | "slowest">("recent");
  const [open, setOpen] = useState("");
  const dep = deployments.find((d) => d.id === depId) ?? deployments[0];
  const sender = dep ? (dep.target === "shared" ? SHARED_SERVER_DEPLOYMENT : dep.id) : "";
  const list = useApi(
    (s) => (sender ? get<TraceList>("/api/traces", { deployment: sender, sort, limit: dep?.target === "shared" ? 200 : 25 }, s) : Promise.resolve({ requests: [] })),
    [sender, sort],
    5000,
  );
  if (!dep) return <Empty>Deploy a version: its requests are traced here (a sample of them, and every request sent from Try it).</Empty>;
  const reqs = (list.data?.requests ?? []).filter((s) => ofDeployment(s, dep)).slice(0, 25);
  return (
    <div className="stack requests">
      <div className="row">
        <DeploymentSelect deployments={deployments} value={dep.id} onChange={setDepId} />
        <label className="inline">
          Show
          <select value={sort} onChange={(e) => setSort(e.target.value as "recent" | "slowest")}>
            <option value="recent">most recent</option>
            <option value="slowest">slowest</option>
          </select>
        </label>
        <span className="muted small">refreshed every 5 s</span>
      </div>
      <ErrorNote error={list.error} />
      {reqs.length === 0 ? (
        <Empty>No traced requests yet: the deployment traces a sample of its requests, and every one sent from Try it.</Empty>
      ) : (
        <table className="table requests-table">
          <thead>
            <tr>
              <th>when</th>
              <th>request</th>
              <th>answer</th>
              <th className="num">ms</th>
            </tr>
          </thead>
          <tbody>
            {reqs.map((s) => (
              <tr key={s.trace_id + s.span_id} className={open === s.trace_id ? "selected" : undefined} onClick={() => setOpen(open === s.trace_id ? "" : s.trace_id)}>
                <td title={fmtTime(new Date(s.start_ns / 1e6).toISOString())}>{fmtAgo(new Date(s.start_ns / 1e6).toISOString())}</td>
                <td>
                  <button type="button" className="link">
                    {s.name}
                  </button>
                  {s.status === 2 && (
                    <>
                      {" "}
                      <StatusBadge status="error" />
                    </>
                  )}
                </td>
                <td>{answerOf(s)}</td>
                <td className="num">{spanMs(s).toFixed(2)}</td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
      {open && <Waterfall key={open} traceId={open} onOpen={setOpen} />}
    </div>
  );
}
