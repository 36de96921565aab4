// One model of the registry: its versions (metrics at export, parity report),
// aliases editor, deploy / undeploy with the deployments' health, URL and
// request rate (each fw serve of its own, and the versions the shared server
// holds with their state in its repository index), and a "try it" panel for a
// ready deployment.
import { Fragment, useEffect, useState, type ReactNode } from "react";
import { Link, useNavigate, useParams } from "react-router-dom";
import { del, get, patch, seg } from "../api/client";
import { DataTable, numCol } from "../components/DataTable";
import { DeployDialog, DeploymentLink, VersionOptions, deploymentStatus } from "../components/DeployDialog";
import { ExportDialog, ParityView } from "../components/ExportDialog";
import { SharedServerVersions } from "../components/SharedServer";
import { Requests } from "../components/Requests";
import { Traffic } from "../components/Traffic";
import { TryIt } from "../components/TryIt";
import { Card, ConfirmDialog, Empty, ErrorNote, KeyValues, StatusBadge } from "../components/ui";
import { fmtAgo, fmtBytes, fmtNum, fmtTime } from "../lib/format";
import type { Body, Deployment, DeploymentList, Model, ModelVersion, SharedServer } from "../api/types";
import { useAction, useApi, useQueryParam } from "../lib/hooks";
import { AliasBadges, LabelsSummary, SpecList } from "./Models";

/** Edits the model's aliases: change or remove one, add a new one. */
function AliasEditor({ model, onSaved }: { model: Model; onSaved: () => void }) {
  const [alias, setAlias] = useState("production");
  const versions = [...model.versions].map((v) => v.version).sort((a, b) => b - a);
  const [version, setVersion] = useState(String(versions[0] ?? ""));
  const saving = useAction();
  const save = (aliases: Record<string, number>) =>
    saving.run(async () => {
      await patch(`/api/models/${seg(model.name)}`, { aliases } satisfies Body<"/api/models/{name}", "patch">);
      onSaved();
    });
  const entries = Object.entries(model.aliases ?? {}).sort(([a], [b]) => a.localeCompare(b));
  return (
    <div className="stack">
      {entries.length === 0 ? (
        <p className="muted">No aliases. An alias (e.g. production) names a version, and deployments can follow it.</p>
      ) : (
        <ul className="alias-list">
          {entries.map(([a, v]) => (
            <li key={a} className="row">
              <span className="badge badge-alias">{a}</span>
              <label className="inline">
                <span className="sr-only">version of {a}</span>
                <select value={String(v)} onChange={(e) => void save({ [a]: Number(e.target.value) })}>
                  <VersionOptions versions={versions} />
                </select>
              </label>
              <button type="button" className="ghost" aria-label={`Remove alias ${a}`} onClick={() => void save({ [a]: 0 })}>
                Remove
              </button>
            </li>
          ))}
        </ul>
      )}
      <form
        className="row wrap"
        onSubmit={(e) => {
          e.preventDefault();
          if (alias.trim()) void save({ [alias.trim()]: Number(version) });
        }}
      >
        <label className="inline">
          Alias
          <input value={alias} onChange={(e) => setAlias(e.target.value)} size={12} />
        </label>
        <label className="inline">
          Version
          <select value={version} onChange={(e) => setVersion(e.target.value)}>
            <VersionOptions versions={versions} />
          </select>
        </label>
        <button type="submit">Set alias</button>
      </form>
      <ErrorNote error={saving.error} />
    </div>
  );
}

/** The model's deployments of their own fw serve, with health, URL, rate and Undeploy. */
function Deployments({ deps, onUndeploy }: { deps: Deployment[]; onUndeploy: (d: Deployment) => void }) {
  if (deps.length === 0) return <Empty>Not deployed. Deploy a version to serve it with fw serve and try it here.</Empty>;
  return (
    <DataTable scroll="table-wrap" columns={["Deployment", "Version", "Health", "URL", numCol("Requests/s"), "Started", ""]}>
      {deps.map((d) => (
        <tr key={d.id}>
          <td>
            <code>{d.id}</code>
          </td>
          <td>
            v{d.version} <span className="muted small">{d.device || "cpu"}</span>
          </td>
          <td>
            <StatusBadge status={deploymentStatus(d)} />
          </td>
          <td>
            <DeploymentLink url={d.url} />
            {d.grpc_address && (
              <div className="muted small" title="gRPC (Open Inference Protocol): tritonclient.grpc.InferenceServerClient(address)">
                gRPC <code>{d.grpc_address}</code>
              </div>
            )}
          </td>
          <td className="num">{d.request_rate != null ? d.request_rate.toFixed(2) : "–"}</td>
          <td title={fmtTime(d.started)}>{fmtAgo(d.started)}</td>
          <td className="actions">
            <button type="button" className="small danger-outline" onClick={() => onUndeploy(d)} aria-label={`Undeploy ${d.id}`}>
              Undeploy
            </button>
          </td>
        </tr>
      ))}
    </DataTable>
  );
}

/** The version list with metrics, parity, aliases and per-version actions. */
function Versions({
  model,
  onDeploy,
  onExport,
  onDelete,
}: {
  model: Model;
  onDeploy: (v: number) => void;
  onExport: (v: ModelVersion) => void;
  onDelete: (v: ModelVersion) => void;
}) {
  const [open, setOpen] = useQueryParam("version", "");
  const versions = [...model.versions].sort((a, b) => b.version - a.version);
  return (
    <DataTable className="versions-table" scroll="table-wrap" columns={["Version", "Format", numCol("Size"), "Metrics at export", "Parity", "Source", "Created", ""]}>
      {versions.map((v) => {
        const expanded = open === String(v.version);
        const metrics = Object.entries(v.metrics ?? {});
        return (
          <Fragment key={v.version}>
            <tr className={expanded ? "selected" : ""}>
              <td>
                <button type="button" className="ghost disclosure" aria-expanded={expanded} onClick={() => setOpen(expanded ? "" : String(v.version))}>
                  {expanded ? "▾" : "▸"} v{v.version}
                </button>{" "}
                <AliasBadges aliases={model.aliases} version={v.version} />
              </td>
              <td>
                <span className={`badge badge-format badge-${v.format}`}>{v.format}</span>
              </td>
              <td className="num">{fmtBytes(v.size)}</td>
              <td>
                {metrics.length === 0 ? (
                  <span className="muted">–</span>
                ) : (
                  <span className="metric-chips">
                    {metrics.slice(0, 4).map(([k, x]) => (
                      <span key={k}>
                        <span className="muted">{k}</span> {fmtNum(x)}
                      </span>
                    ))}
                  </span>
                )}
              </td>
              <td>
                {v.parity && typeof v.parity.max_abs_error === "number" ? (
                  <span title={`atol ${v.parity.atol ?? "?"}, rtol ${v.parity.rtol ?? "?"}`}>
                    <span className="badge badge-finished">pass</span> <span className="num">{fmtNum(v.parity.max_abs_error)}</span>
                  </span>
                ) : (
                  <span className="muted">–</span>
                )}
              </td>
              <td>
                {v.source?.run_id ? (
                  <Link to={`/runs/${seg(v.source.run_id)}`}>{v.source.run_id.slice(0, 12)}</Link>
                ) : (
                  <span className="muted">{v.source?.upload ?? "–"}</span>
                )}
                {v.source?.checkpoint && <div className="muted small">{v.source.checkpoint}</div>}
                {v.source?.uri && (
                  <div className="muted small" title="registered through MLflow's model registry API">
                    {v.source.uri}
                  </div>
                )}
                {v.stage && v.stage !== "None" && <span className="badge">{v.stage}</span>}
              </td>
              <td title={fmtTime(v.created)}>{fmtAgo(v.created)}</td>
              <td className="actions">
                {servable(v.format) && (
                  <button type="button" onClick={() => onDeploy(v.version)} aria-label={`Deploy v${v.version}`}>
                    Deploy
                  </button>
                )}
                {exportable(v.format) && (
                  <button
                    type="button"
                    onClick={() => onExport(v)}
                    aria-label={`Export v${v.version}`}
                    title={v.format === "torch_export" ? "export this torch.export program (an MLflow PyTorch model) into a file fw serves" : "export this checkpoint"}
                  >
                    Export…
                  </button>
                )}
                <button type="button" className="ghost danger-text" onClick={() => onDelete(v)} aria-label={`Delete v${v.version}`}>
                  Delete
                </button>
              </td>
            </tr>
            {expanded && (
              <tr className="detail-row">
                <td colSpan={8}>
                  <div className="grid-2 version-detail">
                    <div className="stack">
                      <h3>Signature</h3>
                      <KeyValues
                        items={[
                          ["inputs", <SpecList key="i" specs={v.inputs} />],
                          ["outputs", <SpecList key="o" specs={v.outputs} />],
                          ["labels", <LabelsSummary key="l" labels={v.labels} />],
                          ["file", <code key="f">{v.file ?? "–"}</code>],
                        ]}
                      />
                      {metrics.length > 0 && (
                        <>
                          <h3>Metrics at export</h3>
                          <KeyValues items={metrics.map(([k, x]) => [k, <span className="num">{fmtNum(x)}</span>] as [string, ReactNode])} />
                        </>
                      )}
                    </div>
                    <div className="stack">
                      <h3>Parity report</h3>
                      <ParityView report={v.parity} />
                    </div>
                  </div>
                </td>
              </tr>
            )}
          </Fragment>
        );
      })}
    </DataTable>
  );
}

/** The /models/:name page. */
/** A version fw serve can load: not a reference to a checkpoint or to an MLflow model, nor a program to export. */
const servable = (format: string) => format !== "checkpoint" && format !== "mlflow" && format !== "torch_export";

/** A version POST /api/models/export takes: a checkpoint or a torch.export program (an MLflow PyTorch model). */
const exportable = (format: string) => format === "checkpoint" || format === "torch_export";

export function ModelPage() {
  const { name = "" } = useParams();
  const nav = useNavigate();
  const model = useApi((s) => get<Model>(`/api/models/${seg(name)}`, undefined, s), [name], 15000);
  const deps = useApi((s) => get<DeploymentList>("/api/deployments", undefined, s), [], 2000);
  const shared = useApi((s) => get<SharedServer>("/api/shared-server", undefined, s), [], 2000);
  const [deployOpen, setDeployOpen] = useState(false);
  const [deployVersion, setDeployVersion] = useState<number>();
  const [exportOpen, setExportOpen] = useState(false);
  const [exportVersion, setExportVersion] = useState<ModelVersion>();
  const [undeploy, setUndeploy] = useState<Deployment>();
  const [deleting, setDeleting] = useState<ModelVersion>();
  const [deletingModel, setDeletingModel] = useState(false);
  const action = useAction();
  const [tryDep, setTryDep] = useQueryParam("try", "");
  const [tryBody, setTryBody] = useState<string>();

  const m = model.data;
  const mine = (deps.data?.deployments ?? []).filter((d) => d.model === name);
  const own = mine.filter((d) => d.target !== "shared");
  const onShared = mine.length > own.length || (shared.data?.versions ?? []).some((v) => v.model === name);
  const ready = mine.filter((d) => d.state === "running" && d.healthy);
  const tryTarget = ready.find((d) => d.id === tryDep) ?? ready[0];
  const tryVersion = m?.versions.find((v) => v.version === tryTarget?.version);
  const deployable = (m?.versions ?? []).filter((v) => servable(v.format)).map((v) => v.version).sort((a, b) => b - a);

  const { setError: setActionError } = action;
  useEffect(() => setActionError(undefined), [name, setActionError]);

  const run = (fn: () => Promise<unknown>, after: () => void) =>
    action.run(async () => {
      await fn();
      after();
    });

  if (model.error && !m) {
    return (
      <div className="stack">
        <p>
          <Link to="/models">← Models</Link>
        </p>
        <ErrorNote error={model.error} />
      </div>
    );
  }
  if (!m) return <p className="muted">Loading…</p>;

  return (
    <div className="stack model-page">
      <header className="page-head">
        <div>
          <p className="crumbs">
            <Link to="/models">Models</Link> /
          </p>
          <h1>{m.name}</h1>
          <p className="muted">
            {m.versions.length} version{m.versions.length === 1 ? "" : "s"} · created {fmtAgo(m.created)}
            {Object.keys(m.aliases ?? {}).length > 0 && (
              <>
                {" · "}
                <AliasBadges aliases={m.aliases} />
              </>
            )}
          </p>
        </div>
        <div className="row">
          <button type="button" onClick={() => setExportOpen(true)}>
            Export new version…
          </button>
          <button
            type="button"
            className="primary"
            disabled={deployable.length === 0}
            onClick={() => {
              setDeployVersion(undefined);
              setDeployOpen(true);
            }}
          >
            Deploy…
          </button>
          <button type="button" className="ghost danger-text" onClick={() => setDeletingModel(true)}>
            Delete model
          </button>
        </div>
      </header>
      <ErrorNote error={action.error ?? deps.error} />
      <Card title="Versions">
        <Versions
          model={m}
          onDeploy={(v) => {
            setDeployVersion(v);
            setDeployOpen(true);
          }}
          onExport={setExportVersion}
          onDelete={setDeleting}
        />
      </Card>
      <div className="model-lower">
        <Card title="Deployments" actions={<span className="muted small">refreshed every 2 s</span>}>
          {own.length > 0 || !onShared ? <Deployments deps={own} onUndeploy={setUndeploy} /> : null}
          {(onShared || shared.data?.state === "running") && (
            <>
              <h3>Shared server</h3>
              <SharedServerVersions server={shared.data} model={m.name} deployments={mine} onUndeploy={setUndeploy} />
            </>
          )}
        </Card>
        <Card title="Aliases">
          <AliasEditor model={m} onSaved={model.reload} />
        </Card>
      </div>
      <Card
        title="Try it"
        className="try-it-card"
        actions={
          ready.length > 1 ? (
            <label className="inline">
              Deployment
              <select value={tryTarget?.id ?? ""} onChange={(e) => setTryDep(e.target.value)}>
                {ready.map((d) => (
                  <option key={d.id} value={d.id}>
                    {d.id} (v{d.version}, {d.target === "shared" ? "shared " : ""}:{d.port})
                  </option>
                ))}
              </select>
            </label>
          ) : tryTarget ? (
            <span className="muted small">
              {tryTarget.id} · v{tryTarget.version} · {tryTarget.url}
            </span>
          ) : null
        }
      >
        {tryTarget ? (
          <TryIt key={tryTarget.id} deploymentId={tryTarget.id} inputs={tryVersion?.inputs} labels={tryVersion?.labels} body={tryBody} />
        ) : (
          <Empty>Deploy a version, and once it is ready send it JSON rows or an image here.</Empty>
        )}
      </Card>

      <Card title="Requests">
        <Requests deployments={ready} />
      </Card>
      <Card title="Traffic">
        <Traffic
          deployments={ready}
          trainingRun={(d) => m.versions.find((v) => v.version === d.version)?.source?.run_id || undefined}
          onTry={(id, body) => {
            setTryDep(id);
            setTryBody(body);
            document.querySelector(".try-it-card")?.scrollIntoView({ behavior: "smooth" });
          }}
        />
      </Card>

      <DeployDialog
        open={deployOpen}
        onClose={() => setDeployOpen(false)}
        model={m.name}
        versions={deployable}
        aliases={m.aliases ?? {}}
        defaultVersion={deployVersion}
        usedPorts={(deps.data?.deployments ?? []).map((d) => d.port)}
        shared={shared.data}
        onDeployed={(d) => {
          deps.reload();
          shared.reload();
          setTryDep(d.id);
        }}
      />
      <ExportDialog open={exportOpen} onClose={() => setExportOpen(false)} onDone={() => model.reload()} />
      <ExportDialog
        open={exportVersion !== undefined}
        onClose={() => setExportVersion(undefined)}
        model={m?.name ?? name}
        version={exportVersion?.version}
        program={exportVersion?.format === "torch_export"}
        onDone={() => model.reload()}
      />
      <ConfirmDialog
        open={!!undeploy}
        title="Undeploy"
        action="Undeploy"
        onClose={() => setUndeploy(undefined)}
        onConfirm={() => {
          const d = undeploy;
          if (d)
            void run(
              () => del(`/api/deployments/${seg(d.id)}`),
              () => {
                deps.reload();
                shared.reload();
              },
            );
          setUndeploy(undefined);
        }}
      >
        {undeploy?.target === "shared" ? (
          <p>
            Take {undeploy.model} v{undeploy.version} off the shared server at {undeploy.url}? Its other versions and models keep serving.
          </p>
        ) : (
          <p>
            Stop the server of {undeploy?.model} v{undeploy?.version} at {undeploy?.url}? Requests to it will fail.
          </p>
        )}
      </ConfirmDialog>
      <ConfirmDialog
        open={!!deleting}
        title={`Delete v${deleting?.version ?? ""}`}
        action="Delete version"
        onClose={() => setDeleting(undefined)}
        onConfirm={() => {
          const v = deleting;
          if (v) void run(() => del(`/api/models/${seg(m.name)}/versions/${v.version}`), model.reload);
          setDeleting(undefined);
        }}
      >
        <p>
          Delete {m.name} v{deleting?.version} and its file? This cannot be undone.
        </p>
      </ConfirmDialog>
      <ConfirmDialog
        open={deletingModel}
        title={`Delete ${m.name}`}
        action="Delete model"
        onClose={() => setDeletingModel(false)}
        onConfirm={() => {
          void run(() => del(`/api/models/${seg(m.name)}`), () => nav("/models"));
          setDeletingModel(false);
        }}
      >
        <p>Delete the model {m.name}, all its versions and their files? This cannot be undone.</p>
      </ConfirmDialog>
    </div>
  );
}
