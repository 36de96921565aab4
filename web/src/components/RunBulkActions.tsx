// The runs table's bulk actions: delete or tag the selected runs (one
// request per run, a few at a time, with progress and the runs that failed),
// and the CSV export of every run matching the table's query (fetched page
// by page by cursor, not only the loaded rows).
import { useCallback, useEffect, useId, useRef, useState } from "react";
import { ApiError, del, get, patch, seg } from "../api/client";
import { csvFileName, parseColumn, runsToCsv, type CsvColumn } from "../lib/csv";
import { ConfirmDialog, ProgressBar } from "./ui";
import type { Body, Run, RunPage } from "../api/types";

/** Requests sent at the same time by a bulk action. */
const PARALLEL = 4;
/** Runs per page fetched by the CSV export. */
export const EXPORT_PAGE = 1000;

const asApiError = (e: unknown) => (e instanceof ApiError ? e : new ApiError(0, "error", String(e)));

/** Calls fn for each item, at most `limit` at a time, starting no new one once stop() is true. */
async function eachLimited<T>(items: T[], limit: number, fn: (t: T) => Promise<void>, stop: () => boolean): Promise<void> {
  let next = 0;
  const worker = async () => {
    while (next < items.length && !stop()) {
      const i = next++;
      await fn(items[i]);
    }
  };
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, worker));
}

/** One run a bulk action could not change. */
interface Failure {
  id: string;
  error: ApiError;
}

/** The progress of a bulk action. */
interface BulkState {
  running: boolean;
  /** Requests answered so far. */
  done: number;
  total: number;
  /** Runs changed by the last action. */
  ok: number;
  failures: Failure[];
  /** The action ended (or was stopped). */
  finished: boolean;
  stopped: boolean;
}

const IDLE: BulkState = { running: false, done: 0, total: 0, ok: 0, failures: [], finished: false, stopped: false };

/** Runs one request per run, PARALLEL at a time, keeping count; stop() starts no more. */
function useBulk() {
  const [p, setP] = useState<BulkState>(IDLE);
  const stopRef = useRef(false);
  const run = useCallback(async (ids: string[], fn: (id: string) => Promise<unknown>) => {
    stopRef.current = false;
    setP({ ...IDLE, running: true, total: ids.length });
    const ok: string[] = [];
    const failures: Failure[] = [];
    await eachLimited(
      ids,
      PARALLEL,
      async (id) => {
        try {
          await fn(id);
          ok.push(id);
        } catch (e) {
          failures.push({ id, error: asApiError(e) });
        }
        setP((s) => ({ ...s, done: s.done + 1 }));
      },
      () => stopRef.current,
    );
    setP((s) => ({ ...s, running: false, finished: true, ok: ok.length, failures, stopped: stopRef.current }));
    return { ok, failures };
  }, []);
  const stop = useCallback(() => {
    stopRef.current = true;
  }, []);
  const reset = useCallback(() => setP(IDLE), []);
  return { progress: p, run, stop, reset };
}

const plural = (n: number, one: string, many = `${one}s`) => `${n.toLocaleString()} ${n === 1 ? one : many}`;

/** "a, b, c and 4 more". */
function someNames(ids: string[], nameOf: (id: string) => string, max = 5): string {
  const names = ids.slice(0, max).map(nameOf);
  return ids.length > max ? `${names.join(", ")} and ${ids.length - max} more` : names.join(", ");
}

/** The runs a bulk action could not change, each with the API's message and code. */
function Failures({ failures, nameOf, what }: { failures: Failure[]; nameOf: (id: string) => string; what: string }) {
  if (failures.length === 0) return null;
  return (
    <div className="error-note bulk-failures" role="alert">
      <strong>
        {plural(failures.length, "run")} could not be {what}:
      </strong>
      <ul>
        {failures.map((f) => (
          <li key={f.id}>
            <span className="bulk-run">{nameOf(f.id)}</span>: {f.error.message} <code>{f.error.code}</code>
          </li>
        ))}
      </ul>
    </div>
  );
}

/** Progress of a running bulk action, and a live summary for screen readers. */
function BulkProgress({ progress: p, label, verb }: { progress: BulkState; label: string; verb: string }) {
  if (!p.running && !p.finished) return null;
  return (
    <div className="bulk-progress">
      <ProgressBar value={p.done} total={p.total} label={label} />
      <p className="muted" role="status">
        {p.running
          ? `${verb} ${p.done.toLocaleString()} of ${p.total.toLocaleString()}…`
          : `${p.stopped ? "Stopped: " : ""}${plural(p.ok, "run")} ${verb.toLowerCase()}${p.failures.length ? `, ${p.failures.length.toLocaleString()} failed` : ""}.`}
      </p>
    </div>
  );
}

/** Props of RunBulkActions. */
export interface RunBulkActionsProps {
  /** The selected run IDs. */
  selected: string[];
  /** A run's name for messages (its ID when not loaded). */
  nameOf: (id: string) => string;
  /** Runs deleted: take them out of the selection and reload. */
  onDeleted: (ids: string[]) => void;
  /** Runs changed (tagged): reload. */
  onChanged: () => void;
}

/** "Tag selected (N)…" and "Delete selected (N)" with their dialogs; nothing when no run is selected. */
export function RunBulkActions({ selected, nameOf: lookup, onDeleted, onChanged }: RunBulkActionsProps) {
  const [dialog, setDialog] = useState<"delete" | "tag" | null>(null);
  // Names seen stay known while the table reloads (after a delete, say).
  const names = useRef(new Map<string, string>());
  const nameOf = useCallback(
    (id: string) => {
      const n = lookup(id);
      if (n !== id) names.current.set(id, n);
      return names.current.get(id) ?? n;
    },
    [lookup],
  );
  const n = selected.length;
  return (
    <>
      {n > 0 && (
        <>
          <button type="button" onClick={() => setDialog("tag")} title="Set or remove a tag on the selected runs">
            Tag selected ({n})…
          </button>
          <button type="button" className="danger-outline" onClick={() => setDialog("delete")} title="Delete the selected runs for good">
            Delete selected ({n})
          </button>
        </>
      )}
      <DeleteRunsDialog open={dialog === "delete"} ids={selected} nameOf={nameOf} onClose={() => setDialog(null)} onDeleted={onDeleted} />
      <TagRunsDialog open={dialog === "tag"} ids={selected} nameOf={nameOf} onClose={() => setDialog(null)} onChanged={onChanged} />
    </>
  );
}

/** Deletes the runs (rows and files) after the user types how many. */
function DeleteRunsDialog({ open, ids, nameOf, onClose, onDeleted }: { open: boolean; ids: string[]; nameOf: (id: string) => string; onClose: () => void; onDeleted: (ids: string[]) => void }) {
  const [typed, setTyped] = useState("");
  const bulk = useBulk();
  const { reset } = bulk;
  const inputId = useId();
  const warnId = useId();
  useEffect(() => {
    if (open) {
      setTyped("");
      reset();
    }
  }, [open, reset]);
  const n = ids.length;
  const p = bulk.progress;
  const close = () => {
    // Cancel while deleting starts no more deletes; the dialog stays to show what was done.
    if (p.running) bulk.stop();
    else onClose();
  };
  const confirm = async () => {
    const todo = [...ids];
    const { ok, failures } = await bulk.run(todo, async (id) => {
      try {
        await del(`/api/runs/${seg(id)}`);
      } catch (e) {
        // Already gone: what the user asked for.
        if (e instanceof ApiError && e.status === 404) return;
        throw e;
      }
    });
    setTyped("");
    if (ok.length) onDeleted(ok);
    if (failures.length === 0 && ok.length === todo.length) onClose();
  };
  return (
    <ConfirmDialog
      open={open}
      title="Delete runs"
      action={`Delete ${plural(n, "run")}`}
      busyAction="Deleting…"
      busy={p.running}
      disabled={n === 0 || typed.trim() !== String(n)}
      onConfirm={() => void confirm()}
      onClose={close}
    >
      <div className="bulk-dialog">
        {n > 0 ? (
          <p id={warnId}>
            This deletes <strong>{plural(n, "run")}</strong> ({someNames(ids, nameOf)}) with {n === 1 ? "its" : "their"} metrics, logs, checkpoints and artifacts, for good. It cannot be undone.
          </p>
        ) : (
          <p>No run is selected any more.</p>
        )}
        {n > 0 && (
          <div className="bulk-confirm">
            <label htmlFor={inputId}>
              Type <strong>{n}</strong> to confirm
            </label>
            <input
              id={inputId}
              inputMode="numeric"
              autoComplete="off"
              value={typed}
              onChange={(e) => setTyped(e.target.value)}
              aria-describedby={warnId}
              disabled={p.running}
              onKeyDown={(e) => {
                if (e.key === "Enter" && typed.trim() === String(n) && !p.running) void confirm();
              }}
            />
          </div>
        )}
        <BulkProgress progress={p} label="Delete progress" verb="Deleted" />
        {p.running && <p className="muted">Cancel stops before the next delete; the ones under way finish.</p>}
        <Failures failures={p.failures} nameOf={nameOf} what="deleted" />
      </div>
    </ConfirmDialog>
  );
}

/** Sets (or removes) one tag on the runs. */
function TagRunsDialog({ open, ids, nameOf, onClose, onChanged }: { open: boolean; ids: string[]; nameOf: (id: string) => string; onClose: () => void; onChanged: () => void }) {
  const [key, setKey] = useState("");
  const [value, setValue] = useState("");
  const [remove, setRemove] = useState(false);
  const bulk = useBulk();
  const { reset } = bulk;
  const formId = useId();
  const keyId = useId();
  const valueId = useId();
  useEffect(() => {
    if (open) reset();
  }, [open, reset]);
  const n = ids.length;
  const p = bulk.progress;
  const k = key.trim();
  const close = () => {
    if (p.running) bulk.stop();
    else onClose();
  };
  const submit = async () => {
    const todo = [...ids];
    const body = { tags: { [k]: remove ? null : value } } satisfies Body<"/api/runs/{id}", "patch">;
    const { ok, failures } = await bulk.run(todo, (id) => patch(`/api/runs/${seg(id)}`, body));
    if (ok.length) onChanged();
    if (failures.length === 0 && ok.length === todo.length) onClose();
  };
  return (
    <ConfirmDialog
      open={open}
      title="Tag runs"
      action={remove ? `Remove tag from ${plural(n, "run")}` : `Tag ${plural(n, "run")}`}
      busyAction={remove ? "Removing…" : "Tagging…"}
      busy={p.running}
      disabled={n === 0 || !k}
      tone="primary"
      form={formId}
      onClose={close}
    >
      <form
        id={formId}
        className="bulk-dialog"
        aria-label="Tag runs"
        onSubmit={(e) => {
          e.preventDefault();
          if (k && n > 0 && !p.running) void submit();
        }}
      >
        <p>
          {remove ? "Removes" : "Sets"} one tag on <strong>{plural(n, "run")}</strong> ({someNames(ids, nameOf)}); their other tags stay.
        </p>
        <div className="bulk-tag-grid">
          <label htmlFor={keyId}>Key</label>
          <input id={keyId} value={key} onChange={(e) => setKey(e.target.value)} autoComplete="off" required disabled={p.running} />
          <label htmlFor={valueId}>Value</label>
          <input id={valueId} value={remove ? "" : value} onChange={(e) => setValue(e.target.value)} autoComplete="off" disabled={remove || p.running} />
          <span />
          <label className="inline">
            <input type="checkbox" checked={remove} onChange={(e) => setRemove(e.target.checked)} disabled={p.running} />
            Remove this tag
          </label>
        </div>
        <BulkProgress progress={p} label="Tag progress" verb={remove ? "Updated" : "Tagged"} />
        <Failures failures={p.failures} nameOf={nameOf} what={remove ? "updated" : "tagged"} />
      </form>
    </ConfirmDialog>
  );
}

/** What the CSV export fetches and writes: the table's query and its chosen columns. */
export interface CsvExportQuery {
  /** The runs listing: /api/runs or /api/experiments/{id}/runs. */
  base: string;
  filter: string;
  sort: string;
  desc: boolean;
  /** The table's param and metric column ids ("params.lr", "metrics.loss"). */
  columns: string[];
  /** The experiment the table shows (its runs' experiment name names the file); absent for every run. */
  experiment?: string;
}

/** The state of a CSV export. */
interface CsvState {
  running: boolean;
  /** Runs fetched so far. */
  fetched: number;
  /** Pages fetched so far. */
  pages: number;
  error?: ApiError;
  /** The page (1-based) that failed. */
  failedPage?: number;
  /** The last file saved and its runs. */
  saved?: { file: string; runs: number };
}

/** Hands text to the browser as a download (a Blob and a temporary <a download>). */
export function saveText(text: string, filename: string, type = "text/csv;charset=utf-8"): void {
  const url = URL.createObjectURL(new Blob([text], { type }));
  const a = document.createElement("a");
  a.href = url;
  a.download = filename;
  a.style.display = "none";
  document.body.appendChild(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 60_000);
}

/** Fetches every run of the query, page by page by cursor, calling onPage after each. */
export async function fetchAllRuns(q: Pick<CsvExportQuery, "base" | "filter" | "sort" | "desc">, onPage: (runs: number, pages: number) => void, signal?: AbortSignal): Promise<Run[]> {
  const all: Run[] = [];
  let cursor: string | undefined;
  let pages = 0;
  for (;;) {
    const p = await get<RunPage>(q.base, { filter: q.filter, sort: q.sort, desc: q.desc ? "true" : undefined, limit: EXPORT_PAGE, cursor }, signal);
    pages++;
    for (const r of p.runs ?? []) all.push(r);
    onPage(all.length, pages);
    // No next page, or a cursor that does not move (never loop forever).
    if (!p.next || p.next === cursor || (p.runs ?? []).length === 0) return all;
    cursor = p.next;
  }
}

/** The CSV export of every run matching the query: start(), cancel() and its state. */
export function useCsvExport(q: CsvExportQuery) {
  const [state, setState] = useState<CsvState>({ running: false, fetched: 0, pages: 0 });
  const ac = useRef<AbortController | null>(null);
  const qRef = useRef(q);
  qRef.current = q;
  useEffect(() => () => ac.current?.abort(), []);

  const start = useCallback(async () => {
    if (ac.current) return;
    const query = qRef.current;
    const ctl = new AbortController();
    ac.current = ctl;
    setState({ running: true, fetched: 0, pages: 0 });
    let pages = 0;
    let fetched = 0;
    try {
      const runs = await fetchAllRuns(
        query,
        (n, pg) => {
          fetched = n;
          pages = pg;
          setState((s) => ({ ...s, fetched: n, pages: pg }));
        },
        ctl.signal,
      );
      const cols = query.columns.map((c) => parseColumn(c)).filter((c): c is CsvColumn => c !== undefined);
      const file = csvFileName(query.experiment ? runs[0]?.experiment ?? query.experiment : undefined);
      saveText(runsToCsv(runs, cols), file);
      setState({ running: false, fetched: runs.length, pages, saved: { file, runs: runs.length } });
    } catch (e) {
      if (ctl.signal.aborted) setState({ running: false, fetched: 0, pages: 0 });
      else setState({ running: false, fetched, pages, error: asApiError(e), failedPage: pages + 1 });
    } finally {
      ac.current = null;
    }
  }, []);
  const cancel = useCallback(() => ac.current?.abort(), []);
  const dismiss = useCallback(() => setState((s) => ({ ...s, error: undefined, failedPage: undefined })), []);
  return { ...state, start, cancel, dismiss };
}

type CsvExport = ReturnType<typeof useCsvExport>;

/** "Export CSV" (with "Cancel export" and the count while it fetches). */
export function ExportCsvButton({ csv }: { csv: CsvExport }) {
  return (
    <>
      {csv.running ? (
        <>
          <span className="muted csv-progress" role="status">
            Exporting… {plural(csv.fetched, "run")} fetched
          </span>
          <button type="button" onClick={csv.cancel}>
            Cancel export
          </button>
        </>
      ) : (
        <button type="button" onClick={() => void csv.start()} title="Download every run matching the filter as CSV, with the shown param and metric columns">
          Export CSV
        </button>
      )}
      {!csv.running && csv.saved && !csv.error && (
        <span className="sr-only" role="status">
          Saved {csv.saved.file} with {plural(csv.saved.runs, "run")}.
        </span>
      )}
    </>
  );
}

/** The export's error: which page failed, after how many runs, and the API's message. */
export function ExportCsvError({ csv }: { csv: CsvExport }) {
  if (!csv.error) return null;
  return (
    <div className="error-note csv-error" role="alert">
      <strong>
        CSV export failed on page {csv.failedPage} (after {plural(csv.fetched, "run")}): {csv.error.message}
      </strong>{" "}
      <code>{csv.error.code}</code>{" "}
      <button type="button" className="ghost" onClick={csv.dismiss}>
        Dismiss
      </button>
    </div>
  );
}
