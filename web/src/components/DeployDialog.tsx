// The deploy dialog: pick a model version (or alias), the server (a fw serve
// of its own, or the shared server that holds many versions), a port, the
// device and the batching options, POST /api/models/{name}/deploy and wait
// until the version is ready (the API answers once it is), showing the deploy
// error (with the server's last log lines) on failure.
import { useEffect, useState } from "react";
import { post, seg } from "../api/client";
import { useAction } from "../lib/hooks";
import { ConfirmDialog, ErrorNote, Options } from "./ui";
import type { Deployment, DeployRequest, DeployTarget, SharedServer } from "../api/types";

/** A deployment's state for a status badge: a running one is "ready" or "unhealthy" by its health check. */
export function deploymentStatus(d: Deployment): string {
  return d.state !== "running" ? d.state : d.healthy ? "ready" : "unhealthy";
}

/** A link to a deployment's server (opens in a new tab); short leaves out the scheme. */
export function DeploymentLink({ url, short }: { url: string; short?: boolean }) {
  return (
    <a href={url} target="_blank" rel="noreferrer">
      {short ? url.replace(/^https?:\/\//, "") : url}
    </a>
  );
}

/** The <option>s of a version select, "v3" each, for the given version numbers. */
export function VersionOptions({ versions }: { versions: number[] }) {
  return (
    <>
      {versions.map((v) => (
        <option key={v} value={String(v)}>
          v{v}
        </option>
      ))}
    </>
  );
}

/** A port that looks free: 8000 upwards, skipping the ones deployments use. */
export function suggestPort(used: number[]): number {
  let p = 8000;
  while (used.includes(p)) p++;
  return p;
}

/**
 * Builds the deploy body from the form (a number is a version, text an alias).
 * On the shared server a blank port or device keeps the server's own (a free
 * port, cpu, when it has to be started).
 */
export function deployBody(v: {
  target: string;
  server?: DeployTarget;
  port: string;
  device: string;
  maxBatch: string;
  maxDelay: string;
}): DeployRequest {
  const shared = v.server === "shared";
  const body: DeployRequest = shared ? { port: 0, target: "shared" } : { port: Number(v.port), device: v.device };
  if (shared && v.port.trim() !== "") body.port = Number(v.port);
  if (shared && v.device !== "") body.device = v.device;
  if (v.target !== "") body.version = /^\d+$/.test(v.target) ? Number(v.target) : v.target;
  if (v.maxBatch.trim() !== "") body.max_batch_size = Number(v.maxBatch);
  if (v.maxDelay.trim() !== "") body.max_delay_ms = Number(v.maxDelay);
  return body;
}

/** Deploys one model; onDeployed gets the ready deployment. */
export function DeployDialog({
  open,
  onClose,
  model,
  versions,
  aliases,
  defaultVersion,
  usedPorts,
  shared,
  onDeployed,
}: {
  open: boolean;
  onClose: () => void;
  model: string;
  /** Deployable versions (exported files), newest first. */
  versions: number[];
  aliases: Record<string, number>;
  defaultVersion?: number;
  usedPorts: number[];
  /** The shared server (GET /api/shared-server), when known: its port and device are the ones a shared deploy gets. */
  shared?: SharedServer;
  onDeployed?: (d: Deployment) => void;
}) {
  const [target, setTarget] = useState("");
  const [server, setServer] = useState<DeployTarget>("process");
  const [port, setPort] = useState("8000");
  const [device, setDevice] = useState("cpu");
  const [maxBatch, setMaxBatch] = useState("32");
  const [maxDelay, setMaxDelay] = useState("5");
  const deploying = useAction();
  const { busy, error, reset } = deploying;
  const sharedRuns = shared?.state === "running";
  const modelOnShared = !!shared?.versions.some((v) => v.model === model && v.deployment);
  const inherits = server === "shared" && modelOnShared;

  useEffect(() => {
    if (!open) return;
    setTarget(defaultVersion != null ? String(defaultVersion) : versions.length > 0 ? String(versions[0]) : "");
    setPort(String(suggestPort(usedPorts)));
    setServer("process");
    reset();
    // Reset on each opening only.
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, [open]);

  const submit = () =>
    deploying.run(async () => {
      const d = await post<Deployment>(`/api/models/${seg(model)}/deploy`, deployBody({ target, server, port, device, maxBatch, maxDelay }));
      onDeployed?.(d);
      onClose();
    });

  return (
    <ConfirmDialog
      open={open}
      title={`Deploy ${model}`}
      action="Deploy"
      busyAction="Deploying…"
      tone="primary"
      form="deploy-form"
      busy={busy}
      disabled={!port && server === "process"}
      cancelDisabled={busy}
      onClose={() => !busy && onClose()}
    >
      <form
        id="deploy-form"
        className="form-grid"
        onSubmit={(e) => {
          e.preventDefault();
          if (!busy) void submit();
        }}
      >
        <label>
          Version or alias
          <select value={target} onChange={(e) => setTarget(e.target.value)} disabled={busy}>
            <VersionOptions versions={versions} />
            {Object.entries(aliases).map(([a, v]) => (
              <option key={a} value={a}>
                {a} (v{v})
              </option>
            ))}
          </select>
        </label>
        <label>
          Server
          <select
            value={server}
            onChange={(e) => {
              const next = e.target.value as DeployTarget;
              setServer(next);
              // The running shared server's own port and device, else a blank port (a free one) and cpu.
              if (next === "shared") {
                setPort(sharedRuns ? String(shared?.port ?? "") : "");
                if (sharedRuns && shared?.device) setDevice(shared.device);
                // One configuration serves all of a model's versions there: a second one inherits it.
                if (modelOnShared) {
                  setMaxBatch("");
                  setMaxDelay("");
                }
              } else {
                setPort(String(suggestPort(usedPorts)));
                if (maxBatch === "") setMaxBatch("32");
                if (maxDelay === "") setMaxDelay("5");
              }
            }}
            disabled={busy}
          >
            <option value="process">its own fw serve</option>
            <option value="shared">shared (one fw serve, many versions)</option>
          </select>
        </label>
        <label>
          Port
          <input
            type="number"
            min={1024}
            max={65535}
            value={port}
            placeholder={server === "shared" ? "any free" : undefined}
            onChange={(e) => setPort(e.target.value)}
            disabled={busy || (server === "shared" && sharedRuns)}
          />
        </label>
        <label>
          Device
          <select value={device} onChange={(e) => setDevice(e.target.value)} disabled={busy || (server === "shared" && sharedRuns)}>
            <Options values={["cpu", "cuda"]} />
          </select>
        </label>
        <label>
          Max batch size
          <input
            type="number"
            min={1}
            value={maxBatch}
            placeholder={inherits ? "as deployed" : undefined}
            onChange={(e) => setMaxBatch(e.target.value)}
            disabled={busy || inherits}
          />
        </label>
        <label>
          Max delay (ms)
          <input
            type="number"
            min={0}
            value={maxDelay}
            placeholder={inherits ? "as deployed" : undefined}
            onChange={(e) => setMaxDelay(e.target.value)}
            disabled={busy || inherits}
          />
        </label>
        <div className="span-all">
          {server === "shared" && (
            <p className="muted small">
              {sharedRuns
                ? `The version is added to the shared server at ${shared?.url}, beside the versions it holds; max batch size and delay apply to all of this model’s versions there.`
                : "The shared server is started (on this port, or a free one) and keeps serving every version deployed to it."}
            </p>
          )}
          {busy && (
            <p className="row" aria-live="polite">
              <span className="spinner" aria-hidden="true" />{" "}
              {server === "shared" ? "Loading the version on the shared server…" : `Starting fw serve on 127.0.0.1:${port} and waiting until it is ready…`}
            </p>
          )}
          <ErrorNote error={error} />
        </div>
      </form>
    </ConfirmDialog>
  );
}
