// The runs table of an experiment (or of every experiment): virtualised rows
// (@tanstack/react-virtual) over pages fetched by cursor as the user scrolls,
// sort by any column (params.X and metrics.X included, sorted by the API),
// the query-language filter and a name search, a column chooser, and run
// selection for the compare view and the bulk actions (delete, tag), and the
// CSV export of every matching run. Its whole state lives in the URL.
import { useCallback, useEffect, useMemo, useRef, useState } from "react";
import { Link } from "react-router-dom";
import { useVirtualizer } from "@tanstack/react-virtual";
import { ApiError, get, seg } from "../api/client";
import { num } from "../api/stream";
import { fmtDuration, fmtNum, fmtParam, fmtTime } from "../lib/format";
import { useQueryParam, useStream, useSetQueryParams } from "../lib/hooks";
import { ErrorNote, SortHeader, StatusBadge } from "./ui";
import { FilterBar, combinedFilter, isQueryError } from "./FilterBar";
import { ExportCsvButton, ExportCsvError, RunBulkActions, useCsvExport } from "./RunBulkActions";
import type { Run, RunPage, RunStatus } from "../api/types";

/** A field name of the query language: prefix.KEY, the key quoted when it needs it. */
export function fieldFor(prefix: string, key: string): string {
  return /^[A-Za-z_][A-Za-z0-9_\-/]*$/.test(key) ? `${prefix}.${key}` : `${prefix}.${JSON.stringify(key)}`;
}

/** The key of a "params.KEY" / "metrics.KEY" column id (quotes removed). */
function keyOf(col: string): string {
  const rest = col.slice(col.indexOf(".") + 1);
  if (rest.startsWith('"')) {
    try {
      return JSON.parse(rest) as string;
    } catch {
      return rest;
    }
  }
  return rest;
}

/** Seconds a run ran (until now while it runs). */
export function runDuration(r: Run, now = Date.now()): number | null {
  if (!r.started) return null;
  const end = r.ended ? Date.parse(r.ended) : r.status === "running" ? now : Date.parse(r.updated);
  return (end - Date.parse(r.started)) / 1000;
}

/** A time as "Nov 22, 07:48" (this year) or "2025-11-22 07:48". */
export function fmtShort(iso: string | undefined): string {
  if (!iso) return "–";
  const d = new Date(iso);
  if (Number.isNaN(d.getTime())) return "–";
  const hm = d.toLocaleTimeString(undefined, { hour: "2-digit", minute: "2-digit", hour12: false });
  if (d.getFullYear() === new Date().getFullYear()) return `${d.toLocaleDateString(undefined, { month: "short", day: "numeric" })}, ${hm}`;
  return `${d.toISOString().slice(0, 10)} ${hm}`;
}

const FIRST_PAGE = 100;
const PAGE = 500;
const ROW_HEIGHT = 34;

/** The fixed columns, their sort fields and widths. */
const FIXED: { id: string; label: string; sort?: string; width: number; num?: boolean }[] = [
  { id: "name", label: "Name", sort: "name", width: 240 },
  { id: "status", label: "Status", sort: "status", width: 100 },
  { id: "created", label: "Created", sort: "created", width: 130 },
  { id: "duration", label: "Duration", sort: "ended", width: 90, num: true },
];

/** Everything loaded so far for one query. */
interface Pages {
  key: string;
  runs: Run[];
  next: string | undefined;
  pages: number;
  loading: boolean;
  error: ApiError | undefined;
  done: boolean;
}

/** Loads pages of runs by cursor; `more()` fetches the next one. `columns`,
 * when set, is the API's column projection (each run carries only those
 * params and metrics). */
function useRunPages(base: string, filter: string, sort: string, desc: boolean, columns?: string) {
  const key = `${base}|${filter}|${sort}|${desc}|${columns ?? "*"}`;
  const [state, setState] = useState<Pages>({ key, runs: [], next: undefined, pages: 0, loading: true, error: undefined, done: false });
  const inflight = useRef<AbortController | null>(null);
  const cur = useRef(state);
  cur.current = state;
  const [reloadTick, setReloadTick] = useState(0);

  const fetchPage = useCallback(
    (cursor: string | undefined, fresh: boolean) => {
      inflight.current?.abort();
      const ac = new AbortController();
      inflight.current = ac;
      setState((s) => (fresh ? { key, runs: [], next: undefined, pages: 0, loading: true, error: undefined, done: false } : { ...s, loading: true }));
      get<RunPage>(base, { filter, sort, desc: desc ? "true" : undefined, limit: cursor ? PAGE : FIRST_PAGE, cursor, columns }, ac.signal)
        .then((p) => {
          if (ac.signal.aborted) return;
          setState((s) => ({
            key,
            runs: fresh ? p.runs : s.runs.concat(p.runs),
            next: p.next || undefined,
            pages: (fresh ? 0 : s.pages) + 1,
            loading: false,
            error: undefined,
            done: !p.next,
          }));
        })
        .catch((e: unknown) => {
          if (ac.signal.aborted) return;
          const err = e instanceof ApiError ? e : new ApiError(0, "error", String(e));
          setState((s) => ({ ...s, loading: false, error: err }));
        });
    },
    [base, filter, sort, desc, columns, key],
  );

  useEffect(() => {
    fetchPage(undefined, true);
    return () => inflight.current?.abort();
  }, [fetchPage, reloadTick]);

  // An unreachable dashboard: try the same request again in 2 s.
  useEffect(() => {
    if (!state.error?.unreachable) return;
    const t = setTimeout(() => fetchPage(cur.current.next, cur.current.pages === 0), 2000);
    return () => clearTimeout(t);
  }, [state.error, fetchPage]);

  const more = useCallback(() => {
    const s = cur.current;
    if (s.loading || s.done || !s.next || s.error) return;
    fetchPage(s.next, false);
  }, [fetchPage]);

  const reload = useCallback(() => setReloadTick((t) => t + 1), []);
  return { ...state, more, reload, setRuns: (f: (r: Run[]) => Run[]) => setState((s) => ({ ...s, runs: f(s.runs) })) };
}

/** Props of RunsTable. */
export interface RunsTableProps {
  /** The experiment (ID or name); every run when absent. */
  experiment?: string;
  /** The scrolling area's maximum height (default: down to the window's bottom). */
  maxHeight?: number | string;
  /** The experiment's param and metric keys (its summary): the column
   * chooser lists them, and the runs are fetched with only the shown
   * columns. Absent: the keys are those of the loaded runs, which carry
   * every column. */
  keys?: { params: string[]; metrics: string[] };
}

/** Splits a comma list from the URL. */
const list = (s: string) => (s ? s.split(",").filter(Boolean) : []);

/** The runs table (see the file comment). */
export function RunsTable({ experiment, maxHeight: height, keys }: RunsTableProps) {
  const [filter, setFilter] = useQueryParam("filter");
  const [search, setSearch] = useQueryParam("q");
  const [sort] = useQueryParam("sort", "created");
  const [descParam] = useQueryParam("desc", "1");
  const [colsParam, setCols] = useQueryParam("cols");
  const [selParam, setSel] = useQueryParam("sel");
  const desc = descParam === "1";
  const base = experiment ? `/api/experiments/${seg(experiment)}/runs` : "/api/runs";
  const query = combinedFilter(filter, search);
  // Shown columns: the URL's, else the first few metrics and params.
  const urlColumns = useMemo(() => (colsParam === "-" ? [] : colsParam ? list(colsParam) : null), [colsParam]);
  const keyDefaults = useMemo(
    () => (keys ? [...keys.metrics.slice(0, 4).map((k) => fieldFor("metrics", k)), ...keys.params.slice(0, 5).map((k) => fieldFor("params", k))] : null),
    [keys],
  );
  const projected = keys ? (urlColumns ?? keyDefaults ?? []) : null;
  const pages = useRunPages(base, query, sort, desc, projected ? projected.join(",") : undefined);
  const selected = useMemo(() => new Set(list(selParam)), [selParam]);
  // The selection as it is now, for bulk actions that end after a render.
  const selRef = useRef(selected);
  selRef.current = selected;

  // Param and metric keys seen in the loaded runs (for the column chooser).
  // While a new sort, filter or reload fetches its first page, the last keys
  // stay, so the default columns do not vanish and come back.
  const lastKnown = useRef<{ params: string[]; metrics: string[] } | null>(null);
  const known = useMemo(() => {
    if (keys) return keys;
    if (pages.runs.length === 0 && pages.loading && lastKnown.current) return lastKnown.current;
    const params = new Set<string>();
    const metrics = new Set<string>();
    // The first pages are enough to know the keys; scanning 10,000 runs on
    // every page load would not be.
    for (const r of pages.runs.slice(0, 1000)) {
      for (const k of Object.keys(r.params ?? {})) params.add(k);
      for (const k of Object.keys(r.metrics ?? {})) metrics.add(k);
    }
    return { params: [...params].sort(), metrics: [...metrics].sort() };
  }, [pages.runs, pages.loading, keys]);
  lastKnown.current = known;

  const columns = useMemo(() => {
    if (projected) return projected;
    if (urlColumns) return urlColumns;
    return [...known.metrics.slice(0, 4).map((k) => fieldFor("metrics", k)), ...known.params.slice(0, 5).map((k) => fieldFor("params", k))];
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, [projected?.join(","), urlColumns, known]);

  const toggleColumn = (col: string) => {
    const next = columns.includes(col) ? columns.filter((c) => c !== col) : [...columns, col];
    setCols(next.length ? next.join(",") : "-");
  };
  const toggleRun = (id: string) => {
    const next = new Set(selected);
    if (next.has(id)) next.delete(id);
    else next.add(id);
    setSel([...next].join(","));
  };
  const setMany = useSetQueryParams();
  const runsRef = useRef(pages.runs);
  runsRef.current = pages.runs;
  const nameOf = useCallback((id: string) => runsRef.current.find((r) => r.id === id)?.name ?? id, []);
  const { setRuns: setLoaded, reload } = pages;
  // Deleted runs leave the selection and the table at once, then the table reloads.
  const onDeleted = useCallback(
    (ids: string[]) => {
      const gone = new Set(ids);
      setSel([...selRef.current].filter((id) => !gone.has(id)).join(","));
      setLoaded((rs) => rs.filter((r) => !gone.has(r.id)));
      reload();
    },
    [setSel, setLoaded, reload],
  );
  const csv = useCsvExport({ base, filter: query, sort, desc, columns, experiment });
  // Sort and direction change in one navigation; "created" descending is the default.
  const sortBy = (field: string) => {
    const d = sort === field ? !desc : field !== "name";
    setMany({ sort: field === "created" ? null : field, desc: d ? null : "0" });
  };

  // Live status of the loaded runs that are queued or running.
  const live = useMemo(() => {
    const ids = pages.runs.filter((r) => r.status === "running" || r.status === "queued").map((r) => r.id);
    return ids.length ? ids.slice(0, 200) : null;
  }, [pages.runs]);
  const { setRuns } = pages;
  useStream(live, (e) => {
    if (e.type !== "status") return;
    const status = String(e.data.status ?? "") as RunStatus;
    if (status) setRuns((rs) => rs.map((r) => (r.id === e.run_id ? { ...r, status, ended: status === "running" || status === "queued" ? r.ended : r.ended ?? e.time } : r)));
  });

  const scroller = useRef<HTMLDivElement>(null);
  const v = useVirtualizer({
    count: pages.runs.length,
    getScrollElement: () => scroller.current,
    estimateSize: () => ROW_HEIGHT,
    overscan: 12,
    initialRect: { width: 1200, height: 600 },
  });
  const items = v.getVirtualItems();
  const lastIndex = items.length ? items[items.length - 1].index : -1;
  const { more } = pages;
  useEffect(() => {
    if (lastIndex >= pages.runs.length - 40) more();
  }, [lastIndex, pages.runs.length, more]);

  const padTop = items.length ? items[0].start : 0;
  const padBottom = items.length ? v.getTotalSize() - items[items.length - 1].end : 0;
  const fixed = experiment ? FIXED : [FIXED[0], { id: "experiment", label: "Experiment", sort: "experiment", width: 150 }, ...FIXED.slice(1)];
  const colCount = 1 + fixed.length + columns.length;
  const compareHref = `/compare?runs=${[...selected].map(encodeURIComponent).join(",")}`;
  const tableWidth = 40 + fixed.reduce((a, c) => a + c.width, 0) + columns.length * 130;

  return (
    <div className="runs-table">
      <FilterBar filter={filter} onFilter={setFilter} search={search} onSearch={setSearch} onClear={() => setMany({ filter: null, q: null })} error={pages.error} what="runs" />
      {pages.error && !isQueryError(pages.error) && <ErrorNote error={pages.error} />}
      <div className="runs-toolbar row">
        <span className="muted" aria-live="polite" data-testid="runs-count">
          {pages.error && pages.runs.length === 0
            ? "No runs shown"
            : pages.loading && pages.runs.length === 0
            ? "Loading runs…"
            : `${pages.runs.length.toLocaleString()}${pages.done ? "" : "+"} run${pages.runs.length === 1 ? "" : "s"}${pages.done ? "" : " (more load as you scroll)"}`}
        </span>
        <span className="spacer" />
        <RunBulkActions selected={[...selected]} nameOf={nameOf} onDeleted={onDeleted} onChanged={reload} />
        {selected.size > 0 && (
          <button type="button" onClick={() => setSel("")}>
            Clear selection ({selected.size})
          </button>
        )}
        {selected.size >= 2 ? (
          <Link className="button primary" to={compareHref}>
            Compare selected ({selected.size})
          </Link>
        ) : (
          <button type="button" className="primary" disabled title="Select 2 to 20 runs to compare them">
            Compare selected
          </button>
        )}
        <ColumnChooser known={known} columns={columns} onToggle={toggleColumn} onReset={() => setCols("")} />
        <ExportCsvButton csv={csv} />
        <button type="button" onClick={pages.reload} title="Load the runs again">
          Refresh
        </button>
      </div>
      <ExportCsvError csv={csv} />
      <div className="runs-scroll" ref={scroller} style={{ maxHeight: height ?? "max(360px, calc(100vh - 300px))" }} data-testid="runs-scroll">
        <table className="table runs" style={{ width: tableWidth }} aria-rowcount={pages.runs.length + 1}>
          <colgroup>
            <col style={{ width: 40 }} />
            {fixed.map((c) => (
              <col key={c.id} style={{ width: c.width }} />
            ))}
            {columns.map((c) => (
              <col key={c} style={{ width: 130 }} />
            ))}
          </colgroup>
          <thead>
            <tr>
              <th scope="col">
                <span className="sr-only">Selected</span>
              </th>
              {fixed.map((c) => (
                <SortHeader key={c.id} label={c.label} field={c.sort} sort={sort} desc={desc} onSort={sortBy} num={c.num} />
              ))}
              {columns.map((c) => (
                <SortHeader
                  key={c}
                  label={keyOf(c)}
                  kind={c.startsWith("metrics.") ? "metric" : "param"}
                  field={c}
                  sort={sort}
                  desc={desc}
                  onSort={sortBy}
                  num
                />
              ))}
            </tr>
          </thead>
          <tbody>
            {padTop > 0 && (
              <tr aria-hidden="true" className="pad">
                <td colSpan={colCount} style={{ height: padTop }} />
              </tr>
            )}
            {items.map((it) => {
              const r = pages.runs[it.index];
              return <RunRow key={r.id} run={r} index={it.index} columns={columns} showExperiment={!experiment} selected={selected.has(r.id)} onToggle={toggleRun} />;
            })}
            {padBottom > 0 && (
              <tr aria-hidden="true" className="pad">
                <td colSpan={colCount} style={{ height: padBottom }} />
              </tr>
            )}
          </tbody>
        </table>
        {!pages.loading && !pages.error && pages.runs.length === 0 && (
          <p className="empty">
            {filter || search ? "No run matches the filter. Change or clear it." : "No runs yet. Start one from Training, or log one with fw.track."}
          </p>
        )}
        {pages.loading && pages.runs.length > 0 && (
          <p className="muted loading-more" role="status">
            Loading more runs…
          </p>
        )}
      </div>
    </div>
  );
}

/** One run. */
function RunRow({ run: r, index, columns, selected, onToggle, showExperiment }: { run: Run; index: number; columns: string[]; selected: boolean; onToggle: (id: string) => void; showExperiment: boolean }) {
  return (
    <tr className={selected ? "selected" : undefined} aria-rowindex={index + 2} data-index={index}>
      <td>
        <input type="checkbox" checked={selected} onChange={() => onToggle(r.id)} aria-label={`Select run ${r.name}`} />
      </td>
      <td title={r.name}>
        <Link to={`/runs/${encodeURIComponent(r.id)}`}>{r.name}</Link>
      </td>
      {showExperiment && (
        <td title={r.experiment}>
          <Link to={`/experiments/${encodeURIComponent(r.experiment_id)}`}>{r.experiment}</Link>
        </td>
      )}
      <td>
        <StatusBadge status={r.status} />
      </td>
      <td className="muted" title={fmtTime(r.created)}>
        {fmtShort(r.created)}
      </td>
      <td className="num">{fmtDuration(runDuration(r))}</td>
      {columns.map((c) => {
        if (c.startsWith("metrics.")) {
          const s = r.metrics?.[keyOf(c)];
          return (
            <td key={c} className="num">
              {s ? fmtNum(num(s.last)) : "–"}
            </td>
          );
        }
        const v = r.params?.[keyOf(c)];
        return (
          <td key={c} className="num" title={fmtParam(v)}>
            {fmtParam(v)}
          </td>
        );
      })}
    </tr>
  );
}

/** Most keys of a group the chooser lists at once; the search narrows the rest. */
export const CHOOSER_MAX = 200;

/** The column chooser: a disclosure with a search and one checkbox per
 * param and metric, at most CHOOSER_MAX per group (an experiment may have
 * 1,500 metric keys: the shown columns first, then the matches). */
export function ColumnChooser({ known, columns, onToggle, onReset }: { known: { params: string[]; metrics: string[] }; columns: string[]; onToggle: (c: string) => void; onReset: () => void }) {
  const [text, setText] = useState("");
  const match = (k: string) => !text || k.toLowerCase().includes(text.toLowerCase());
  const group = (title: string, prefix: string, keys: string[]) => {
    const shown = new Set(columns);
    const hits = keys.filter(match);
    // The shown columns first, so unticking one never needs a search.
    const ordered = [...hits.filter((k) => shown.has(fieldFor(prefix, k))), ...hits.filter((k) => !shown.has(fieldFor(prefix, k)))];
    const listed = ordered.slice(0, CHOOSER_MAX);
    return (
      <fieldset>
        <legend>
          {title} ({hits.length.toLocaleString()}
          {text ? ` of ${keys.length.toLocaleString()}` : ""})
        </legend>
        {hits.length === 0 && <span className="muted">none</span>}
        {listed.map((k) => {
          const col = fieldFor(prefix, k);
          return (
            <label key={col}>
              <input type="checkbox" checked={shown.has(col)} onChange={() => onToggle(col)} />
              {k}
            </label>
          );
        })}
        {hits.length > listed.length && (
          <span className="muted" data-testid={`chooser-more-${prefix}`}>
            {(hits.length - listed.length).toLocaleString()} more: type to narrow
          </span>
        )}
      </fieldset>
    );
  };
  return (
    <details className="column-chooser">
      <summary className="button">Columns ({columns.length})</summary>
      <div className="column-chooser-panel">
        <input type="search" placeholder="Find a column" aria-label="Find a column" value={text} onChange={(e) => setText(e.target.value)} />
        {group("Metrics (last value)", "metrics", known.metrics)}
        {group("Params", "params", known.params)}
        <button type="button" onClick={onReset}>
          Default columns
        </button>
      </div>
    </details>
  );
}
