// A run's checkpoints table with the actions on each checkpoint: Resume
// (continue the same run from it), Fork (a new run from it with edited
// params) and Export (the model registry's export dialog).
import { useMemo, useState } from "react";
import { useNavigate } from "react-router-dom";
import { download, get, post, seg } from "../api/client";
import { fmtNum, fmtTime } from "../lib/format";
import { useAction, useApi } from "../lib/hooks";
import { ConfirmDialog, Empty, ErrorNote } from "./ui";
import { DataTable, numCol } from "./DataTable";
import { ParamsForm, validateParams } from "./ParamsForm";
import { ExportDialog } from "./ExportDialog";
import type { Checkpoint, RecipeList, Run, RunCheckpoints, StartTraining, TrainingStarted } from "../api/types";

/** Why Resume and Fork are not possible for this run ("" when they are). */
export function startBlocker(run: Run): string {
  if (!run.source?.recipe) return "This run was not started from a recipe, so the dashboard cannot start it again.";
  if (run.status === "running" || run.status === "queued") return "The run is still running; stop it or wait until it ends.";
  return "";
}

/** The checkpoints of a run with Resume, Fork and Export on each. */
export function CheckpointActions({ run, onStarted }: { run: Run; onStarted?: () => void }) {
  const cks = useApi((signal) => get<RunCheckpoints>(`/api/runs/${seg(run.id)}/checkpoints`, undefined, signal), [run.id, run.status, run.updated]);
  const [fork, setFork] = useState<Checkpoint>();
  const [exporting, setExporting] = useState<Checkpoint>();
  const [resumeError, setResumeError] = useState<unknown>();
  const [busy, setBusy] = useState("");
  const navigate = useNavigate();
  const blocker = startBlocker(run);
  const list = cks.data?.checkpoints ?? [];
  const metricKeys = useMemo(() => [...new Set(list.flatMap((c) => Object.keys(c.metrics ?? {})))].sort().slice(0, 4), [list]);

  const resume = async (c: Checkpoint) => {
    setBusy(c.path);
    setResumeError(undefined);
    try {
      const body: StartTraining = { recipe: run.source?.recipe, experiment: run.experiment, resume_from: { run_id: run.id, checkpoint: c.path } };
      await post<TrainingStarted>("/api/training/start", body);
      onStarted?.();
    } catch (e) {
      setResumeError(e);
    } finally {
      setBusy("");
    }
  };

  return (
    <div className="checkpoints">
      <ErrorNote error={cks.error} />
      <ErrorNote error={resumeError} />
      {blocker && list.length > 0 && <p className="muted small">Resume and Fork: {blocker}</p>}
      {list.length === 0 && !cks.loading && !cks.error && <Empty>No checkpoints: the run has not saved any (run.checkpoint in fw.track).</Empty>}
      {list.length > 0 && (
        <DataTable columns={["Checkpoint", numCol("Step"), numCol("Epoch"), ...metricKeys.map(numCol), "Saved", <span className="sr-only">Actions</span>]}>
          {list.map((c) => (
            <tr key={c.path}>
              <td className="mono" title={c.path}>
                {c.path}
              </td>
              <td className="num">{c.step}</td>
              <td className="num">{fmtNum(c.epoch)}</td>
              {metricKeys.map((k) => (
                <td key={k} className="num">
                  {c.metrics?.[k] === undefined ? "–" : fmtNum(Number(c.metrics[k]))}
                </td>
              ))}
              <td className="muted">{fmtTime(c.time)}</td>
              <td>
                <div className="ck-actions">
                <button type="button" disabled={!!blocker || busy !== ""} title={blocker || `Continue this run from ${c.path}`} onClick={() => resume(c)} aria-label={`Resume from ${c.path}`}>
                  {busy === c.path ? "Resuming…" : "Resume"}
                </button>
                <button type="button" disabled={!run.source?.recipe} title={run.source?.recipe ? `A new run from ${c.path} with edited params` : startBlocker(run)} onClick={() => setFork(c)} aria-label={`Fork from ${c.path}`}>
                  Fork…
                </button>
                <button type="button" onClick={() => setExporting(c)} aria-label={`Export ${c.path}`}>
                  Export…
                </button>
                <button
                  type="button"
                  title={`Save ${c.path} (a weights-only fw checkpoint)`}
                  aria-label={`Download ${c.path}`}
                  onClick={() => download(`/api/runs/${seg(run.id)}/download`, { kind: "checkpoint", path: c.path }, c.path.split("/").pop() ?? c.path).catch(setResumeError)}
                >
                  Download
                </button>
                </div>
              </td>
            </tr>
          ))}
        </DataTable>
      )}
      {fork && <ForkDialog run={run} checkpoint={fork} onClose={() => setFork(undefined)} onStarted={(id) => navigate(`/runs/${encodeURIComponent(id)}`)} />}
      {exporting && <ExportDialog open onClose={() => setExporting(undefined)} runId={run.id} checkpoint={exporting.path} />}
    </div>
  );
}

/** Fork: a new run from a checkpoint, with the run's params edited in the recipe's form. */
function ForkDialog({ run, checkpoint, onClose, onStarted }: { run: Run; checkpoint: Checkpoint; onClose: () => void; onStarted: (id: string) => void }) {
  const recipes = useApi((signal) => get<RecipeList>("/api/training/recipes", undefined, signal), []);
  const recipe = recipes.data?.recipes.find((r) => r.name === run.source?.recipe);
  const [values, setValues] = useState<Record<string, unknown>>(() => ({ ...(run.params ?? {}) }));
  const [name, setName] = useState(`${run.name} fork`);
  const starting = useAction();
  const schema = recipe?.params ?? [];
  const invalid = Object.keys(validateParams(schema, values)).length > 0;

  const start = () => {
    // Only the recipe's params are sent (the run may carry others the SDK logged).
    const params: Record<string, unknown> = {};
    for (const p of schema) if (values[p.name] !== undefined) params[p.name] = values[p.name];
    void starting.run(async () => {
      const body: StartTraining = {
        recipe: run.source?.recipe,
        experiment: run.experiment,
        name: name.trim() || undefined,
        params,
        fork_from: { run_id: run.id, checkpoint: checkpoint.path },
      };
      const a = await post<TrainingStarted>("/api/training/start", body);
      onStarted(a.id);
    });
  };

  return (
    <ConfirmDialog
      open
      title={`Fork ${run.name} from ${checkpoint.path}`}
      action="Start fork"
      busyAction="Starting…"
      tone="primary"
      busy={starting.busy}
      disabled={invalid || !recipe}
      onConfirm={start}
      onClose={onClose}
    >
      <p className="muted">
        A new run of <code>{run.source?.recipe}</code> in <strong>{run.experiment}</strong>, starting from the weights of <code>{checkpoint.path}</code> (step {checkpoint.step}). The params start as this run's.
      </p>
      <div className="form-grid fork-name">
        <label htmlFor="fork-name">Run name</label>
        <input id="fork-name" value={name} onChange={(e) => setName(e.target.value)} />
      </div>
      <ErrorNote error={recipes.error} />
      {recipes.loading && !recipe && <p className="muted">Loading the recipe…</p>}
      {!recipes.loading && !recipe && !recipes.error && <ErrorNote error={`The recipe ${run.source?.recipe} is not registered in this dashboard.`} />}
      {recipe && <ParamsForm params={schema} values={values} onChange={setValues} />}
      <ErrorNote error={starting.error} />
    </ConfirmDialog>
  );
}
