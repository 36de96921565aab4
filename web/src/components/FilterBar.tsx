// The filter input of the runs and experiments tables: a query-language
// filter applied on Enter (or the Apply button), a quick name search applied
// as the user types (debounced), and the API's parse error shown inline with
// a caret under the column it names.
import { useEffect, useId, useState } from "react";
import { ApiError } from "../api/client";

/** Props of FilterBar. */
export interface FilterBarProps {
  /** The applied filter (from the URL). */
  filter: string;
  onFilter: (v: string) => void;
  /** The applied quick search (from the URL). */
  search: string;
  onSearch: (v: string) => void;
  /** Clears both at once. */
  onClear: () => void;
  /** The listing's error, shown under the input when it is about the filter. */
  error?: unknown;
  /** What the search box searches ("runs", "experiments"). */
  what?: string;
  /** Example filter shown as the placeholder. */
  example?: string;
}

/** The column (1-based) an API error names ("... at column 12"), if any. */
export function errorColumn(e: unknown): number | null {
  if (!(e instanceof ApiError)) return null;
  const m = /column (\d+)/.exec(e.message) ?? /column (\d+)/.exec(JSON.stringify(e.details ?? ""));
  return m ? Number(m[1]) : null;
}

/** Whether an API error is about the request's filter or sort (400 invalid_argument). */
export function isQueryError(e: unknown): e is ApiError {
  return e instanceof ApiError && e.status === 400;
}

/** Escapes text for a double-quoted string of the query language. */
export function quote(s: string): string {
  return `"${s.replace(/\\/g, "\\\\").replace(/"/g, '\\"')}"`;
}

/** Combines the filter and the quick search into the filter sent to the API. */
export function combinedFilter(filter: string, search: string): string {
  const f = filter.trim();
  const s = search.trim();
  if (!s) return f;
  const byName = `name ~ ${quote(s)}`;
  return f ? `(${f}) AND ${byName}` : byName;
}

/** The filter and search inputs (see FilterBarProps). */
export function FilterBar({ filter, onFilter, search, onSearch, onClear, error, what = "runs", example }: FilterBarProps) {
  const [draft, setDraft] = useState(filter);
  const [searchDraft, setSearchDraft] = useState(search);
  const filterId = useId();
  const errId = useId();
  useEffect(() => setDraft(filter), [filter]);
  useEffect(() => setSearchDraft(search), [search]);
  // The quick search applies itself 250 ms after the last keystroke.
  useEffect(() => {
    if (searchDraft === search) return;
    const t = setTimeout(() => onSearch(searchDraft), 250);
    return () => clearTimeout(t);
  }, [searchDraft, search, onSearch]);

  const qerr = isQueryError(error) ? error : undefined;
  const col = errorColumn(qerr);
  return (
    <div className="filterbar">
      <form
        className="filterbar-row"
        role="search"
        aria-label={`Filter ${what}`}
        onSubmit={(e) => {
          e.preventDefault();
          onFilter(draft.trim());
        }}
      >
        <label className="filterbar-search">
          <span className="sr-only">Search {what} by name</span>
          <input
            type="search"
            placeholder={`Search ${what} by name`}
            value={searchDraft}
            onChange={(e) => setSearchDraft(e.target.value)}
            aria-label={`Search ${what} by name`}
          />
        </label>
        <label htmlFor={filterId} className="sr-only">
          Filter
        </label>
        <input
          id={filterId}
          className={`filterbar-filter mono ${qerr ? "invalid" : ""}`}
          placeholder={example ?? 'status = "finished" AND params.lr < 0.01'}
          value={draft}
          onChange={(e) => setDraft(e.target.value)}
          aria-label="Filter"
          aria-invalid={qerr ? true : undefined}
          aria-describedby={qerr ? errId : undefined}
          spellCheck={false}
          autoComplete="off"
        />
        <button type="submit" className="primary">
          Apply
        </button>
        {(filter || search) && (
          <button
            type="button"
            onClick={() => {
              setDraft("");
              setSearchDraft("");
              onClear();
            }}
          >
            Clear
          </button>
        )}
      </form>
      {qerr && (
        <div className="filter-error" role="alert" id={errId}>
          <strong>{/^(filter|sort)$/.test(qerr.message) ? `The ${qerr.message} was refused: check the field names, operators and quotes (docs/tracking.md, "Query language").` : qerr.message}</strong>{" "}
          <code>{qerr.code}</code>
          {col !== null && filter && !search && (
            <pre className="filter-caret" aria-hidden="true">
              {filter}
              {"\n"}
              {" ".repeat(Math.max(0, col - 1))}^
            </pre>
          )}
        </div>
      )}
    </div>
  );
}
