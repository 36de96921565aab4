// MLflow's client prints links into MLflow's own web UI, which routes on the
// URL's hash: "View run at http://HOST/#/experiments/1/runs/abc". Pointed at
// fw's dashboard (docs/mlflow.md), those links open fw's page for the same
// run or experiment. MLflow's experiment "0" is fw's experiment "Default".

/** fw's path for an MLflow UI hash route, or null when the hash is not one. */
export function mlflowLink(hash: string): string | null {
  const m = /^#\/experiments\/([^/?#]+)(?:\/runs\/([^/?#]+))?\/?(?:[?].*)?$/.exec(hash);
  if (!m) return null;
  const [, exp, run] = m;
  if (run) return `/runs/${encodeURIComponent(decodeURIComponent(run))}`;
  const id = decodeURIComponent(exp);
  return `/experiments/${encodeURIComponent(id === "0" ? "Default" : id)}`;
}
