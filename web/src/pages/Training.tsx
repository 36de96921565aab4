// The Training monitor: /training starts a recipe (a form built from its
// parameter schema) and lists the jobs; /training/:runId follows one run
// live (LiveRun).
import { useEffect, useMemo, useState, type FormEvent } from "react";
import { Link, useNavigate, useParams } from "react-router-dom";
import { get, post, seg } from "../api/client";
import type { ExperimentPage, Job, JobList, Run, RecipeList, StartTraining, TrainingStarted } from "../api/types";
import { DataTable, numCol } from "../components/DataTable";
import { LiveRun, StopButton, progressFraction } from "../components/LiveRun";
import { ParamsForm, paramDefaults, validateParams } from "../components/ParamsForm";
import { Card, Empty, ErrorNote, Options, ProgressBar, StatusBadge } from "../components/ui";
import { fmtAgo, fmtParam } from "../lib/format";
import { useAction, useApi, useNow, useQueryParam } from "../lib/hooks";

/** The training page: the start form and jobs, or one run's live monitor. */
export function TrainingPage() {
  const { runId } = useParams();
  if (runId) return <LiveRun key={runId} runId={runId} />;
  return (
    <div className="stack training-page">
      <h1>Training</h1>
      <StartForm />
      <JobsList />
    </div>
  );
}

/** The form that starts a recipe: recipe, experiment, run name and the recipe's parameters. */
export function StartForm() {
  const navigate = useNavigate();
  const recipes = useApi((s) => get<RecipeList>("/api/training/recipes", undefined, s), []);
  const experiments = useApi((s) => get<ExperimentPage>("/api/experiments", { limit: 500, sort: "name" }, s).catch(() => ({ experiments: [] })), []);
  const [recipeName, setRecipeName] = useQueryParam("recipe", "");
  const [experiment, setExperiment] = useState("");
  const [name, setName] = useState("");
  const [edited, setEdited] = useState<{ recipe: string; values: Record<string, unknown> }>();
  const starting = useAction();
  const [tried, setTried] = useState(false);

  const list = recipes.data?.recipes ?? [];
  const recipe = list.find((r) => r.name === recipeName) ?? list[0];

  // Each recipe starts from its defaults; edits belong to the recipe they were made for.
  const values = useMemo(
    () => (recipe && edited?.recipe === recipe.name ? edited.values : recipe ? paramDefaults(recipe.params) : {}),
    [recipe, edited],
  );
  const setValues = (v: Record<string, unknown>) => recipe && setEdited({ recipe: recipe.name, values: v });
  const { setError } = starting;
  useEffect(() => {
    setError(undefined);
    setTried(false);
  }, [recipe?.name, setError]);

  const errors = useMemo(() => (recipe ? validateParams(recipe.params, values) : {}), [recipe, values]);
  const nErrors = Object.keys(errors).length;

  const submit = async (e: FormEvent) => {
    e.preventDefault();
    setTried(true);
    if (!recipe || nErrors > 0 || !experiment.trim()) return;
    await starting.run(async () => {
      const body: StartTraining = { recipe: recipe.name, experiment: experiment.trim(), params: values };
      if (name.trim()) body.name = name.trim();
      const a = await post<TrainingStarted>("/api/training/start", body);
      navigate(`/training/${seg(a.id)}`);
    });
  };

  if (recipes.error && !recipes.data) {
    return (
      <Card title="Start training">
        <ErrorNote error={recipes.error} />
      </Card>
    );
  }
  if (!recipes.data) return <Card title="Start training"><Empty>Loading recipes…</Empty></Card>;
  if (list.length === 0) {
    return (
      <Card title="Start training">
        <Empty>No recipes are registered. Register one with fw dashboard --recipes FILE (docs/tracking.md, "Training jobs").</Empty>
      </Card>
    );
  }

  return (
    <Card title="Start training" className="start-form">
      <form onSubmit={submit} aria-label="Start training" noValidate>
        <div className="form-grid">
          <label htmlFor="train-recipe">Recipe</label>
          <select id="train-recipe" value={recipe?.name ?? ""} onChange={(e) => setRecipeName(e.target.value)}>
            <Options values={list.map((r) => r.name)} />
          </select>
          {recipe?.description && <small className="hint">{recipe.description}</small>}

          <label htmlFor="train-experiment">Experiment</label>
          <input
            id="train-experiment"
            list="train-experiments"
            value={experiment}
            required
            placeholder="an existing or a new experiment"
            aria-invalid={tried && !experiment.trim() ? true : undefined}
            onChange={(e) => setExperiment(e.target.value)}
          />
          <datalist id="train-experiments">
            {(experiments.data?.experiments ?? []).map((x) => (
              <option key={x.id} value={x.name} />
            ))}
          </datalist>
          {tried && !experiment.trim() && (
            <small className="hint field-error" role="alert">
              Name the experiment (a new name creates it).
            </small>
          )}

          <label htmlFor="train-name">Run name</label>
          <input id="train-name" value={name} placeholder="optional" onChange={(e) => setName(e.target.value)} />
        </div>
        {recipe && <ParamsForm params={recipe.params} values={values} onChange={setValues} />}
        <div className="row form-actions">
          <button type="submit" className="primary" disabled={starting.busy}>
            {starting.busy ? "Starting…" : "Start training"}
          </button>
          {recipe && (
            <button type="button" className="ghost" onClick={() => setValues(paramDefaults(recipe.params))}>
              Reset to defaults
            </button>
          )}
          {tried && nErrors > 0 && (
            <span className="field-error" role="status">
              Fix {nErrors === 1 ? "the parameter" : `${nErrors} parameters`} above.
            </span>
          )}
        </div>
        <ErrorNote error={starting.error} />
      </form>
    </Card>
  );
}

/** One job's progress and name, from its run (polled while it is active). */
function JobRow({ job, onChanged }: { job: Job; onChanged: () => void }) {
  const active = job.state === "running" || job.state === "queued" || job.state === "stopping";
  const run = useApi((s) => get<Run>(`/api/runs/${seg(job.run_id)}`, undefined, s), [job.run_id, job.state], active ? 2000 : 0);
  const now = useNow(5000);
  const r = run.data;
  const prog = progressFraction(r?.progress);
  const name = r?.name || job.run_id;
  return (
    <tr>
      <td>
        <StatusBadge status={job.state === "exited" ? r?.status ?? "exited" : job.state} />
      </td>
      <td>
        <Link to={`/training/${seg(job.run_id)}`}>{name}</Link>
      </td>
      <td>
        <code>{job.recipe}</code>
      </td>
      <td>{job.experiment}</td>
      <td className="job-progress">{prog ? <ProgressBar value={Number(prog.value.toFixed(2))} total={prog.total} label={`Progress of ${name}`} /> : <span className="muted">–</span>}</td>
      <td className="muted" title={job.started ?? job.queued}>
        {fmtAgo(job.started ?? job.queued, now)}
      </td>
      <td className="muted params-cell" title={JSON.stringify(job.params ?? {})}>
        {Object.entries(job.params ?? {})
          .map(([k, v]) => `${k}=${fmtParam(v)}`)
          .join(" ")}
      </td>
      <td className="num">{job.exit_code ?? ""}</td>
      <td>{(job.state === "running" || job.state === "queued") && <StopButton runId={job.run_id} name={name} onStopped={onChanged} compact />}</td>
    </tr>
  );
}

/** The jobs this dashboard started, newest first, polled every 2 s. */
export function JobsList() {
  const jobs = useApi((s) => get<JobList>("/api/training", undefined, s), [], 2000);
  const list = [...(jobs.data?.jobs ?? [])].reverse();
  return (
    <Card title="Jobs" actions={<span className="muted">{list.filter((j) => j.state === "running").length} running</span>}>
      <ErrorNote error={jobs.error} />
      {!jobs.data ? (
        <Empty>Loading jobs…</Empty>
      ) : list.length === 0 ? (
        <Empty>No jobs yet: start one above.</Empty>
      ) : (
        <DataTable className="jobs-table" label="Training jobs" scroll="table-wrap" columns={["State", "Run", "Recipe", "Experiment", "Progress", "Started", "Params", numCol("Exit"), <span className="sr-only">Actions</span>]}>
          {list.map((j) => (
            <JobRow key={j.run_id} job={j} onChanged={jobs.reload} />
          ))}
        </DataTable>
      )}
    </Card>
  );
}
