// /experiments/:id: the experiment's header (name, description, tags, run
// counts by status), rename and delete, and its runs table.
import { useMemo, useState } from "react";
import { Link, useNavigate, useParams } from "react-router-dom";
import { del, get, patch, seg } from "../api/client";
import { ConfirmDialog, ErrorNote, StatusCounts, Tags } from "../components/ui";
import { RunsTable } from "../components/RunsTable";
import { fmtAgo, fmtTime } from "../lib/format";
import { useAction, useApi } from "../lib/hooks";
import type { Body, ExperimentDetail } from "../api/types";

/** The experiment page. */
export function ExperimentPage() {
  const { id = "" } = useParams();
  const exp = useApi((signal) => get<ExperimentDetail>(`/api/experiments/${seg(id)}`, undefined, signal), [id], 10_000);
  const [editing, setEditing] = useState(false);
  const [deleting, setDeleting] = useState(false);
  const e = exp.data;
  // The runs table's columns: the summary's keys (the same arrays while the
  // poll answers the same keys, so the table does not fetch again).
  const metricKeys = e ? Object.keys(e.metrics ?? {}).sort().join("\u0000") : "";
  const paramKeys = (e?.param_keys ?? []).join("\u0000");
  const keys = useMemo(
    () => ({ metrics: metricKeys ? metricKeys.split("\u0000") : [], params: paramKeys ? paramKeys.split("\u0000") : [] }),
    [metricKeys, paramKeys],
  );
  return (
    <div className="stack">
      <nav className="crumbs" aria-label="Breadcrumb">
        <Link to="/experiments">Experiments</Link> / <span>{e?.name ?? id}</span>
      </nav>
      {exp.error && !e && <ErrorNote error={exp.error} />}
      {e && (
        <header className="card exp-head">
          <div className="exp-title">
            <h1>{e.name}</h1>
            {e.archived && <span className="badge">archived</span>}
            <span className="spacer" />
            <button type="button" onClick={() => setEditing(true)}>
              Rename…
            </button>
            <button type="button" className="danger" onClick={() => setDeleting(true)}>
              Delete…
            </button>
          </div>
          {e.description ? <p className="exp-desc">{e.description}</p> : <p className="muted exp-desc">No description.</p>}
          <div className="row exp-meta">
            <span className="stat-inline">
              <strong>{e.runs ?? 0}</strong> runs
            </span>
            <StatusCounts counts={e.run_counts} />
            <span className="muted" title={fmtTime(e.updated)}>
              last activity {fmtAgo(e.updated)}
            </span>
            <span className="muted">created {fmtTime(e.created)}</span>
            <span className="muted mono small">{e.id}</span>
            <Tags tags={e.tags} />
          </div>
        </header>
      )}
      {e && (
        <section className="card" aria-label="Runs">
          <RunsTable experiment={e.id} keys={keys} />
        </section>
      )}
      {e && <EditDialog open={editing} exp={e} onClose={() => setEditing(false)} onSaved={exp.reload} />}
      {e && <DeleteDialog open={deleting} exp={e} onClose={() => setDeleting(false)} />}
    </div>
  );
}

/** Rename the experiment and edit its description. */
function EditDialog({ open, exp, onClose, onSaved }: { open: boolean; exp: ExperimentDetail; onClose: () => void; onSaved: () => void }) {
  const [name, setName] = useState(exp.name);
  const [description, setDescription] = useState(exp.description);
  const save = useAction();
  return (
    <ConfirmDialog
      open={open}
      title="Edit experiment"
      action="Save"
      tone="primary"
      busy={save.busy}
      disabled={!name.trim()}
      onClose={onClose}
      onConfirm={() =>
        void save.run(async () => {
          await patch(`/api/experiments/${seg(exp.id)}`, { name, description } satisfies Body<"/api/experiments/{id}", "patch">);
          onSaved();
          onClose();
        })
      }
    >
      <div className="form-grid">
        <label htmlFor="exp-name">Name</label>
        <input id="exp-name" value={name} onChange={(e) => setName(e.target.value)} />
        <label htmlFor="exp-desc">Description</label>
        <textarea id="exp-desc" rows={3} value={description} onChange={(e) => setDescription(e.target.value)} />
      </div>
      <ErrorNote error={save.error} />
    </ConfirmDialog>
  );
}

/** Deletes the experiment and all its runs, after typing its name. */
function DeleteDialog({ open, exp, onClose }: { open: boolean; exp: ExperimentDetail; onClose: () => void }) {
  const [typed, setTyped] = useState("");
  const remove = useAction();
  const navigate = useNavigate();
  return (
    <ConfirmDialog
      open={open}
      title="Delete experiment"
      action="Delete for good"
      disabled={typed !== exp.name}
      onClose={onClose}
      onConfirm={() =>
        void remove.run(async () => {
          await del(`/api/experiments/${seg(exp.id)}`);
          navigate("/experiments");
        })
      }
    >
      <p>
        This deletes <strong>{exp.name}</strong> and its {exp.runs ?? 0} runs: metrics, logs, checkpoints and artifacts. It cannot be undone.
      </p>
      <label>
        Type the name to confirm <input value={typed} onChange={(e) => setTyped(e.target.value)} aria-label="Experiment name to confirm" />
      </label>
      <ErrorNote error={remove.error} />
    </ConfirmDialog>
  );
}
