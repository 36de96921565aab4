// The home page: every experiment at a glance (runs, status counts, best
// metric, last activity), live system resources, recent activity, running
// training jobs and deployments.
import { useCallback, useState } from "react";
import { Link } from "react-router-dom";
import { get, seg } from "../api/client";
import { num, type StreamEvent } from "../api/stream";
import { ActivityFeed } from "../components/ActivityFeed";
import { DeploymentLink, deploymentStatus } from "../components/DeployDialog";
import { DataTable, numCol } from "../components/DataTable";
import { SystemCharts } from "../components/SystemCharts";
import { Card, Empty, ErrorNote, ProgressBar, RUN_STATUSES, StatusBadge } from "../components/ui";
import { fmtAgo, fmtNum, fmtTime } from "../lib/format";
import { useApi, useNow, useStream } from "../lib/hooks";
import type { DeploymentList, ExperimentDetail, ExperimentPage, Job, JobList, Run } from "../api/types";

/** How many experiments the home page shows. */
const SHOWN = 10;

/** True for metrics where lower is better (loss, error, mse...). */
export function lowerIsBetter(key: string): boolean {
  return /loss|err|mse|mae|rmse|perplex|nll|cost/i.test(key);
}

/** The metric most runs report (ties: validation and accuracy-like first). */
export function commonMetric(metrics: ExperimentDetail["metrics"]): string | undefined {
  const runs = (k: string) => metrics?.[k]?.runs ?? 0;
  const score = (k: string) => runs(k) * 10 + (/^val|valid|test/i.test(k) ? 2 : 0) + (/acc|f1|r2|auc/i.test(k) ? 1 : 0);
  return Object.keys(metrics ?? {}).sort((a, b) => score(b) - score(a) || a.localeCompare(b))[0];
}

interface Glance {
  detail: ExperimentDetail;
  metric?: string;
  best?: { run: Run; value: number };
  lastActivity?: string;
}

/**
 * Loads one experiment's counts, last activity and per-metric extremes (the
 * detail carries them), then the best run's name: 2 requests.
 */
async function loadGlance(id: string, signal: AbortSignal): Promise<Glance> {
  const detail = await get<ExperimentDetail>(`/api/experiments/${seg(id)}`, undefined, signal);
  const metric = commonMetric(detail.metrics);
  const g: Glance = { detail, metric, lastActivity: detail.last_activity ?? detail.updated };
  const o = metric ? detail.metrics?.[metric] : undefined;
  if (metric && o) {
    const low = lowerIsBetter(metric);
    const runId = low ? o.min_run : o.max_run;
    if (runId) {
      const run = await get<Run>(`/api/runs/${seg(runId)}`, undefined, signal).catch(() => undefined);
      if (run) g.best = { run, value: num(low ? o.min : o.max) };
    }
  }
  return g;
}

/** One experiment's row in the glance table. */
function ExperimentRow({ exp, bump, now }: { exp: ExperimentDetail; bump: number; now: number }) {
  const g = useApi((s) => loadGlance(exp.id, s), [exp.id, bump], 30000);
  const counts = g.data?.detail.run_counts ?? {};
  return (
    <tr>
      <td>
        <Link to={`/experiments/${seg(exp.id)}`} className="strong">
          {exp.name}
        </Link>
        {exp.description && <div className="muted small ellipsis">{exp.description}</div>}
      </td>
      <td className="num">{g.data ? g.data.detail.runs ?? 0 : "…"}</td>
      <td>
        <span className="row tight wrap status-counts">
          {RUN_STATUSES.filter((s) => counts[s]).map((s) => (
            <span key={s} className={`badge badge-${s}`} title={`${counts[s]} ${s}`}>
              {counts[s]} {s}
            </span>
          ))}
          {g.data && Object.keys(counts).length === 0 && <span className="muted">no runs</span>}
        </span>
      </td>
      <td>
        {g.error ? (
          <span className="muted" title={g.error.message}>
            –
          </span>
        ) : g.data?.best && g.data.metric ? (
          <span>
            <span className="muted">
              {g.data.metric} {lowerIsBetter(g.data.metric) ? "min" : "max"}
            </span>{" "}
            <strong className="num">{fmtNum(g.data.best.value)}</strong>{" "}
            <Link to={`/runs/${seg(g.data.best.run.id)}`} className="small">
              {g.data.best.run.name || g.data.best.run.id.slice(0, 8)}
            </Link>
          </span>
        ) : (
          <span className="muted">–</span>
        )}
      </td>
      <td title={fmtTime(g.data?.lastActivity ?? exp.updated)}>{fmtAgo(g.data?.lastActivity ?? exp.updated, now)}</td>
    </tr>
  );
}

/** Experiments at a glance (at most SHOWN, most recently updated first). */
function ExperimentsGlance({ bump }: { bump: number }) {
  const exps = useApi((s) => get<ExperimentPage>("/api/experiments", { limit: SHOWN, sort: "updated", desc: true }, s), [bump], 30000);
  const now = useNow(10000);
  const list = exps.data?.experiments ?? [];
  return (
    <Card title="Experiments" actions={<Link to="/experiments">All experiments →</Link>}>
      <ErrorNote error={exps.error} />
      {exps.data && list.length === 0 ? (
        <Empty>
          No experiments yet. <Link to="/training">Start a training job</Link> or log runs with the Python SDK.
        </Empty>
      ) : (
        <DataTable className="glance-table" scroll="table-wrap" columns={["Experiment", numCol("Runs"), "Status", "Best", "Last activity"]}>
          {list.map((e) => (
            <ExperimentRow key={e.id} exp={e} bump={bump} now={now} />
          ))}
        </DataTable>
      )}
      {exps.data?.next && (
        <p className="muted small">
          Showing the {SHOWN} most recently updated. <Link to="/experiments">See all</Link>
        </p>
      )}
    </Card>
  );
}

/** One active training job with its run's progress. */
function JobRow({ job }: { job: Job }) {
  const run = useApi((s) => get<Run>(`/api/runs/${seg(job.run_id)}`, undefined, s), [job.run_id], 3000);
  const p = run.data?.progress;
  const byStep = p && p.total_steps > 0;
  return (
    <li className="job-item">
      <div className="row between">
        <Link to={`/training/${seg(job.run_id)}`} className="strong">
          {job.recipe} <span className="muted">in {job.experiment}</span>
        </Link>
        <StatusBadge status={job.state} />
      </div>
      {p && (byStep || p.total_epochs > 0) ? (
        <ProgressBar value={byStep ? p.step : p.epoch} total={byStep ? p.total_steps : p.total_epochs} label={`progress of ${job.recipe}`} />
      ) : (
        <span className="muted small">started {fmtAgo(job.started ?? job.queued)}</span>
      )}
    </li>
  );
}

/** Training jobs that are queued or running. */
function RunningJobs({ bump }: { bump: number }) {
  const jobs = useApi((s) => get<JobList>("/api/training", undefined, s), [bump], 5000);
  const active = (jobs.data?.jobs ?? []).filter((j) => j.state === "running" || j.state === "queued");
  return (
    <Card title="Running jobs" actions={<Link to="/training">Start training →</Link>}>
      <ErrorNote error={jobs.error} />
      {jobs.data && active.length === 0 ? (
        <Empty>No training running.</Empty>
      ) : (
        <ul className="job-list">
          {active.map((j) => (
            <JobRow key={j.run_id} job={j} />
          ))}
        </ul>
      )}
    </Card>
  );
}

/** Managed deployments with state, URL and request rate. */
function DeploymentsGlance() {
  const deps = useApi((s) => get<DeploymentList>("/api/deployments", undefined, s), [], 5000);
  const list = deps.data?.deployments ?? [];
  return (
    <Card title="Deployments" actions={<Link to="/models">Models →</Link>}>
      <ErrorNote error={deps.error} />
      {deps.data && list.length === 0 ? (
        <Empty>Nothing deployed. Deploy a model version from its page.</Empty>
      ) : (
        <DataTable className="compact" columns={["Model", "State", "URL", numCol("req/s")]}>
          {list.map((d) => (
            <tr key={d.id}>
              <td>
                <Link to={`/models/${seg(d.model)}`}>{d.model}</Link> <span className="muted">v{d.version}</span>
              </td>
              <td>
                <StatusBadge status={deploymentStatus(d)} />
              </td>
              <td>
                <DeploymentLink url={d.url} short />
              </td>
              <td className="num">{d.request_rate != null ? d.request_rate.toFixed(2) : "–"}</td>
            </tr>
          ))}
        </DataTable>
      )}
    </Card>
  );
}

/** The / page. */
export function HomePage() {
  // Run status changes, exports and deploys refresh the lists at once.
  const [bump, setBump] = useState(0);
  const onEvent = useCallback((e: StreamEvent) => {
    if (e.type === "status" || e.type === "export" || e.type === "deploy") setBump((b) => b + 1);
  }, []);
  useStream("*", onEvent, () => setBump((b) => b + 1));

  return (
    <div className="stack home">
      <header className="page-head">
        <div>
          <h1>Overview</h1>
          <p className="muted">Experiments, resources, activity, training and deployments on this dashboard.</p>
        </div>
      </header>
      <div className="home-grid">
        <div className="stack home-main">
          <ExperimentsGlance bump={bump} />
          <Card title="System" actions={<span className="muted small">last 5 minutes, live</span>}>
            <SystemCharts />
          </Card>
        </div>
        <div className="stack home-side">
          <RunningJobs bump={bump} />
          <DeploymentsGlance />
          <Card title="Recent activity">
            <ActivityFeed limit={30} bump={bump} />
          </Card>
        </div>
      </div>
    </div>
  );
}
