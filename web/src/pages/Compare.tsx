// /compare?runs=a,b,c: several runs side by side from GET /api/compare:
// overlaid charts per metric (aligned by step or time, smoothing, log scale,
// all in the URL), metric summaries per run, the params table with the
// differing params highlighted (and an "only differences" toggle), and params
// against a metric as parallel coordinates or a scatter. Runs can be added
// (search by name) and removed. Metric keys are filtered by name and shown
// CHART_PAGE at a time: runs logging 1,500 keys fetch the series of the
// shown ones only (GET /api/compare's key_limit, then keys=).
import { useCallback, useEffect, useMemo, useRef, useState } from "react";
import { Link } from "react-router-dom";
import { get } from "../api/client";
import { num } from "../api/stream";
import { Chart } from "../components/Chart";
import { CHART_PAGE, ChartControls, ChartFilter, ChartMore, useChartPage, useChartSettings } from "../components/RunCharts";
import { DataTable, numCol } from "../components/DataTable";
import { ParamsPlot } from "../components/ParamsPlot";
import type { Comparison, RunPage } from "../api/types";
import { quote } from "../components/FilterBar";
import { Card, Empty, ErrorNote, Options, StatusBadge } from "../components/ui";
import { fmtNum, fmtParam } from "../lib/format";
import { colorFor } from "../lib/series";
import { useApi, useQueryParam } from "../lib/hooks";

const list = (s: string) => (s ? s.split(",").filter(Boolean) : []);
const MAX_RUNS = 20;

/** The series and summaries fetched after the first page of keys. */
type More = { metrics: Comparison["metrics"]; summaries: Comparison["summaries"] };
const noMore: More = { metrics: {}, summaries: {} };

/** a's series and summaries with b's added. */
function merged(a: More, b: More): More {
  const summaries: Comparison["summaries"] = { ...a.summaries };
  for (const [run, sums] of Object.entries(b.summaries ?? {})) summaries[run] = { ...summaries[run], ...sums };
  return { metrics: { ...a.metrics, ...b.metrics }, summaries };
}

/** c with the keys fetched later added. */
function withMore(c: Comparison, more: More): Comparison {
  const m = merged(c, more);
  return { ...c, ...m, keys: Object.keys(m.metrics).sort() };
}

/** The compare page. */
export function ComparePage() {
  const [runsParam, setRunsParam] = useQueryParam("runs");
  const ids = useMemo(() => list(runsParam), [runsParam]);
  const settings = useChartSettings();
  const align = settings.xMode;
  const cmp = useApi(
    (signal) =>
      ids.length >= 2 ? get<Comparison>("/api/compare", { runs: ids.join(","), align, max_points: 500, key_limit: CHART_PAGE }, signal) : Promise.resolve(undefined),
    [ids.join(","), align],
  );
  const setIds = (next: string[]) => setRunsParam(next.join(","));
  // Keys fetched after the first page, for these runs and this alignment.
  const [more, setMore] = useState<More>(noMore);
  const [moreError, setMoreError] = useState<unknown>();
  const asked = useRef(new Set<string>());
  const generation = useRef(0);
  const c = useMemo(() => (cmp.data && ids.length >= 2 ? withMore(cmp.data, more) : undefined), [cmp.data, more, ids.length]);
  const allKeys = useMemo(() => (c ? (c.metric_keys ?? Object.keys(c.metrics).sort()) : []), [c]);
  const page = useChartPage(allKeys);
  const { shown } = page;
  useEffect(() => {
    generation.current++;
    asked.current = new Set();
    setMore(noMore);
    setMoreError(undefined);
    page.reset();
  }, [ids.join(","), align]); // eslint-disable-line react-hooks/exhaustive-deps
  // The series of keys to show that were not fetched yet, each asked once.
  const need = useCallback(
    (keys: string[]) => {
      // Not while the answer shown is still the previous runs' or alignment's.
      if (!c || c.align !== align || c.runs.map((r) => r.id).join(",") !== ids.join(",")) return;
      const missing = keys.filter((k) => k && !(k in c.metrics) && !asked.current.has(k));
      for (const k of missing) asked.current.add(k);
      const gen = generation.current;
      // A page at a time: a long keys= list would outgrow the request line.
      for (let i = 0; i < missing.length; i += CHART_PAGE) {
        const chunk = missing.slice(i, i + CHART_PAGE);
        get<Comparison>("/api/compare", { runs: ids.join(","), align, max_points: 500, keys: chunk.join(",") })
          .then((a) => {
            if (gen !== generation.current) return;
            setMoreError(undefined);
            setMore((m) => merged(m, a));
          })
          .catch((err) => {
            if (gen !== generation.current) return;
            for (const k of chunk) asked.current.delete(k); // asked again when shown again
            setMoreError(err);
          });
      }
    },
    [c, ids.join(","), align], // eslint-disable-line react-hooks/exhaustive-deps
  );
  const shownList = shown.join(",");
  useEffect(() => need(shown), [shownList, need]); // eslint-disable-line react-hooks/exhaustive-deps

  return (
    <div className="stack compare">
      <div className="page-head">
        <h1>Compare runs</h1>
      </div>
      <Card title="Runs">
        <RunChips runs={c?.runs} ids={ids} onRemove={(id) => setIds(ids.filter((x) => x !== id))} />
        <RunPicker exclude={ids} disabled={ids.length >= MAX_RUNS} onAdd={(id) => setIds([...ids, id])} />
        {ids.length < 2 && <p className="muted">Pick at least two runs (up to {MAX_RUNS}): search them by name above, or select them in an experiment's runs table.</p>}
      </Card>
      <ErrorNote error={cmp.error ?? moreError} />
      {c && (
        <>
          <Card title="Metrics">
            <ChartControls settings={settings} timeNote="x is seconds since each run started, estimated from its steps" />
            <ChartFilter page={page} />
            <CompareCharts cmp={c} keys={shown} log={settings.log} smooth={settings.smooth} />
            <ChartMore page={page} testId="compare-more" />
          </Card>
          <Summaries cmp={c} keys={shown} />
          <ParamsCard cmp={c} />
          <PlotCard cmp={c} keys={allKeys} need={need} />
        </>
      )}
      {cmp.loading && ids.length >= 2 && !c && <p className="muted">Loading…</p>}
    </div>
  );
}

/** The compared runs as chips in their chart colours, each removable. */
function RunChips({ runs, ids, onRemove }: { runs?: Comparison["runs"]; ids: string[]; onRemove: (id: string) => void }) {
  const byId = new Map((runs ?? []).map((r) => [r.id, r]));
  return (
    <ul className="run-chips">
      {ids.map((id, i) => {
        const r = byId.get(id);
        return (
          <li key={id} className="run-chip" style={{ borderColor: colorFor(i) }}>
            <span className="swatch" style={{ background: colorFor(i) }} aria-hidden="true" />
            <Link to={`/runs/${encodeURIComponent(id)}`}>{r?.name ?? id}</Link>
            {r && <span className="muted small">{r.experiment}</span>}
            {r && <StatusBadge status={r.status} />}
            <button type="button" className="icon" onClick={() => onRemove(id)} aria-label={`Remove ${r?.name ?? id} from the comparison`}>
              ×
            </button>
          </li>
        );
      })}
    </ul>
  );
}

/** Adds a run: search runs by name, pick one. */
function RunPicker({ exclude, onAdd, disabled }: { exclude: string[]; onAdd: (id: string) => void; disabled: boolean }) {
  const [text, setText] = useState("");
  const [q, setQ] = useState("");
  useEffect(() => {
    const t = setTimeout(() => setQ(text.trim()), 250);
    return () => clearTimeout(t);
  }, [text]);
  const found = useApi(
    (signal) => (q ? get<RunPage>("/api/runs", { filter: `name ~ ${quote(q)}`, sort: "created", desc: "true", limit: 8 }, signal) : Promise.resolve({ runs: [] })),
    [q],
  );
  const options = (found.data?.runs ?? []).filter((r) => !exclude.includes(r.id));
  return (
    <div className="run-picker">
      <label>
        Add a run
        <input type="search" value={text} disabled={disabled} placeholder="search by name" onChange={(e) => setText(e.target.value)} />
      </label>
      <ErrorNote error={found.error} />
      {q && options.length > 0 && (
        <ul className="picker-results" aria-label="Matching runs">
          {options.map((r) => (
            <li key={r.id}>
              <button
                type="button"
                className="ghost"
                onClick={() => {
                  onAdd(r.id);
                  setText("");
                }}
              >
                Add {r.name}
              </button>
              <span className="muted small">
                {r.experiment} · {r.status}
              </span>
            </li>
          ))}
        </ul>
      )}
      {q && !found.loading && options.length === 0 && !found.error && <span className="muted small">No other run matches.</span>}
    </div>
  );
}

/** One overlaid chart per shown metric key (those fetched). */
function CompareCharts({ cmp, keys, log, smooth }: { cmp: Comparison; keys: string[]; log: boolean; smooth: number }) {
  if ((cmp.metric_keys ?? cmp.keys ?? []).length === 0) return <Empty>The runs have no metrics in common yet.</Empty>;
  return (
    <div className="chart-grid">
      {keys.map((k) => {
        const m = cmp.metrics[k];
        if (!m) return null;
        const series = cmp.runs.map((r, i) => ({
          label: r.name,
          color: colorFor(i),
          values: (m.values[r.id] ?? []).map((v) => (v === null ? null : Number.isFinite(num(v)) ? num(v) : null)),
        }));
        return (
          <div key={k} className="chart-card" data-testid={`compare-chart-${k}`}>
            <Chart title={cmp.align === "time" ? `${k} (s since start)` : k} x={m.x} series={series} xMode="step" logY={log} smoothing={smooth} height={240} />
          </div>
        );
      })}
    </div>
  );
}

/** Each run's last, min and max of the shown metrics (fetched ones). */
function Summaries({ cmp, keys: shown }: { cmp: Comparison; keys: string[] }) {
  const keys = shown.filter((k) => k in cmp.metrics);
  const s = cmp.summaries ?? {};
  if (keys.length === 0) return null;
  return (
    <Card title="Metric summaries (last · min … max)">
      <DataTable className="compare-summaries" scroll="hscroll" columns={["Run", ...keys.map(numCol)]}>
        {cmp.runs.map((r, i) => (
          <tr key={r.id}>
            <th scope="row">
              <span className="swatch" style={{ background: colorFor(i) }} aria-hidden="true" /> {r.name}
            </th>
            {keys.map((k) => {
              const v = s[r.id]?.[k];
              return (
                <td key={k} className="num">
                  {v ? (
                    <>
                      <strong>{fmtNum(num(v.last))}</strong>
                      <span className="muted small">
                        {" "}
                        {fmtNum(num(v.min))} … {fmtNum(num(v.max))}
                      </span>
                    </>
                  ) : (
                    "–"
                  )}
                </td>
              );
            })}
          </tr>
        ))}
      </DataTable>
    </Card>
  );
}

/** The params side by side, differing ones highlighted. */
export function ParamsCard({ cmp }: { cmp: Comparison }) {
  const [onlyDiff, setOnlyDiff] = useQueryParam("diff");
  const params = cmp.params ?? {};
  const names = Object.keys(params).sort();
  const differing = names.filter((n) => params[n].differs).length;
  const shown = onlyDiff === "1" ? names.filter((n) => params[n].differs) : names;
  const runHeads = cmp.runs.map((r, i) => (
    <>
      <span className="swatch" style={{ background: colorFor(i) }} aria-hidden="true" /> {r.name}
    </>
  ));
  return (
    <Card
      title={`Params (${differing} of ${names.length} differ)`}
      actions={
        <label>
          <input type="checkbox" checked={onlyDiff === "1"} onChange={(e) => setOnlyDiff(e.target.checked ? "1" : "")} /> Only differences
        </label>
      }
    >
      {names.length === 0 ? (
        <Empty>None of these runs has params.</Empty>
      ) : (
        <DataTable className="compare-params" scroll="hscroll" columns={["Param", ...runHeads]}>
          {shown.map((n) => (
            <tr key={n} className={params[n].differs ? "diff" : undefined} data-differs={params[n].differs ? "true" : undefined}>
              <th scope="row" className="mono">
                {n}
              </th>
              {cmp.runs.map((r) => (
                <td key={r.id} className="mono">
                  {r.id in params[n].values ? fmtParam(params[n].values[r.id]) : <span className="muted">absent</span>}
                </td>
              ))}
            </tr>
          ))}
        </DataTable>
      )}
    </Card>
  );
}

/** Params against a metric: parallel coordinates or scatter, choices in the URL. */
function PlotCard({ cmp, keys, need }: { cmp: Comparison; keys: string[]; need: (keys: string[]) => void }) {
  const [mode, setMode] = useQueryParam("plot", "parallel");
  const [metricKey, setMetricKey] = useQueryParam("pm", keys[0] ?? "");
  useEffect(() => need([metricKey]), [metricKey, need]); // its summaries, when not fetched yet
  const [agg, setAgg] = useQueryParam("agg", "last");
  const [xParam, setXParam] = useQueryParam("px");
  const [allParams, setAllParams] = useQueryParam("pall");
  const params = cmp.params ?? {};
  const names = Object.keys(params)
    .sort()
    .filter((n) => allParams === "1" || params[n].differs);
  const plotParams = useMemo(() => Object.fromEntries(names.map((n) => [n, params[n].values])), [names.join(","), cmp]); // eslint-disable-line react-hooks/exhaustive-deps
  const metric: Record<string, number | null> = {};
  for (const r of cmp.runs) {
    const s = cmp.summaries?.[r.id]?.[metricKey];
    const v = s ? num(agg === "min" ? s.min : agg === "max" ? s.max : s.last) : NaN;
    metric[r.id] = Number.isFinite(v) ? v : null;
  }
  if (keys.length === 0 || Object.keys(params).length === 0) return null;
  return (
    <Card title="Params against a metric">
      <div className="row plot-controls">
        <label>
          View
          <select value={mode} onChange={(e) => setMode(e.target.value)}>
            <option value="parallel">Parallel coordinates</option>
            <option value="scatter">Scatter</option>
          </select>
        </label>
        <label>
          Metric
          <select value={metricKey} onChange={(e) => setMetricKey(e.target.value)}>
            <Options values={keys} />
          </select>
        </label>
        <label>
          Value
          <select value={agg} onChange={(e) => setAgg(e.target.value)}>
            <Options values={["last", "min", "max"]} />
          </select>
        </label>
        {mode === "scatter" && (
          <label>
            Param
            <select value={xParam || names[0] || ""} onChange={(e) => setXParam(e.target.value)}>
              <Options values={names} />
            </select>
          </label>
        )}
        <label>
          <input type="checkbox" checked={allParams === "1"} onChange={(e) => setAllParams(e.target.checked ? "1" : "")} /> All params (not only differing)
        </label>
      </div>
      {names.length === 0 ? (
        <Empty>No param differs between these runs; tick "All params" to plot them anyway.</Empty>
      ) : (
        <ParamsPlot
          runs={cmp.runs.map((r) => ({ id: r.id, label: r.name }))}
          params={plotParams}
          metric={metric}
          metricLabel={`${metricKey} (${agg})`}
          mode={mode === "scatter" ? "scatter" : "parallel"}
          xParam={xParam || undefined}
        />
      )}
    </Card>
  );
}
