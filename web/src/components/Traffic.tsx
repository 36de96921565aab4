// A deployment's logged traffic on a model's page: the drift of its inputs
// and outputs against a reference (GET /api/payloads/drift: PSI per feature,
// overall and over time) — a window of the logged traffic, or the data
// summary the version's training run logged (run.log_reference) — and its
// latest logged requests (GET /api/payloads), each of which opens in Try it.
import { useState } from "react";
import { Link } from "react-router-dom";
import { get, seg } from "../api/client";
import type { Deployment, DriftReport, PayloadList, PayloadRecord, PayloadTensor } from "../api/types";
import { useApi } from "../lib/hooks";
import { fmtAgo, fmtTime } from "../lib/format";
import { DeploymentSelect } from "./Requests";
import { Empty, ErrorNote, StatusBadge } from "./ui";

/** The query naming a deployment's traffic: its own, or on the shared server its model version's. */
export function trafficQuery(d: Deployment): Record<string, string> {
  return d.target === "shared" ? { model: d.model, version: String(d.version) } : { deployment: d.id };
}

/** Nests flat values into the shape (row-major). */
export function nest(data: number[], shape: number[]): unknown {
  if (shape.length <= 1) return data;
  const [, ...rest] = shape;
  const size = rest.reduce((a, b) => a * b, 1);
  const out: unknown[] = [];
  for (let i = 0; i < data.length; i += size) out.push(nest(data.slice(i, i + size), rest));
  return out;
}

/**
 * A logged request's inputs as a /predict body ({"data": rows} for one
 * input, {"inputs": {name: rows}} for several), or undefined when an input
 * was not logged whole (redacted, summarized, strings).
 */
export function requestBody(rec: PayloadRecord): string | undefined {
  const ins = rec.inputs ?? [];
  if (ins.length === 0 || ins.some((t: PayloadTensor) => t.redacted || t.summary || !t.data)) return undefined;
  const rows = (t: PayloadTensor) => nest(t.data ?? [], t.shape);
  const body = ins.length === 1 ? { data: rows(ins[0]) } : { inputs: Object.fromEntries(ins.map((t) => [t.name, rows(t)])) };
  return JSON.stringify(body);
}

/** A PSI series as a small line: the threshold of drift (0.25) dashed. */
function Sparkline({ values }: { values: number[] }) {
  if (values.length === 0) return null;
  const w = 120;
  const h = 24;
  const top = Math.max(0.3, ...values);
  const x = (i: number) => (values.length === 1 ? w / 2 : (i / (values.length - 1)) * w);
  const y = (v: number) => h - (Math.min(v, top) / top) * h;
  const pts = values.map((v, i) => `${x(i).toFixed(1)},${y(v).toFixed(1)}`).join(" ");
  return (
    <svg width={w} height={h} role="img" aria-label={`PSI over time: ${values.map((v) => v.toFixed(2)).join(", ")}`} className="sparkline">
      <line x1={0} x2={w} y1={y(0.25)} y2={y(0.25)} className="sparkline-limit" />
      <polyline points={pts} fill="none" className="sparkline-line" />
    </svg>
  );
}

/** What a feature was in a window: its mean, or its top categories. */
function describe(s: { mean?: number; shares?: Record<string, number> }): string {
  if (s.mean !== undefined) return s.mean.toPrecision(4);
  const top = Object.entries(s.shares ?? {})
    .sort((a, b) => b[1] - a[1])
    .slice(0, 3);
  return top.map(([k, v]) => `${k}: ${(v * 100).toFixed(0)}%`).join(", ");
}

const levelStatus: Record<string, string> = { stable: "ready", moderate: "starting", drift: "failed" };

/**
 * A model's ready deployments' logged traffic; onTry opens a logged request
 * in Try it; trainingRun names the run a deployment's version was trained in
 * (whose logged data summary can be the reference).
 */
export function Traffic({
  deployments,
  onTry,
  trainingRun,
}: {
  deployments: Deployment[];
  onTry: (deploymentId: string, body: string) => void;
  trainingRun?: (d: Deployment) => string | undefined;
}) {
  const [depId, setDepId] = useState("");
  const [refFrom, setRefFrom] = useState("");
  const [refTo, setRefTo] = useState("");
  const [useTraining, setUseTraining] = useState(false);
  const dep = deployments.find((d) => d.id === depId) ?? deployments[0];
  const q = dep ? trafficQuery(dep) : undefined;
  const key = q ? JSON.stringify(q) : "";
  const runId = dep && trainingRun ? trainingRun(dep) : undefined;
  const training = useTraining && runId !== undefined;
  // The training run's data summary; else a chosen window (local times from the inputs); else the first records logged.
  const reference: Record<string, string> = training
    ? { reference_run: runId }
    : refFrom && refTo
      ? { reference_from: new Date(refFrom).toISOString(), reference_to: new Date(refTo).toISOString() }
      : {};
  const report = useApi(
    (s) => (q ? get<DriftReport>("/api/payloads/drift", { ...q, ...reference }, s) : Promise.resolve(undefined)),
    [key, refFrom, refTo, training, runId],
    10000,
  );
  const recent = useApi((s) => (q ? get<PayloadList>("/api/payloads", { ...q, limit: 8 }, s) : Promise.resolve(undefined)), [key], 10000);
  if (!dep) return <Empty>Deploy a version: with payload logging on, its traffic is compared with a reference here.</Empty>;
  // A failed read (say, a run that logged no data summary) shows its error, not the last report.
  const r = report.error ? undefined : report.data;
  const recs = recent.data?.records ?? [];
  return (
    <div className="stack traffic">
      <div className="row">
        <DeploymentSelect deployments={deployments} value={dep.id} onChange={setDepId} />
        {runId !== undefined && (
          <label className="inline" title={`the data summary run ${runId} logged (run.log_reference in its training script)`}>
            <input type="checkbox" checked={training} onChange={(e) => setUseTraining(e.target.checked)} />
            Against the training data
          </label>
        )}
        {!training && (
          <>
            <label className="inline">
              Reference from
              <input type="datetime-local" value={refFrom} onChange={(e) => setRefFrom(e.target.value)} />
            </label>
            <label className="inline">
              to
              <input type="datetime-local" value={refTo} onChange={(e) => setRefTo(e.target.value)} />
            </label>
            {(refFrom || refTo) && (
              <button type="button" className="ghost" onClick={() => (setRefFrom(""), setRefTo(""))}>
                First logged
              </button>
            )}
          </>
        )}
      </div>
      <ErrorNote error={report.error ?? recent.error} />
      {recs.length === 0 ? (
        <Empty>
          No logged requests: the dashboard&apos;s deployments log a sample of their requests and responses with <code>--deployment-payload-rate</code> (a
          standalone server: <code>fw serve --log-payloads 0.01 --log-payloads-to DASHBOARD_URL</code>).
        </Empty>
      ) : (
        <>
          {r && r.features.length > 0 ? (
            <>
              <p className="muted small">
                {r.reference_run ? (
                  <>
                    Reference: the training data of run <Link to={`/runs/${seg(r.reference_run)}`}>{r.reference_run}</Link> ({r.reference.records} rows)
                  </>
                ) : (
                  <>
                    Reference: {refFrom && refTo ? "the" : "the first"} {r.reference.records} logged ({fmtTime(r.reference.from)} to {fmtTime(r.reference.to)})
                  </>
                )}
                ; current: the latest {r.current.records}. <span title={r.statistic}>PSI</span> below 0.1 is stable, 0.25 and above drift.
              </p>
              <table className="table drift-table" aria-label="Drift">
                <thead>
                  <tr>
                    <th>feature</th>
                    <th className="num">PSI</th>
                    <th>level</th>
                    <th>reference</th>
                    <th>current</th>
                    <th>over time</th>
                  </tr>
                </thead>
                <tbody>
                  {r.features.map((f) => (
                    <tr key={f.name} data-feature={f.name} data-level={f.level}>
                      <td>{f.name}</td>
                      <td className="num">{f.psi.toFixed(3)}</td>
                      <td>
                        <StatusBadge status={levelStatus[f.level] ?? f.level} />
                        <span className="sr-only">{f.level}</span>
                      </td>
                      <td>{describe(f.reference)}</td>
                      <td>{describe(f.current)}</td>
                      <td>
                        <Sparkline values={f.series.map((b) => b.psi)} />
                      </td>
                    </tr>
                  ))}
                </tbody>
              </table>
            </>
          ) : (
            <p className="muted small">Not enough logged requests after the reference yet to compare.</p>
          )}
          <h3>Latest logged requests</h3>
          <table className="table">
            <thead>
              <tr>
                <th>when</th>
                <th className="num">ms</th>
                <th>outcome</th>
                <th />
              </tr>
            </thead>
            <tbody>
              {recs.map((p) => {
                const body = requestBody(p.record);
                return (
                  <tr key={p.id}>
                    <td title={fmtTime(p.time)}>{fmtAgo(p.time)}</td>
                    <td className="num">{p.record.latency_ms.toFixed(2)}</td>
                    <td>{p.failed ? <StatusBadge status="failed" /> : "ok"}</td>
                    <td>
                      <button type="button" className="link" disabled={!body} title={body ? "load its inputs into Try it" : "an input was not logged whole"} onClick={() => body && onTry(dep.id, body)}>
                        Open in Try it
                      </button>
                    </td>
                  </tr>
                );
              })}
            </tbody>
          </table>
        </>
      )}
    </div>
  );
}
