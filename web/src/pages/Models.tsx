// The model registry: every model with its latest version (format, size,
// signature, labels, source run), aliases and deployments; buttons to export
// a checkpoint and to register an exported file or a checkpoint; and MLflow
// 3's logged models (MLflow's client logs them; fw's registry holds them once
// registered).
import { useState } from "react";
import { Link, useNavigate } from "react-router-dom";
import { get, request, seg } from "../api/client";
import { DeploymentLink, deploymentStatus } from "../components/DeployDialog";
import { ExportDialog } from "../components/ExportDialog";
import { DataTable, numCol } from "../components/DataTable";
import { Card, ConfirmDialog, Empty, ErrorNote, StatusBadge } from "../components/ui";
import { fmtAgo, fmtBytes } from "../lib/format";
import type { Body, Deployment, DeploymentList, LoggedModelList, LoggedModelSummary, Model, ModelList, ModelVersion, TensorSpec } from "../api/types";
import { useAction, useApi } from "../lib/hooks";

/** "name dtype [shape]" for a tensor, batch dim shown as N. */
export function fmtSpec(s: TensorSpec): string {
  const dims = s.shape.map((d, i) => (d < 0 || (i === 0 && d === 0) ? (i === 0 ? "N" : "?") : String(d)));
  return `${s.name} ${s.dtype} [${dims.join(", ")}]`;
}

/** The newest version of a model. */
export function latestVersion(m: Model): ModelVersion | undefined {
  return m.versions.reduce<ModelVersion | undefined>((a, v) => (!a || v.version > a.version ? v : a), undefined);
}

/** A model's signature as short lines. */
export function SpecList({ specs }: { specs: TensorSpec[] | undefined }) {
  if (!specs || specs.length === 0) return <span className="muted">–</span>;
  return (
    <span className="spec-list">
      {specs.map((s) => (
        <code key={s.name}>{fmtSpec(s)}</code>
      ))}
    </span>
  );
}

/** Labels as a count and the first few. */
export function LabelsSummary({ labels }: { labels: string[] | undefined }) {
  if (!labels || labels.length === 0) return <span className="muted">–</span>;
  const head = labels.slice(0, 4).join(", ");
  return (
    <span title={labels.join(", ")}>
      {labels.length} <span className="muted">({head}{labels.length > 4 ? ", …" : ""})</span>
    </span>
  );
}

/** Alias badges ("production → v2"). */
export function AliasBadges({ aliases, version }: { aliases: Model["aliases"] | undefined; version?: number }) {
  const list = Object.entries(aliases ?? {}).filter(([, v]) => version === undefined || v === version);
  if (list.length === 0) return version === undefined ? <span className="muted">–</span> : null;
  return (
    <span className="row wrap tight alias-badges">
      {list.map(([a, v]) => (
        <span key={a} className="badge badge-alias" title={`${a} → v${v}`}>
          {a}
          {version === undefined ? ` v${v}` : ""}
        </span>
      ))}
    </span>
  );
}

/** Registers an exported file (multipart upload) or a run's checkpoint. */
function RegisterDialog({ open, onClose, onDone }: { open: boolean; onClose: () => void; onDone: (name: string) => void }) {
  const [mode, setMode] = useState<"file" | "checkpoint">("file");
  const [name, setName] = useState("");
  const [file, setFile] = useState<File | null>(null);
  const [runId, setRunId] = useState("");
  const [ckpt, setCkpt] = useState("");
  const register = useAction();

  const submit = () =>
    register.run(async () => {
      if (mode === "file") {
        const fd = new FormData();
        fd.set("name", name.trim());
        if (file) fd.set("file", file, file.name);
        await request("POST", "/api/models", { body: fd });
      } else {
        await request("POST", "/api/models", { body: { name: name.trim(), run_id: runId.trim(), checkpoint: ckpt.trim() } satisfies Body<"/api/models", "post"> });
      }
      onDone(name.trim());
      onClose();
    });

  return (
    <ConfirmDialog
      open={open}
      title="Register a model"
      action="Register"
      busyAction="Registering…"
      tone="primary"
      form="register-form"
      busy={register.busy}
      disabled={!name.trim() || (mode === "file" ? !file : !runId || !ckpt)}
      onClose={onClose}
    >
      <form
        id="register-form"
        className="form-grid"
        onSubmit={(e) => {
          e.preventDefault();
          void submit();
        }}
      >
        <fieldset className="span-all format-choice">
          <legend>What to register</legend>
          <label className="radio">
            <input type="radio" name="register-mode" checked={mode === "file"} onChange={() => setMode("file")} />
            An exported file (.onnx, .pt)
          </label>
          <label className="radio">
            <input type="radio" name="register-mode" checked={mode === "checkpoint"} onChange={() => setMode("checkpoint")} />
            A run's checkpoint
          </label>
        </fieldset>
        <label>
          Model name
          <input value={name} onChange={(e) => setName(e.target.value)} placeholder="e.g. digits_cnn" />
        </label>
        {mode === "file" ? (
          <label>
            Model file
            <input type="file" accept=".onnx,.pt,.pth,.ts,.torchscript" onChange={(e) => setFile(e.target.files?.[0] ?? null)} />
          </label>
        ) : (
          <>
            <label>
              Run ID
              <input value={runId} onChange={(e) => setRunId(e.target.value)} />
            </label>
            <label>
              Checkpoint path
              <input value={ckpt} onChange={(e) => setCkpt(e.target.value)} placeholder="e.g. epoch-2.pt" />
            </label>
          </>
        )}
        <div className="span-all">
          <ErrorNote error={register.error} />
        </div>
      </form>
    </ConfirmDialog>
  );
}

/** The deployments of one model, as compact state + URL lines. */
function DeploymentCell({ deps }: { deps: Deployment[] }) {
  if (deps.length === 0) return <span className="muted">–</span>;
  return (
    <span className="stack tight">
      {deps.map((d) => (
        <span key={d.id} className="row tight">
          <StatusBadge status={deploymentStatus(d)} />
          <span className="muted">v{d.version}</span>
          <DeploymentLink url={d.url} short />
        </span>
      ))}
    </span>
  );
}

/** A logged model's status, short ("READY" of LOGGED_MODEL_READY). */
export function loggedStatus(m: LoggedModelSummary): string {
  return m.status.replace(/^LOGGED_MODEL_(STATUS_)?/, "");
}

/** MLflow 3's logged models, newest first: the models MLflow's client logged
 * (log_model, autologging), with the run and experiment they came from. */
export function LoggedModels() {
  const logged = useApi((s) => get<LoggedModelList>("/api/logged-models", { limit: 100 }, s), [], 30000);
  const list = logged.data?.logged_models ?? [];
  const total = logged.data?.total ?? 0;
  return (
    <Card title="Logged models (MLflow)" className="logged-models">
      <ErrorNote error={logged.error} />
      {logged.data && list.length === 0 ? (
        <Empty>No logged models. MLflow's client logs them: mlflow.pytorch.log_model, or mlflow.pytorch.autolog() while training.</Empty>
      ) : (
        <>
          <p className="muted small">
            {total > list.length ? `The newest ${list.length} of ${total}. ` : ""}
            Load one with <code>mlflow.pytorch.load_model("models:/&lt;model id&gt;")</code>; register it with <code>mlflow.register_model</code> to
            add it to the registry above.
          </p>
          <DataTable className="logged-models-table" scroll="table-wrap" columns={["Name", "Model ID", "Type", "Status", "Experiment", "Source run", "Created"]}>
            {list.map((m) => (
              <tr key={m.model_id}>
                <td className="strong">{m.name}</td>
                <td>
                  <code title={m.artifact_uri}>{m.model_id}</code>
                </td>
                <td>{m.model_type || <span className="muted">–</span>}</td>
                <td>
                  <StatusBadge status={loggedStatus(m).toLowerCase()} />
                </td>
                <td>
                  {m.experiment_id ? (
                    <Link to={`/experiments/${seg(m.experiment_id)}`}>{m.experiment}</Link>
                  ) : (
                    <span className="muted">MLflow experiment {m.mlflow_experiment_id}</span>
                  )}
                </td>
                <td>
                  {m.source_run_id ? (
                    <Link to={`/runs/${seg(m.source_run_id)}`}>{m.source_run_id.slice(0, 12)}</Link>
                  ) : (
                    <span className="muted">–</span>
                  )}
                </td>
                <td>{fmtAgo(new Date(m.created_ms).toISOString())}</td>
              </tr>
            ))}
          </DataTable>
        </>
      )}
    </Card>
  );
}

/** The /models page. */
export function ModelsPage() {
  const nav = useNavigate();
  const models = useApi((s) => get<ModelList>("/api/models", undefined, s), [], 10000);
  const deps = useApi((s) => get<DeploymentList>("/api/deployments", undefined, s), [], 5000);
  const [exporting, setExporting] = useState(false);
  const [registering, setRegistering] = useState(false);
  const list = [...(models.data?.models ?? [])].sort((a, b) => a.name.localeCompare(b.name));
  const byModel = (name: string) => (deps.data?.deployments ?? []).filter((d) => d.model === name);

  return (
    <div className="stack models-page">
      <header className="page-head">
        <div>
          <h1>Models</h1>
          <p className="muted">The registry: exported and uploaded model files with their versions, aliases and deployments.</p>
        </div>
        <div className="row">
          <button type="button" onClick={() => setRegistering(true)}>
            Register…
          </button>
          <button type="button" className="primary" onClick={() => setExporting(true)}>
            Export a checkpoint…
          </button>
        </div>
      </header>
      <ErrorNote error={models.error} />
      <Card>
        {models.data && list.length === 0 ? (
          <Empty>No models registered yet. Export a run's checkpoint, or register an exported .onnx / .pt file.</Empty>
        ) : (
          <DataTable className="models-table" scroll="table-wrap" columns={["Model", "Latest", "Format", numCol("Size"), "Inputs → outputs", "Labels", "Source run", "Aliases", "Deployments"]}>
            {list.map((m) => {
              const v = latestVersion(m);
              return (
                <tr key={m.name}>
                  <td>
                    <Link to={`/models/${seg(m.name)}`} className="strong">
                      {m.name}
                    </Link>
                    <div className="muted small">
                      {m.versions.length} version{m.versions.length === 1 ? "" : "s"}
                      {v?.created ? ` · ${fmtAgo(v.created)}` : ""}
                    </div>
                  </td>
                  <td>{v ? `v${v.version}` : "–"}</td>
                  <td>{v ? <span className={`badge badge-format badge-${v.format}`}>{v.format}</span> : "–"}</td>
                  <td className="num">{fmtBytes(v?.size)}</td>
                  <td className="signature">
                    <SpecList specs={v?.inputs} />
                    <span className="muted arrow">→</span>
                    <SpecList specs={v?.outputs} />
                  </td>
                  <td>
                    <LabelsSummary labels={v?.labels} />
                  </td>
                  <td>
                    {v?.source?.run_id ? (
                      <Link to={`/runs/${seg(v.source.run_id)}`} title={v.source.checkpoint}>
                        {v.source.run_id.slice(0, 12)}
                      </Link>
                    ) : v?.source?.upload ? (
                      <span className="muted" title="uploaded file">
                        {v.source.upload}
                      </span>
                    ) : (
                      <span className="muted">–</span>
                    )}
                  </td>
                  <td>
                    <AliasBadges aliases={m.aliases} />
                  </td>
                  <td>
                    <DeploymentCell deps={byModel(m.name)} />
                  </td>
                </tr>
              );
            })}
          </DataTable>
        )}
      </Card>
      <LoggedModels />
      <ExportDialog open={exporting} onClose={() => setExporting(false)} onDone={() => models.reload()} />
      <RegisterDialog
        open={registering}
        onClose={() => setRegistering(false)}
        onDone={(name) => {
          models.reload();
          nav(`/models/${seg(name)}`);
        }}
      />
    </div>
  );
}
