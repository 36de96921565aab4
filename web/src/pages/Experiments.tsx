// /experiments: every experiment in a table (search, the filter language,
// sorting, paging by cursor) with its run counts by status and last
// activity, and an "All runs" view: the runs table over every experiment.
import { useCallback, useMemo, useState } from "react";
import { Link } from "react-router-dom";
import { ApiError, get, seg } from "../api/client";
import { ErrorNote, SortHeader, StatusCounts, Tags } from "../components/ui";
import { FilterBar, combinedFilter, isQueryError } from "../components/FilterBar";
import { RunsTable } from "../components/RunsTable";
import { fmtAgo, fmtTime } from "../lib/format";
import { useApi, useNow, useQueryParam, useSetQueryParams } from "../lib/hooks";
import type { ExperimentDetail, ExperimentPage } from "../api/types";

const PAGE = 50;

/** The experiments page: the experiments table, or every run. */
export function ExperimentsPage() {
  const [view] = useQueryParam("view", "experiments");
  const setMany = useSetQueryParams();
  // The two views read the same parameters (filter, sort...): switching starts afresh.
  const setView = (v: string) => setMany({ view: v === "experiments" ? null : v, filter: null, q: null, sort: null, desc: null, cols: null, sel: null });
  return (
    <div className="stack">
      <div className="page-head">
        <h1>Experiments</h1>
        <div className="tabs" role="tablist" aria-label="View">
          <button type="button" role="tab" aria-selected={view === "experiments"} onClick={() => setView("experiments")}>
            Experiments
          </button>
          <button type="button" role="tab" aria-selected={view === "runs"} onClick={() => setView("runs")}>
            All runs
          </button>
        </div>
      </div>
      {view === "runs" ? <RunsTable /> : <ExperimentsTable />}
    </div>
  );
}

/** The experiments table with filter, sort and "Load more" paging. */
function ExperimentsTable() {
  const [filter, setFilter] = useQueryParam("filter");
  const [search, setSearch] = useQueryParam("q");
  const [sort] = useQueryParam("sort", "updated");
  const [descParam] = useQueryParam("desc", "1");
  const desc = descParam === "1";
  const f = combinedFilter(filter, search);
  // The first page polls every 10 s (new experiments, new activity); pages
  // after it ("Load more") are kept until the query changes.
  const first = useApi(
    (signal) => get<ExperimentPage>("/api/experiments", { filter: f, sort, desc: desc ? "true" : undefined, limit: PAGE }, signal),
    [f, sort, desc],
    10_000,
  );
  const [extra, setExtra] = useState<{ key: string; rows: ExperimentDetail[]; next?: string; error?: ApiError }>({ key: "", rows: [] });
  const key = `${f}|${sort}|${desc}`;
  const more = extra.key === key ? extra : { key, rows: [] as ExperimentDetail[], next: undefined, error: undefined };
  const rows = useMemo(() => {
    const head = first.data?.experiments ?? [];
    const seen = new Set(head.map((e) => e.id));
    return head.concat(more.rows.filter((e) => !seen.has(e.id)));
  }, [first.data, more.rows]);
  const next = more.rows.length > 0 ? more.next : first.data?.next || undefined;
  const loadMore = () => {
    if (!next) return;
    get<ExperimentPage>("/api/experiments", { filter: f, sort, desc: desc ? "true" : undefined, limit: PAGE, cursor: next })
      .then((p) => setExtra({ key, rows: more.rows.concat(p.experiments), next: p.next || undefined }))
      .catch((e: unknown) => setExtra({ ...more, key, error: e instanceof ApiError ? e : new ApiError(0, "error", String(e)) }));
  };

  const setMany = useSetQueryParams();
  // Sort and direction change in one navigation; "updated" descending is the default.
  const sortBy = useCallback(
    (field: string) => {
      const d = sort === field ? !desc : field !== "name";
      setMany({ sort: field === "updated" ? null : field, desc: d ? null : "0" });
    },
    [sort, desc, setMany],
  );
  const now = useNow(15_000);
  const th = (label: string, field: string) => <SortHeader label={label} field={field} sort={sort} desc={desc} onSort={sortBy} />;

  return (
    <div className="card">
      <FilterBar filter={filter} onFilter={setFilter} search={search} onSearch={setSearch} onClear={() => setMany({ filter: null, q: null })} error={first.error} what="experiments" example='tags.team = "vision" AND created > "2026-01-01"' />
      {first.error && !isQueryError(first.error) && <ErrorNote error={first.error} />}
      <table className="table experiments">
        <thead>
          <tr>
            {th("Name", "name")}
            <th scope="col" className="num">
              Runs
            </th>
            <th scope="col">Status</th>
            {th("Last activity", "updated")}
            {th("Created", "created")}
            <th scope="col">Tags</th>
          </tr>
        </thead>
        <tbody>
          {rows.map((e) => (
            <ExperimentRow key={e.id} exp={e} now={now} />
          ))}
        </tbody>
      </table>
      {first.loading && rows.length === 0 && <p className="muted">Loading experiments…</p>}
      {!first.loading && !first.error && rows.length === 0 && (
        <p className="empty">{f ? "No experiment matches the filter." : "No experiments yet. Start a training run, or log one with fw.track."}</p>
      )}
      <ErrorNote error={more.error} />
      {next && (
        <div className="row center">
          <button type="button" onClick={loadMore}>
            Load more experiments
          </button>
        </div>
      )}
    </div>
  );
}

/** One experiment with its run counts (the listing carries them; loaded on demand otherwise). */
function ExperimentRow({ exp, now }: { exp: ExperimentDetail; now: number }) {
  const detail = useApi((signal) => (exp.run_counts ? Promise.resolve(exp) : get<ExperimentDetail>(`/api/experiments/${seg(exp.id)}`, undefined, signal)), [exp.id, exp.updated]);
  const d = detail.data;
  return (
    <tr>
      <td>
        <Link to={`/experiments/${encodeURIComponent(exp.id)}`}>{exp.name}</Link>
        {exp.archived && <span className="badge"> archived</span>}
        {exp.description && <div className="muted small">{exp.description}</div>}
      </td>
      <td className="num">{d?.runs ?? "…"}</td>
      <td>
        <span className="row tight">
          <StatusCounts counts={d?.run_counts} />
        </span>
      </td>
      <td title={fmtTime(exp.updated)}>{fmtAgo(exp.updated, now)}</td>
      <td className="muted">{fmtTime(exp.created)}</td>
      <td>
        <Tags tags={exp.tags} />
      </td>
    </tr>
  );
}
