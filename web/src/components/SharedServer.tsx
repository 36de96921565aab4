// The shared model server on a model's page: one `fw serve --model-repository`
// that holds many registry versions (deployed with target "shared"). Shows the
// server (state, URL, gRPC address) and which versions of this model it holds,
// each with its state in the server's repository index (GET /api/shared-server:
// READY, LOADING, UNAVAILABLE with the reason) and Undeploy; the other models'
// versions on it are listed in one line.
import { DataTable } from "./DataTable";
import { DeploymentLink } from "./DeployDialog";
import { StatusBadge } from "./ui";
import type { Deployment, SharedServer, SharedVersion } from "../api/types";

/** A repository index state as a badge status: READY -> "ready", UNAVAILABLE -> "unavailable". */
export function indexStatus(state: string): string {
  return state.toLowerCase();
}

/** The shared server's own state for a badge: a running one is "ready" or "unhealthy" by its health check. */
export function sharedServerStatus(s: SharedServer): string {
  return s.state !== "running" ? s.state : s.healthy ? "ready" : "unhealthy";
}

/** "cnn v1, v2 · resnet v3": the versions of the other models on the server. */
export function otherModels(versions: SharedVersion[], model: string): string {
  const by = new Map<string, number[]>();
  for (const v of versions) {
    if (v.model === model || v.state !== "READY") continue;
    by.set(v.model, [...(by.get(v.model) ?? []), v.version]);
  }
  return [...by.entries()]
    .sort(([a], [b]) => a.localeCompare(b))
    .map(([m, vs]) => `${m} ${vs.sort((a, b) => a - b).map((v) => `v${v}`).join(", ")}`)
    .join(" · ");
}

/** This model's versions on the shared server, with the server's state and Undeploy. */
export function SharedServerVersions({
  server,
  model,
  deployments,
  onUndeploy,
}: {
  server: SharedServer | undefined;
  model: string;
  /** The deployments listed by GET /api/deployments (Undeploy needs the record). */
  deployments: Deployment[];
  onUndeploy: (d: Deployment) => void;
}) {
  if (!server) return <p className="muted small">Loading the shared server…</p>;
  if (server.state === "stopped") {
    return (
      <p className="muted small">
        No shared server. Deploy with Server “shared” to serve several versions (of this and other models) from one fw serve.
      </p>
    );
  }
  const mine = server.versions.filter((v) => v.model === model).sort((a, b) => a.version - b.version);
  const others = otherModels(server.versions, model);
  const byId = new Map(deployments.map((d) => [d.id, d]));
  return (
    <div className="stack shared-server">
      <p className="row wrap">
        <StatusBadge status={sharedServerStatus(server)} />
        {server.url && <DeploymentLink url={server.url} />}
        {server.grpc_address && (
          <span className="muted small" title="gRPC (Open Inference Protocol): tritonclient.grpc.InferenceServerClient(address)">
            gRPC <code>{server.grpc_address}</code>
          </span>
        )}
        {server.error && <span className="muted small">{server.error}</span>}
      </p>
      {mine.length === 0 ? (
        <p className="muted small">None of {model}’s versions is on the shared server.</p>
      ) : (
        <DataTable scroll="table-wrap" columns={["Version", "State", "Deployment", ""]}>
          {mine.map((v) => {
            const dep = v.deployment ? byId.get(v.deployment) : undefined;
            return (
              <tr key={v.version}>
                <td>
                  v{v.version}
                  {server.url && v.state === "READY" && (
                    <div className="muted small">
                      <code>
                        /v2/models/{v.model}/versions/{v.version}/infer
                      </code>
                    </div>
                  )}
                </td>
                <td>
                  <StatusBadge status={indexStatus(v.state)} /> {v.reason && <span className="muted small">{v.reason}</span>}
                </td>
                <td>{v.deployment ? <code>{v.deployment}</code> : <span className="muted">–</span>}</td>
                <td className="actions">
                  {dep && (
                    <button type="button" className="small danger-outline" onClick={() => onUndeploy(dep)} aria-label={`Undeploy ${dep.id}`}>
                      Undeploy
                    </button>
                  )}
                </td>
              </tr>
            );
          })}
        </DataTable>
      )}
      {others && <p className="muted small">Also on it: {others}</p>}
    </div>
  );
}
