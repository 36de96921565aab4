// The live monitor of one training run (/training/:runId): header with
// status, progress with ETA, a chart per metric fed by the WebSocket, the log
// tail, a Stop button with confirmation, and the run's final state once it
// has ended. One stream subscription feeds everything on the page.
import { useCallback, useEffect, useMemo, useRef, useState } from "react";
import { Link } from "react-router-dom";
import { ApiError, get, post, seg } from "../api/client";
import { num, type StreamEvent } from "../api/stream";
import type { Job, Progress, Run, RunMetrics } from "../api/types";
import { useAction, useApi, useNow, useQueryParam, useStream } from "../lib/hooks";
import { fmtDuration, fmtNum, fmtTime } from "../lib/format";
import { upsertPoint, type XY } from "../lib/series";
import { Chart } from "./Chart";
import { LogTail, appendBounded, linesOfEvent, type TailLine } from "./LogTail";
import { Card, ConfirmDialog, Empty, ErrorNote, ProgressBar, StatusBadge } from "./ui";

/**
 * A run's progress as the API (Run.progress) and the stream's "progress"
 * events report it: the document's Progress, any field possibly absent (the
 * stream's events are described in docs/stream.md, not in the OpenAPI
 * document).
 */
export type RunProgress = { [K in keyof Progress]?: Progress[K] | null };

/** Statuses after which a run no longer changes. */
export const ENDED = new Set(["finished", "failed", "stopped"]);

/** How far along a run is: the step counts, else the epochs; null when unknown. */
export function progressFraction(p: RunProgress | undefined): { value: number; total: number; frac: number } | null {
  if (!p) return null;
  if (p.total_steps && p.total_steps > 0 && p.step != null) return { value: p.step, total: p.total_steps, frac: Math.min(1, p.step / p.total_steps) };
  if (p.total_epochs && p.total_epochs > 0 && p.epoch != null) return { value: p.epoch, total: p.total_epochs, frac: Math.min(1, p.epoch / p.total_epochs) };
  return null;
}

/** Seconds left, from the time since start and the fraction done (elapsed * (1-frac)/frac). */
export function etaSeconds(elapsedSec: number, frac: number): number | null {
  if (!(frac > 0) || frac >= 1 || !(elapsedSec > 0)) return frac >= 1 ? 0 : null;
  return (elapsedSec * (1 - frac)) / frac;
}

/** The metric series of a run, kept across renders and appended to in place. */
function useLiveMetrics(runId: string) {
  const series = useRef(new Map<string, XY>());
  const [version, setVersion] = useState(0);
  const [error, setError] = useState<unknown>();
  const [reloads, setReloads] = useState(0);
  const frame = useRef(0);

  // Redraws at most once per animation frame however fast points arrive.
  const bump = useCallback(() => {
    if (frame.current) return;
    const raf = typeof requestAnimationFrame === "function" ? requestAnimationFrame : (f: () => void) => setTimeout(f, 16) as unknown as number;
    frame.current = raf(() => {
      frame.current = 0;
      setVersion((v) => v + 1);
    });
  }, []);

  useEffect(() => {
    const ac = new AbortController();
    get<RunMetrics>(`/api/runs/${seg(runId)}/metrics`, { max_points: 2000 }, ac.signal)
      .then((a) => {
        const fresh = new Map<string, XY>();
        for (const s of a.series ?? []) {
          const xy: XY = { x: [], y: [] };
          for (const b of s.buckets ?? []) upsertPoint(xy, b.step_max, num(b.last));
          fresh.set(s.key, xy);
        }
        // Points streamed while the request was on its way are kept.
        for (const [k, xy] of series.current) {
          const f = fresh.get(k) ?? { x: [], y: [] };
          xy.x.forEach((x, i) => upsertPoint(f, x, xy.y[i]));
          fresh.set(k, f);
        }
        series.current = fresh;
        setError(undefined);
        bump();
      })
      .catch((e: unknown) => {
        if (!ac.signal.aborted) setError(e);
      });
    return () => ac.abort();
  }, [runId, reloads, bump]);

  const onMetric = useCallback(
    (e: StreamEvent) => {
      const values = (e.data.values ?? {}) as Record<string, unknown>;
      for (const [k, v] of Object.entries(values)) {
        let s = series.current.get(k);
        if (!s) {
          s = { x: [], y: [] };
          series.current.set(k, s);
        }
        const step = typeof e.data.step === "number" ? e.data.step : s.x.length > 0 ? s.x[s.x.length - 1] + 1 : 0;
        upsertPoint(s, step, num(v));
      }
      bump();
    },
    [bump],
  );
  const reload = useCallback(() => setReloads((r) => r + 1), []);
  return { series: series.current, version, error, onMetric, reload };
}

/** One metric's chart with its latest value (data-points lets tests see it grow). */
function MetricChart({ name, xy, version, logY, smoothing }: { name: string; xy: XY; version: number; logY: boolean; smoothing: number }) {
  // Copies per redraw: the chart sees new arrays when points were added in place.
  // eslint-disable-next-line react-hooks/exhaustive-deps
  const x = useMemo(() => xy.x.slice(), [xy, version]);
  // eslint-disable-next-line react-hooks/exhaustive-deps
  const series = useMemo(() => [{ label: name, values: xy.y.slice() }], [xy, version, name]);
  const n = xy.x.length;
  const last = n > 0 ? xy.y[n - 1] : null;
  return (
    <section className="card metric-card" aria-label={`Metric ${name}`} data-points={n}>
      <header className="card-head">
        <h2 className="mono">{name}</h2>
        <span className="card-actions metric-last" aria-label={`${name} latest value`}>
          <strong>{fmtNum(last)}</strong>
          {n > 0 && <span className="muted"> @ step {xy.x[n - 1]}</span>}
        </span>
      </header>
      <Chart x={x} series={series} logY={logY} smoothing={smoothing} height={200} testId={`chart-${name}`} />
    </section>
  );
}

/** Smoothing and log-scale controls kept in the URL. */
function ChartControls({ smoothing, setSmoothing, logY, setLogY }: { smoothing: number; setSmoothing: (v: string) => void; logY: boolean; setLogY: (v: string) => void }) {
  return (
    <div className="row chart-controls">
      <label>
        Smoothing
        <input type="range" min={0} max={0.99} step={0.01} value={smoothing} onChange={(e) => setSmoothing(e.target.value === "0" ? "" : e.target.value)} />
        <span className="num mono">{smoothing.toFixed(2)}</span>
      </label>
      <label className="check">
        <input type="checkbox" checked={logY} onChange={(e) => setLogY(e.target.checked ? "1" : "")} /> Log scale
      </label>
    </div>
  );
}

/** The final state of an ended run: status, exit code, error, final metrics and what to do next. */
function FinalState({ run, job, status }: { run: Run; job?: Job; status: string }) {
  const exit = run.exit_code ?? job?.exit_code ?? null;
  const metrics = Object.entries(run.metrics ?? {}).sort(([a], [b]) => a.localeCompare(b));
  return (
    <section className={`card final-state final-${status}`} aria-label="Final state" data-testid="final-state">
      <div className="final-head">
        <span className="final-status">
          Run {status === "finished" ? "finished" : status === "failed" ? "failed" : "stopped"} <StatusBadge status={status} />
        </span>
        <span className="muted">
          {exit != null && <>exit code {exit} · </>}
          ended {fmtTime(run.ended ?? job?.ended ?? undefined)}
          {run.started && run.ended && <> · took {fmtDuration((Date.parse(run.ended) - Date.parse(run.started)) / 1000)}</>}
        </span>
        <span className="card-actions">
          <Link className="button primary" to={`/runs/${seg(run.id)}`}>
            Open run page
          </Link>
          <Link className="button" to={`/runs/${seg(run.id)}?tab=checkpoints`}>
            Export a checkpoint
          </Link>
        </span>
      </div>
      {status === "failed" && run.error && (
        <div className="final-error">
          <strong>Error</strong>
          <pre className="logs final-error-text">{run.error}</pre>
          {run.traceback && <pre className="logs final-error-text">{run.traceback}</pre>}
        </div>
      )}
      {metrics.length > 0 && (
        <div className="final-metrics">
          {metrics.map(([k, s]) => (
            <div className="stat" key={k}>
              <span className="value">{fmtNum(s.last === undefined ? null : num(s.last))}</span>
              <span className="label mono">{k}</span>
            </div>
          ))}
        </div>
      )}
    </section>
  );
}

/** The Stop button and its confirmation dialog. */
export function StopButton({ runId, name, onStopped, compact }: { runId: string; name: string; onStopped?: () => void; compact?: boolean }) {
  const [open, setOpen] = useState(false);
  const stopping = useAction();
  const stop = () =>
    void stopping.run(async () => {
      await post(`/api/training/${seg(runId)}/stop`);
      setOpen(false);
      onStopped?.();
    });
  return (
    <>
      <button type="button" className={compact ? "danger small" : "danger"} onClick={() => setOpen(true)} aria-label={compact ? `Stop ${name}` : undefined}>
        Stop
      </button>
      <ConfirmDialog open={open} title="Stop training" action="Stop run" busyAction="Stopping…" busy={stopping.busy} onConfirm={stop} onClose={() => setOpen(false)}>
        <p>
          Stop run <strong>{name}</strong>? The recipe saves a final checkpoint, then the run ends as <em>stopped</em>; you can resume it from its run page.
        </p>
        <ErrorNote error={stopping.error} />
      </ConfirmDialog>
    </>
  );
}

/** The live monitor of one run. */
export function LiveRun({ runId }: { runId: string }) {
  const [streamStatus, setStreamStatus] = useState<string>();
  const [liveProgress, setLiveProgress] = useState<RunProgress>();
  const [lines, setLines] = useState<TailLine[]>([]);
  const [logKey, setLogKey] = useState(0);
  const [stopRequested, setStopRequested] = useState(false);
  const [smoothStr, setSmoothing] = useQueryParam("smooth", "0");
  const [logStr, setLogY] = useQueryParam("log", "");
  const smoothing = Math.min(0.99, Math.max(0, Number(smoothStr) || 0));
  const logY = logStr === "1";
  const now = useNow(1000);

  const ended0 = streamStatus !== undefined && ENDED.has(streamStatus);
  const [jobDone, setJobDone] = useState(false);
  const runState = useApi((s) => get<Run>(`/api/runs/${seg(runId)}`, undefined, s), [runId], ended0 ? 0 : 5000);
  // The job is polled until its process has exited (its exit code comes then).
  const jobState = useApi(
    (s) =>
      get<Job>(`/api/training/${seg(runId)}`, undefined, s).catch((e: unknown) => {
        // A run not started by this dashboard has no job: not an error here.
        if (e instanceof ApiError && e.status === 404) return undefined;
        throw e;
      }),
    [runId],
    jobDone ? 0 : ended0 ? 1000 : 5000,
  );
  const metrics = useLiveMetrics(runId);
  const run = runState.data;
  // "lost": its dashboard replica stopped and another ended its run (docs/replicas.md).
  const jobExited =
    jobState.data?.state === "exited" || jobState.data?.state === "lost" || (jobState.data === undefined && !jobState.loading && !jobState.error);
  useEffect(() => setJobDone(jobExited), [jobExited]);
  const reloadRun = runState.reload;
  const reloadJob = jobState.reload;

  // Forget the previous run's live state when the URL changes.
  useEffect(() => {
    setStreamStatus(undefined);
    setLiveProgress(undefined);
    setLines([]);
    setStopRequested(false);
  }, [runId]);

  const onMetric = metrics.onMetric;
  const onEvent = useCallback(
    (e: StreamEvent) => {
      if (e.run_id !== runId) return;
      switch (e.type) {
        case "metric":
          onMetric(e);
          break;
        case "progress":
          setLiveProgress(e.data as RunProgress);
          break;
        case "log":
          setLines((prev) => appendBounded(prev, linesOfEvent(e)));
          break;
        case "status": {
          const st = typeof e.data.status === "string" ? e.data.status : undefined;
          if (st) setStreamStatus(st);
          if (st && ENDED.has(st)) {
            reloadRun();
            reloadJob();
          }
          break;
        }
      }
    },
    [runId, onMetric, reloadRun, reloadJob],
  );
  const reloadMetrics = metrics.reload;
  const onResync = useCallback(() => {
    reloadRun();
    reloadJob();
    reloadMetrics();
    setLines([]);
    setLogKey((k) => k + 1);
  }, [reloadRun, reloadJob, reloadMetrics]);
  const connected = useStream([runId], onEvent, onResync);

  if (!run) {
    if (runState.error) return <ErrorNote error={runState.error} />;
    return <Empty>Loading run {runId}…</Empty>;
  }

  // The store is authoritative once the run has ended; the stream is newer before.
  const status = ENDED.has(run.status) ? run.status : streamStatus ?? run.status;
  const ended = ENDED.has(status);
  const job = jobState.data;
  const stoppable = !ended && (status === "running" || status === "queued") && (!job || job.state === "running" || job.state === "queued");
  const prog = progressFraction(liveProgress ?? run.progress);
  const startedAt = run.started ? Date.parse(run.started) : NaN;
  const endAt = ended && run.ended ? Date.parse(run.ended) : now;
  const elapsed = Number.isFinite(startedAt) ? (endAt - startedAt) / 1000 : NaN;
  const eta = !ended && prog ? etaSeconds(elapsed, prog.frac) : null;
  const keys = [...metrics.series.keys()].sort();

  return (
    <div className="stack live-run">
      <header className="live-head">
        <div>
          <h1>
            {run.name || run.id} <StatusBadge status={status} />
          </h1>
          <div className="muted row">
            <span>
              Experiment <Link to={`/experiments/${seg(run.experiment_id)}`}>{run.experiment}</Link>
            </span>
            {job && <span>· recipe <code>{job.recipe}</code></span>}
            {run.name && run.name !== run.id && <span>· run <code>{run.id}</code></span>}
            {Number.isFinite(elapsed) && <span>· {ended ? "ran" : "running for"} {fmtDuration(elapsed)}</span>}
            {!ended && (
              <span className={connected ? "live-dot on" : "live-dot"} title={connected ? "Following the live stream" : "Connecting to the live stream…"}>
                {connected ? "live" : "connecting…"}
              </span>
            )}
          </div>
        </div>
        <div className="card-actions">
          <Link className="button ghost" to={`/runs/${seg(run.id)}`}>
            Run page
          </Link>
          {stoppable && !stopRequested && <StopButton runId={run.id} name={run.name || run.id} onStopped={() => setStopRequested(true)} />}
          {stopRequested && !ended && <span className="badge badge-stopping">stopping…</span>}
        </div>
      </header>

      <ErrorNote error={runState.error} />
      {ended && <FinalState run={run} job={job} status={status} />}

      <Card title="Progress">
        {prog ? (
          <ProgressBar value={Number.isInteger(prog.value) ? prog.value : Number(prog.value.toFixed(2))} total={prog.total} eta={eta} label="Training progress" />
        ) : (
          <ProgressBar value={0} total={0} label="Training progress" />
        )}
        {(liveProgress ?? run.progress)?.total_epochs ? (
          <p className="muted progress-epochs">
            epoch {fmtNum((liveProgress ?? run.progress)?.epoch ?? 0)} of {fmtNum((liveProgress ?? run.progress)?.total_epochs ?? 0)}
          </p>
        ) : null}
      </Card>

      <section aria-label="Metrics" className="stack">
        <div className="row metrics-head">
          <h2>Metrics</h2>
          <span className="spacer" />
          <ChartControls smoothing={smoothing} setSmoothing={setSmoothing} logY={logY} setLogY={setLogY} />
        </div>
        <ErrorNote error={metrics.error} />
        {keys.length === 0 ? (
          <Empty>{ended ? "This run logged no metrics." : "Waiting for the first metrics…"}</Empty>
        ) : (
          <div className="grid-2">
            {keys.map((k) => (
              <MetricChart key={k} name={k} xy={metrics.series.get(k)!} version={metrics.version} logY={logY} smoothing={smoothing} />
            ))}
          </div>
        )}
      </section>

      <Card title="Logs">
        <LogTail key={`${runId}-${logKey}`} runId={runId} lines={lines} follow />
      </Card>
    </div>
  );
}
