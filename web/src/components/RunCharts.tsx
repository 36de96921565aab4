// A run's metric charts: one Chart per key from GET /api/runs/{id}/metrics
// (downsampled buckets, drawn at each bucket's last step with its last
// value), the chart settings (log scale, smoothing, step or time axis) kept
// in the URL, and live points appended from the stream.
// (Zooming is the Chart's drag-zoom over the loaded buckets; a sharper
// re-fetch of the zoomed range is not done.)
//
// The time axis: the store's buckets carry steps, not wall times. Training
// metrics are placed in time by the same estimate /api/compare uses for
// align=time: linear between the run's start and the key's last write
// (summary last_time at last_step); live points are placed the same way
// (the estimate follows the run's summaries as they are refetched). System metrics are stored with the wall time in ms as their
// step (docs/tracking.md), so their time axis is exact.
import { useEffect, useMemo, useRef, useState } from "react";
import { get, seg } from "../api/client";
import { num, type StreamEvent } from "../api/stream";
import { upsertPoint, type XY } from "../lib/series";
import { useQueryParam } from "../lib/hooks";
import { fmtNum } from "../lib/format";
import { Chart } from "./Chart";
import { ErrorNote, Empty } from "./ui";
import type { Bucket, Run, RunMetrics, Summary } from "../api/types";

/** The chart settings shared by the run and compare pages, kept in the URL. */
export interface ChartSettings {
  log: boolean;
  smooth: number;
  xMode: "step" | "time";
  setLog: (v: boolean) => void;
  setSmooth: (v: number) => void;
  setXMode: (v: "step" | "time") => void;
}

/** The chart settings from the URL (?log=1&smooth=0.6&x=time). */
export function useChartSettings(): ChartSettings {
  const [log, setLog] = useQueryParam("log");
  const [smooth, setSmooth] = useQueryParam("smooth", "0");
  const [x, setX] = useQueryParam("x", "step");
  const s = Math.min(0.99, Math.max(0, Number(smooth) || 0));
  return {
    log: log === "1",
    smooth: s,
    xMode: x === "time" ? "time" : "step",
    setLog: (v) => setLog(v ? "1" : ""),
    setSmooth: (v) => setSmooth(v > 0 ? v.toFixed(2) : "0"),
    setXMode: (v) => setX(v),
  };
}

/** The controls of the chart settings. */
export function ChartControls({ settings, timeNote, noXAxis }: { settings: ChartSettings; timeNote?: string; noXAxis?: boolean }) {
  return (
    <div className="chart-controls row" role="group" aria-label="Chart settings">
      <label>
        <input type="checkbox" checked={settings.log} onChange={(e) => settings.setLog(e.target.checked)} /> Log scale
      </label>
      <label>
        Smoothing
        <input
          type="range"
          min={0}
          max={0.99}
          step={0.01}
          value={settings.smooth}
          onChange={(e) => settings.setSmooth(Number(e.target.value))}
          aria-valuetext={settings.smooth.toFixed(2)}
        />
        <span className="mono small">{settings.smooth.toFixed(2)}</span>
      </label>
      {!noXAxis && (
      <label>
        X axis
        <select value={settings.xMode} onChange={(e) => settings.setXMode(e.target.value === "time" ? "time" : "step")}>
          <option value="step">Step</option>
          <option value="time">Time</option>
        </select>
      </label>
      )}
      {!noXAxis && settings.xMode === "time" && timeNote && <span className="muted small">{timeNote}</span>}
      <span className="muted small">Drag on a chart to zoom, double-click to reset.</span>
    </div>
  );
}

/** Buckets as a series: each bucket at its last step with its last value. */
export function bucketsToXY(buckets: Bucket[] | null): XY {
  const out: XY = { x: [], y: [] };
  for (const b of buckets ?? []) {
    const y = num(b.last);
    out.x.push(b.step_max);
    out.y.push(Number.isFinite(y) ? y : null);
  }
  return out;
}

/** Maps a key's steps to Unix seconds: linear from the run's start to its last write. */
export function stepToTime(run: Pick<Run, "started" | "created">, summary: Pick<Summary, "last_step" | "last_time"> | undefined): (step: number) => number {
  const start = Date.parse(run.started ?? run.created) / 1000;
  const lastT = summary?.last_time ? Date.parse(summary.last_time) / 1000 : NaN;
  const lastS = summary?.last_step ?? 0;
  if (!Number.isFinite(start) || !Number.isFinite(lastT) || lastS <= 0) return (step) => start + step;
  const rate = (lastT - start) / lastS;
  return (step) => start + step * rate;
}

/** What a page forwards to its charts: stream events, or "refetch everything". */
export type LiveEvent = StreamEvent | { type: "resync" };

/** Props of RunCharts. */
export interface RunChartsProps {
  run: Run;
  /** System metrics (run.system keys) instead of training metrics. */
  system?: boolean;
  settings: ChartSettings;
  /** Subscribes to the page's stream events; returns the unsubscribe. */
  subscribe?: (fn: (e: LiveEvent) => void) => () => void;
  /** Buckets per chart (default 800). */
  maxPoints?: number;
}

/** Shown series per key; `zoom` holds the sharper re-fetch of a zoomed range. */
type SeriesMap = Record<string, XY>;

/** Charts shown at first, and added by each "Show more": a run with 1,500
 * metric keys draws (and fetches the history of) a page at a time. */
export const CHART_PAGE = 24;

/** The chart keys a page shows: those matching the filter (by name),
 * CHART_PAGE at a time, more on request; a new filter starts again. */
export function useChartPage(keys: string[]) {
  const [filter, setFilterState] = useState("");
  const [limit, setLimit] = useState(CHART_PAGE);
  const matching = useMemo(() => keys.filter((k) => !filter || k.toLowerCase().includes(filter.toLowerCase())), [keys, filter]);
  return {
    keys,
    filter,
    matching,
    shown: matching.slice(0, limit),
    setFilter: (f: string) => {
      setFilterState(f);
      setLimit(CHART_PAGE);
    },
    showMore: () => setLimit((l) => l + CHART_PAGE),
    reset: () => setLimit(CHART_PAGE),
  };
}

export type ChartPage = ReturnType<typeof useChartPage>;

/** The filter box of a page of charts (with more than 6 keys), and a note when nothing matches. */
export function ChartFilter({ page }: { page: ChartPage }) {
  return (
    <>
      {page.keys.length > 6 && (
        <input
          type="search"
          className="chart-filter"
          placeholder="Filter charts by key"
          aria-label="Filter charts by key"
          value={page.filter}
          onChange={(e) => page.setFilter(e.target.value)}
        />
      )}
      {page.keys.length > 0 && page.matching.length === 0 && <p className="muted">No chart matches “{page.filter}”.</p>}
    </>
  );
}

/** "n of N charts" and "Show more", when the matching keys are more than a page. */
export function ChartMore({ page, disabled, testId }: { page: ChartPage; disabled?: boolean; testId?: string }) {
  const { shown, matching } = page;
  if (matching.length <= CHART_PAGE) return null;
  return (
    <div className="chart-more muted small" data-testid={testId}>
      {shown.length.toLocaleString()} of {matching.length.toLocaleString()} charts
      {shown.length < matching.length && (
        <button type="button" className="small" onClick={page.showMore} disabled={disabled}>
          Show {Math.min(CHART_PAGE, matching.length - shown.length)} more
        </button>
      )}
    </div>
  );
}

/** One chart per metric key of the run, live while it runs. Keys are
 * filtered by name, then shown CHART_PAGE at a time: only the shown keys'
 * histories are fetched (each once), and live points are kept for them. */
export function RunCharts({ run, system = false, settings, subscribe, maxPoints = 800 }: RunChartsProps) {
  const summaries = (system ? run.system : run.metrics) ?? {};
  // Keys first seen on the live stream (the run's summaries are read when
  // the page loads): charted too, their history fetched when shown.
  const [liveKeys, setLiveKeys] = useState<string[]>([]);
  const keys = useMemo(() => [...new Set([...Object.keys(summaries), ...liveKeys])].sort(), [summaries, liveKeys]);
  const [series, setSeries] = useState<SeriesMap>({});
  // Live points of shown keys whose history is being fetched, merged once it arrives.
  const pending = useRef<Record<string, [number, number | null][]>>({});
  const [error, setError] = useState<unknown>();
  const [loading, setLoading] = useState(true);
  const [tick, setTick] = useState(0);
  const data = useRef<SeriesMap>({});
  const page = useChartPage(keys);
  const { shown } = page;

  const shownList = shown.join(",");
  const shownRef = useRef(new Set<string>());
  shownRef.current = new Set(shown);

  // A new run, or a resync: everything is fetched again.
  useEffect(() => {
    data.current = {};
    pending.current = {};
    setSeries({});
  }, [run.id, system, maxPoints, tick]);
  useEffect(() => setLiveKeys([]), [run.id, system]);

  // The history of the shown keys not fetched yet.
  useEffect(() => {
    const missing = shownList ? shownList.split(",").filter((k) => !(k in data.current)) : [];
    if (missing.length === 0) {
      setLoading(false);
      return;
    }
    const ac = new AbortController();
    setLoading(true);
    get<RunMetrics>(`/api/runs/${seg(run.id)}/metrics`, { keys: missing.join(","), max_points: maxPoints, system: system ? "true" : undefined }, ac.signal)
      .then((a) => {
        for (const k of missing) data.current[k] = { x: [], y: [] };
        for (const s of a.series) data.current[s.key] = bucketsToXY(s.buckets);
        for (const k of missing) {
          for (const [x, y] of pending.current[k] ?? []) upsertPoint(data.current[k], x, y);
          delete pending.current[k];
        }
        setSeries({ ...data.current });
        setError(undefined);
      })
      .catch((e: unknown) => {
        if (!ac.signal.aborted) setError(e);
      })
      .finally(() => {
        if (!ac.signal.aborted) setLoading(false);
      });
    return () => ac.abort();
  }, [run.id, shownList, system, maxPoints, tick]);

  // Live points of the fetched keys: merged into their series, re-rendered at
  // most 4 times a second. A key not fetched yet gets its whole history when
  // it is shown.
  useEffect(() => {
    if (!subscribe) return;
    let timer: ReturnType<typeof setTimeout> | null = null;
    const flush = () => {
      timer = null;
      const copy: SeriesMap = {};
      for (const [k, v] of Object.entries(data.current)) copy[k] = { x: v.x.slice(), y: v.y.slice() };
      setSeries(copy);
    };
    const unsub = subscribe((e) => {
      if (e.type === "resync") {
        setTick((t) => t + 1);
        return;
      }
      if (e.type !== (system ? "system" : "metric") || e.run_id !== run.id) return;
      const values = (e.data.values ?? {}) as Record<string, unknown>;
      const step = e.data.step == null ? Date.parse(e.time) : Number(e.data.step);
      let changed = false;
      const seen: string[] = [];
      for (const [k, raw] of Object.entries(values)) {
        const y = num(raw);
        const v = Number.isFinite(y) ? y : null;
        const s = data.current[k];
        if (s) {
          upsertPoint(s, step, v);
          changed = true;
          continue;
        }
        seen.push(k); // a key not charted yet: listed (the union with the summaries' keys)
        if (!shownRef.current.has(k)) continue; // fetched whole when shown
        const p = (pending.current[k] ??= []);
        if (p.length < 10000) p.push([step, v]);
      }
      if (seen.length) setLiveKeys((l) => (seen.every((k) => l.includes(k)) ? l : [...new Set([...l, ...seen])]));
      if (changed && !timer) timer = setTimeout(flush, 250);
    });
    return () => {
      unsub();
      if (timer) clearTimeout(timer);
    };
  }, [subscribe, system, run.id]);

  const ready = shown.filter((k) => series[k]);
  return (
    <div className="run-charts">
      <ErrorNote error={error} />
      <ChartFilter page={page} />
      {keys.length === 0 && !error && (
        <Empty>{system ? "No system metrics: the SDK samples them every 10 s while a run trains (fw.track system_interval)." : "No metrics logged yet."}</Empty>
      )}
      {loading && ready.length === 0 && shown.length > 0 && <p className="muted">Loading charts…</p>}
      <div className="chart-grid">
        {ready.map((k) => (
          <MetricChart key={k} run={run} metricKey={k} xy={series[k]} summary={summaries[k]} system={system} settings={settings} />
        ))}
      </div>
      <ChartMore page={page} disabled={loading} />
    </div>
  );
}

/** One key's chart, with a sharper re-fetch of a zoomed range. */
function MetricChart({ run, metricKey, xy, summary, system, settings }: { run: Run; metricKey: string; xy: XY; summary?: Summary; system: boolean; settings: ChartSettings }) {
  const toTime = useMemo(() => (system ? (s: number) => s / 1000 : stepToTime(run, summary)), [system, run, summary]);
  const xMode = system ? "time" : settings.xMode;
  const x = useMemo(() => (xMode === "time" ? xy.x.map(toTime) : xy.x), [xy, xMode, toTime]);
  const chartSeries = useMemo(() => [{ label: metricKey, values: xy.y }], [metricKey, xy]);
  return (
    <div className="chart-card" data-testid={`chart-${metricKey}`}>
      <Chart title={metricKey} x={x} series={chartSeries} xMode={xMode} logY={settings.log} smoothing={settings.smooth} height={220} />
      {summary && (
        <div className="chart-summary muted small">
          last {fmt(summary.last)} · min {fmt(summary.min)} · max {fmt(summary.max)} · {summary.count} points
        </div>
      )}
    </div>
  );
}

const fmt = (v: number | string) => fmtNum(num(v));
