// /runs/:id: one run. A header with status, progress and ETA, then tabs
// (?tab=) for the metric charts (live while the run trains), the overview
// (params, metric summaries, tags, source), logs, checkpoints (Resume, Fork,
// Export), system metrics and artifacts. The header renames, tags, annotates
// (notes) and deletes the run (components/RunEditing). One stream subscription feeds the
// charts and the progress; the log tail follows the run's log events.
import { useCallback, useEffect, useMemo, useRef, useState } from "react";
import { Link, useParams } from "react-router-dom";
import { download, get, seg } from "../api/client";
import { num, type StreamEvent } from "../api/stream";
import { DataTable, numCol } from "../components/DataTable";
import { Card, Empty, ErrorNote, KeyValues, ProgressBar, StatusBadge } from "../components/ui";
import { RunEditActions, RunNotes, RunTagsEditor } from "../components/RunEditing";
import { ChartControls, RunCharts, useChartSettings, type LiveEvent } from "../components/RunCharts";
import { CheckpointActions } from "../components/CheckpointActions";
import { LogTail } from "../components/LogTail";
import { RunTraces } from "../components/RunTraces";
import { StopButton, etaSeconds, progressFraction, type RunProgress } from "../components/LiveRun";
import { runDuration } from "../components/RunsTable";
import type { Run, RunArtifacts } from "../api/types";
import { fmtBytes, fmtDuration, fmtNum, fmtParam, fmtTime } from "../lib/format";
import { useApi, useNow, useQueryParam, useStream } from "../lib/hooks";

const TABS = [
  ["metrics", "Metrics"],
  ["overview", "Params & summary"],
  ["logs", "Logs"],
  ["checkpoints", "Checkpoints"],
  ["system", "System"],
  ["artifacts", "Artifacts"],
  ["traces", "Traces"],
] as const;

const LIVE = new Set(["running", "queued"]);

/** The run page. */
export function RunPage() {
  const { id = "" } = useParams();
  const [tab, setTab] = useQueryParam("tab", "metrics");
  const [live, setLive] = useState(false);
  const run = useApi((signal) => get<Run>(`/api/runs/${seg(id)}`, undefined, signal), [id], live ? 5000 : 0);
  const r = run.data;
  const running = !!r && LIVE.has(r.status);
  useEffect(() => setLive(running), [running]);
  const settings = useChartSettings();

  // The page's one stream subscription, forwarded to the charts.
  const listeners = useRef(new Set<(e: LiveEvent) => void>());
  const subscribe = useCallback((fn: (e: LiveEvent) => void) => {
    listeners.current.add(fn);
    return () => {
      listeners.current.delete(fn);
    };
  }, []);
  const [progress, setProgress] = useState<RunProgress>();
  const { reload } = run;
  const onEvent = useCallback(
    (e: StreamEvent) => {
      if (e.type === "progress") setProgress(e.data as RunProgress);
      if (e.type === "status") reload();
      for (const l of listeners.current) l(e);
    },
    [reload],
  );
  const onResync = useCallback(() => {
    reload();
    for (const l of listeners.current) l({ type: "resync" });
  }, [reload]);
  useStream(running ? [id] : null, onEvent, onResync);
  useEffect(() => setProgress(undefined), [r?.progress?.step, r?.progress?.epoch]);

  if (!r) {
    return (
      <div className="stack">
        <nav className="crumbs" aria-label="Breadcrumb">
          <Link to="/experiments">Experiments</Link> / <span>{id}</span>
        </nav>
        {run.error ? <ErrorNote error={run.error} /> : <p className="muted">Loading run…</p>}
      </div>
    );
  }
  return (
    <div className="stack">
      <nav className="crumbs" aria-label="Breadcrumb">
        <Link to="/experiments">Experiments</Link> / <Link to={`/experiments/${encodeURIComponent(r.experiment_id)}`}>{r.experiment}</Link> / <span>{r.name}</span>
      </nav>
      <RunHeader run={r} progress={progress} onChanged={reload} />
      <div className="tabs" role="tablist" aria-label="Run sections">
        {TABS.map(([k, label]) => (
          <button key={k} type="button" role="tab" id={`tab-${k}`} aria-selected={tab === k} aria-controls="run-tabpanel" onClick={() => setTab(k)}>
            {label}
          </button>
        ))}
      </div>
      <div id="run-tabpanel" role="tabpanel" aria-labelledby={`tab-${tab}`}>
        {tab === "metrics" && (
          <Card>
            <ChartControls settings={settings} timeNote="time estimated from steps (linear between the start and each key's last write)" />
            <RunCharts run={r} settings={settings} subscribe={subscribe} />
          </Card>
        )}
        {tab === "overview" && <Overview run={r} />}
        {tab === "logs" && (
          <Card title="Logs">
            <LogTail runId={r.id} height={560} />
          </Card>
        )}
        {tab === "checkpoints" && (
          <Card title="Checkpoints">
            <CheckpointActions run={r} onStarted={reload} />
          </Card>
        )}
        {tab === "system" && (
          <Card title="System metrics of the training process">
            <ChartControls settings={settings} noXAxis />
            <RunCharts run={r} system settings={settings} subscribe={subscribe} />
          </Card>
        )}
        {tab === "artifacts" && <Artifacts run={r} />}
        {tab === "traces" && (
          <Card title="Traces (MLflow's tracing API)">
            <RunTraces runId={r.id} />
          </Card>
        )}
      </div>
    </div>
  );
}

/** Name, status, progress with ETA, timing, origin, tags, notes, the error of a failed run; rename and delete. */
function RunHeader({ run: r, progress, onChanged }: { run: Run; progress?: RunProgress; onChanged: () => void }) {
  const now = useNow(1000);
  const p = { ...r.progress, ...progress };
  const pf = progressFraction(p);
  const running = r.status === "running";
  const elapsed = runDuration(r, now);
  const eta = running && pf && elapsed !== null ? etaSeconds(elapsed, pf.frac) : null;
  return (
    <header className="card run-head">
      <div className="run-title">
        <h1>{r.name}</h1>
        <StatusBadge status={r.status} />
        <span className="spacer" />
        {running && r.source?.recipe && (
          <Link className="button" to={`/training/${encodeURIComponent(r.id)}`}>
            Live monitor
          </Link>
        )}
        {LIVE.has(r.status) && r.source?.recipe && <StopButton runId={r.id} name={r.name} onStopped={onChanged} />}
        <RunEditActions run={r} onChanged={onChanged} />
      </div>
      {pf && (
        <ProgressBar value={Math.round(pf.value * 100) / 100} total={pf.total} eta={running ? eta : null} label={`Progress of ${r.name}`} />
      )}
      <div className="run-meta row">
        <span>
          <span className="muted">started</span> {fmtTime(r.started)}
        </span>
        {r.ended && (
          <span>
            <span className="muted">ended</span> {fmtTime(r.ended)}
          </span>
        )}
        <span>
          <span className="muted">{running ? "running for" : "took"}</span> {fmtDuration(elapsed)}
        </span>
        {p.total_epochs ? (
          <span>
            <span className="muted">epoch</span> {fmtNum(p.epoch ?? 0)} / {fmtNum(p.total_epochs)}
          </span>
        ) : null}
        {r.source?.recipe && (
          <span>
            <span className="muted">recipe</span> <code>{r.source.recipe}</code>
          </span>
        )}
        {r.parent_run_id && (
          <span>
            <span className="muted">forked from</span> <Link to={`/runs/${encodeURIComponent(r.parent_run_id)}`}>{r.parent_run_id}</Link>
            {r.parent_checkpoint && <code> {r.parent_checkpoint}</code>}
          </span>
        )}
        <span className="mono small muted">{r.id}</span>
      </div>
      <RunTagsEditor run={r} onChanged={onChanged} />
      <RunNotes run={r} onChanged={onChanged} />
      {r.error && (
        <div className="error-note" role="alert">
          <strong>{r.error}</strong>
          {r.exit_code != null && <span> (exit code {r.exit_code})</span>}
          {r.traceback && (
            <details>
              <summary>Traceback</summary>
              <pre className="traceback">{r.traceback}</pre>
            </details>
          )}
        </div>
      )}
    </header>
  );
}

/** Params, metric summaries and the source of the run. */
function Overview({ run: r }: { run: Run }) {
  const params = useMemo(() => Object.entries(r.params ?? {}).sort(([a], [b]) => a.localeCompare(b)), [r.params]);
  const metrics = useMemo(() => Object.entries(r.metrics ?? {}).sort(([a], [b]) => a.localeCompare(b)), [r.metrics]);
  const src = r.source ?? {};
  return (
    <div className="grid-2 run-tables">
      <Card title={`Params (${params.length})`}>
        {params.length === 0 ? (
          <Empty>No params logged.</Empty>
        ) : (
          <DataTable className="params" columns={["Param", "Value"]}>
            {params.map(([k, v]) => (
              <tr key={k}>
                <td className="mono">{k}</td>
                <td className="mono" title={fmtParam(v)}>
                  {fmtParam(v)}
                </td>
              </tr>
            ))}
          </DataTable>
        )}
      </Card>
      <div className="stack">
        <Card title="Metric summaries">
          {metrics.length === 0 ? (
            <Empty>No metrics logged.</Empty>
          ) : (
            <DataTable columns={["Metric", ...["Last", "Min", "Max", "Step", "Count"].map(numCol)]}>
              {metrics.map(([k, s]) => (
                <tr key={k}>
                  <td className="mono">{k}</td>
                  <td className="num">{fmtNum(num(s.last))}</td>
                  <td className="num">{fmtNum(num(s.min))}</td>
                  <td className="num">{fmtNum(num(s.max))}</td>
                  <td className="num">{s.last_step}</td>
                  <td className="num">{s.count}</td>
                </tr>
              ))}
            </DataTable>
          )}
        </Card>
        <Card title="Source">
          <KeyValues
            items={[
              ["experiment", <Link to={`/experiments/${encodeURIComponent(r.experiment_id)}`}>{r.experiment}</Link>],
              ["recipe", src.recipe ?? "–"],
              ["command", src.command ? <code>{[src.command, ...(src.args ?? [])].join(" ")}</code> : "–"],
              ["git commit", src.git_commit ? <code>{src.git_commit}</code> : "–"],
              ["host / pid", src.host ? `${src.host} / ${src.pid ?? "–"}` : "–"],
              ["created", fmtTime(r.created)],
              ["updated", fmtTime(r.updated)],
            ]}
          />
        </Card>
      </div>
    </div>
  );
}

/** The files the run logged, each downloadable. */
function Artifacts({ run }: { run: Run }) {
  const a = useApi((signal) => get<RunArtifacts>(`/api/runs/${seg(run.id)}/artifacts`, undefined, signal), [run.id, run.updated]);
  const [saveError, setSaveError] = useState<unknown>();
  const list = a.data?.artifacts ?? [];
  return (
    <Card title="Artifacts">
      <ErrorNote error={a.error} />
      <ErrorNote error={saveError} />
      {!a.loading && !a.error && list.length === 0 && <Empty>No artifacts: log files with run.artifact(path) in fw.track.</Empty>}
      {list.length > 0 && (
        <DataTable columns={["Path", numCol("Size"), "Logged", ""]}>
          {list.map((f) => (
            <tr key={f.path}>
              <td className="mono">{f.path}</td>
              <td className="num">{fmtBytes(f.size)}</td>
              <td className="muted">{fmtTime(f.time)}</td>
              <td>
                <button type="button" aria-label={`Download ${f.path}`} onClick={() => download(`/api/runs/${seg(run.id)}/download`, { kind: "artifact", path: f.path }, f.path.split("/").pop() ?? f.path).catch(setSaveError)}>
                  Download
                </button>
              </td>
            </tr>
          ))}
        </DataTable>
      )}
    </Card>
  );
}
