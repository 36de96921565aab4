// The export dialog: pick a run's checkpoint (or export a model version: a
// checkpoint or a torch.export program, e.g. an MLflow PyTorch model), a format (TorchScript, ONNX,
// quantized TorchScript, int8 ONNX, AOTInductor) and its options, start POST /api/models/export, follow the job
// until it ends, then show the parity report and the registered version.
import { useEffect, useState } from "react";
import { Link } from "react-router-dom";
import { ApiError, get, post, seg } from "../api/client";
import { num } from "../api/stream";
import { fmtBytes, fmtNum, fmtTime } from "../lib/format";
import { useAction, useApi } from "../lib/hooks";
import { Dialog, ErrorNote, Options, StatusBadge } from "./ui";
import { DataTable, numCol } from "./DataTable";
import type { Checkpoint, ExperimentPage, ExportFormat, ExportJob, ExportRequest, ExportStarted, Run, RunCheckpoints, RunPage } from "../api/types";

// The API's types come from the OpenAPI document (../api/types). The parity
// report is the one exception: the document leaves it free-form (ExportJob
// report and ModelVersion parity are "fw.export's JSON report", an object of
// any shape, since the Python exporter writes it), so its fields are
// described here from python/fw/export.py ExportReport.

/** One check of the exporter's parity report. */
export interface ParityCheck {
  input: string;
  batch: number;
  max_abs_error: number;
}

/** fw.export's JSON report (python/fw/export.py ExportReport). */
export interface ParityReport {
  path?: string;
  format?: string;
  name?: string;
  max_abs_error: number;
  atol?: number;
  rtol?: number;
  size_bytes?: number;
  seconds?: number;
  method?: string;
  checks?: ParityCheck[];
  accuracy?: number | null;
  eager_accuracy?: number | null;
  accuracy_delta?: number | null;
  /** int8 ONNX only: "dynamic" or "static". */
  quantization?: string | null;
}


const FORMATS: { value: ExportFormat; label: string }[] = [
  { value: "onnx", label: "ONNX" },
  { value: "torchscript", label: "TorchScript" },
  { value: "quantized", label: "Quantized (int8 TorchScript)" },
  { value: "onnx_int8", label: "int8 ONNX (runs on ONNX Runtime)" },
  { value: "aoti", label: "AOTInductor (.pt2)" },
];

type Quantization = NonNullable<ExportRequest["quantization"]>;

const QUANTIZATIONS: { value: Quantization; label: string }[] = [
  { value: "dynamic", label: "dynamic (no data; activation scales per call)" },
  { value: "static", label: "static (calibrated on the checkpoint's training rows)" },
];

/** ONNX formats take an opset; TorchScript ones a trace/script method; AOTInductor neither (always torch.export). */
const isOnnx = (f: ExportFormat) => f === "onnx" || f === "onnx_int8";
const HAS_METHOD: ExportFormat[] = ["torchscript", "quantized"];

/** Builds the export request from the form's values (empty options left out): a model version's when
 * model is given, else a run's checkpoint's. */
export function exportBody(v: {
  runId: string;
  checkpoint: string;
  model?: string;
  version?: number;
  format: ExportFormat;
  opset: string;
  method: string;
  name: string;
  quantization?: Quantization;
}): ExportRequest {
  const body: ExportRequest = v.model ? { model: v.model, version: v.version, format: v.format } : { run_id: v.runId, checkpoint: v.checkpoint, format: v.format };
  if (isOnnx(v.format) && v.opset.trim() !== "") body.opset_version = Number(v.opset);
  if (HAS_METHOD.includes(v.format) && (v.method === "trace" || v.method === "script")) body.method = v.method;
  if (v.format === "onnx_int8" && v.quantization) body.quantization = v.quantization;
  if (v.name.trim() !== "") body.name = v.name.trim();
  return body;
}

/** A model name from a recipe or experiment name (the registry's name rules). */
export function modelNameFrom(s: string | undefined): string {
  const n = (s ?? "").replace(/[^A-Za-z0-9._-]+/g, "-").replace(/^[^A-Za-z0-9]+/, "").slice(0, 64);
  return n;
}

/** The parity report of an export: largest error, tolerance, verdict, checks. */
export function ParityView({ report: raw, failed }: { report: ParityReport | Record<string, unknown> | undefined | null; failed?: boolean }) {
  const report = raw as ParityReport | undefined | null;
  if (!report || typeof report.max_abs_error !== "number") return <p className="muted">No parity report.</p>;
  const pass = !failed;
  return (
    <div className="parity" data-testid="parity-report">
      <div className="row parity-head">
        <span className={`badge ${pass ? "badge-finished" : "badge-failed"}`}>{pass ? "parity pass" : "parity fail"}</span>
        <span>
          largest |exported − checkpoint| = <strong className="num">{fmtNum(report.max_abs_error)}</strong>
        </span>
        {report.atol != null && (
          <span className="muted">
            tolerance atol {fmtNum(report.atol)}, rtol {fmtNum(report.rtol ?? 0)}
          </span>
        )}
      </div>
      <div className="row muted parity-meta">
        {report.format && <span>format {report.format}</span>}
        {report.method && <span>method {report.method}</span>}
        {report.quantization && <span>int8 {report.quantization}</span>}
        {report.size_bytes != null && <span>{fmtBytes(report.size_bytes)}</span>}
        {report.seconds != null && <span>{fmtNum(report.seconds)} s</span>}
        {report.accuracy != null && (
          <span>
            accuracy {fmtNum(report.accuracy)} (checkpoint {fmtNum(report.eager_accuracy ?? null)}, Δ {fmtNum(report.accuracy_delta ?? null)})
          </span>
        )}
      </div>
      {report.checks && report.checks.length > 0 && (
        <DataTable className="compact" columns={["input", numCol("batch"), numCol("max abs error")]}>
          {report.checks.map((c, i) => (
            <tr key={i}>
              <td>{c.input}</td>
              <td className="num">{c.batch}</td>
              <td className="num">{fmtNum(c.max_abs_error)}</td>
            </tr>
          ))}
        </DataTable>
      )}
    </div>
  );
}

/** Picks an experiment and one of its runs (when the dialog was opened without a run). */
function RunPicker({ runId, onRun }: { runId: string; onRun: (id: string) => void }) {
  const [exp, setExp] = useState("");
  const exps = useApi((s) => get<ExperimentPage>("/api/experiments", { limit: 200, sort: "updated", desc: true }, s), []);
  const runs = useApi(
    (s) => (exp ? get<RunPage>(`/api/experiments/${seg(exp)}/runs`, { limit: 200, sort: "created", desc: true }, s) : Promise.resolve({ runs: [] as Run[] })),
    [exp],
  );
  useEffect(() => {
    const first = exps.data?.experiments?.[0];
    if (!exp && first) setExp(first.id);
  }, [exps.data, exp]);
  useEffect(() => {
    const list = runs.data?.runs ?? [];
    if (list.length > 0 && !list.some((r) => r.id === runId)) {
      const done = list.find((r) => r.status === "finished") ?? list[0];
      onRun(done.id);
    }
  }, [runs.data, runId, onRun]);
  return (
    <>
      <label>
        Experiment
        <select value={exp} onChange={(e) => setExp(e.target.value)}>
          {(exps.data?.experiments ?? []).map((x) => (
            <option key={x.id} value={x.id}>
              {x.name}
            </option>
          ))}
        </select>
      </label>
      <label>
        Run
        <select value={runId} onChange={(e) => onRun(e.target.value)}>
          {(runs.data?.runs ?? []).map((r) => (
            <option key={r.id} value={r.id}>
              {(r.name || r.id) + (r.status ? ` (${r.status})` : "")}
            </option>
          ))}
        </select>
      </label>
      <ErrorNote error={exps.error ?? runs.error} />
    </>
  );
}

/** The dialog's form and, once started, the job's progress and result. */
export function ExportDialog({
  open,
  onClose,
  runId,
  checkpoint,
  model,
  version,
  program,
  onDone,
}: {
  open: boolean;
  onClose: () => void;
  runId?: string;
  checkpoint?: string;
  /** Export this registered version (a checkpoint or a torch.export program) instead of a run's checkpoint. */
  model?: string;
  version?: number;
  /** The version is a torch.export program: no calibration rows for static quantization. */
  program?: boolean;
  onDone?: (job: ExportJob) => void;
}) {
  const [run, setRun] = useState(runId ?? "");
  const [ckpt, setCkpt] = useState(checkpoint ?? "");
  const [format, setFormat] = useState<ExportFormat>("onnx");
  // Empty: the exporter's own opset (torch's current exporter picks it; the legacy fallback uses 14).
  const [opset, setOpset] = useState("");
  const [method, setMethod] = useState("trace");
  const [quantization, setQuantization] = useState<Quantization>("dynamic");
  const [name, setName] = useState("");
  const [nameTouched, setNameTouched] = useState(false);
  const [job, setJob] = useState<ExportJob>();
  const starting = useAction();
  const { busy, error, setError } = starting;

  // A new opening starts from the given run and checkpoint (or version); a program carries no
  // calibration rows, so static quantization is not offered for it.
  useEffect(() => {
    if (!open) return;
    setRun(runId ?? "");
    setCkpt(checkpoint ?? "");
    setJob(undefined);
    setError(undefined);
    setNameTouched(false);
    if (program) setQuantization("dynamic");
  }, [open, runId, checkpoint, program]);

  const ofVersion = model !== undefined;
  const runInfo = useApi((s) => (open && run && !ofVersion ? get<Run>(`/api/runs/${seg(run)}`, undefined, s) : Promise.resolve(undefined)), [open, run]);
  const ckpts = useApi(
    (s) => (open && run && !ofVersion ? get<RunCheckpoints>(`/api/runs/${seg(run)}/checkpoints`, undefined, s) : Promise.resolve({ checkpoints: [] as Checkpoint[] })),
    [open, run],
  );

  // Default model name: the version's model, else the run's recipe, else its experiment.
  useEffect(() => {
    if (nameTouched) return;
    if (ofVersion) {
      setName(model);
      return;
    }
    const r = runInfo.data;
    setName(modelNameFrom(r?.source?.recipe || r?.experiment || ""));
  }, [runInfo.data, nameTouched, ofVersion, model]);

  // Default checkpoint: the given one, else the newest (largest step).
  useEffect(() => {
    const list = ckpts.data?.checkpoints ?? [];
    if (list.length === 0) return;
    if (!list.some((c) => c.path === ckpt)) {
      const newest = [...list].sort((a, b) => b.step - a.step || b.epoch - a.epoch)[0];
      setCkpt(newest.path);
    }
  }, [ckpts.data, ckpt]);

  // Follow the job until it finishes or fails.
  const running = job !== undefined && job.state !== "finished" && job.state !== "failed";
  const jobId = job?.id;
  useEffect(() => {
    if (!running || !jobId) return;
    let stop = false;
    let timer: ReturnType<typeof setTimeout>;
    const tick = async () => {
      try {
        const j = await get<ExportJob>(`/api/models/exports/${seg(jobId)}`);
        if (stop) return;
        setJob(j);
        if (j.state === "finished" || j.state === "failed") {
          onDone?.(j);
          return;
        }
      } catch (e) {
        if (stop) return;
        if (!(e instanceof ApiError && e.unreachable)) {
          setError(e);
          return;
        }
      }
      timer = setTimeout(tick, 1000);
    };
    timer = setTimeout(tick, 500);
    return () => {
      stop = true;
      clearTimeout(timer);
    };
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, [running, jobId]);

  const submit = () =>
    starting.run(async () => {
      const res = await post<ExportStarted>("/api/models/export", exportBody({ runId: run, checkpoint: ckpt, model, version, format, opset, method, name, quantization }));
      const j = res.job ?? { id: res.id, state: res.state, progress: "exporting", model: name };
      setJob(j);
      if (j.state === "finished" || j.state === "failed") onDone?.(j);
    });

  const list = ckpts.data?.checkpoints ?? [];
  const canSubmit = (ofVersion || (!!run && !!ckpt)) && !busy && !running;
  const footer = job ? (
    <>
      {job.state === "failed" && (
        <button type="button" onClick={() => setJob(undefined)}>
          Back to the form
        </button>
      )}
      <button type="button" className="primary" onClick={onClose}>
        {running ? "Close (keeps running)" : "Close"}
      </button>
    </>
  ) : (
    <>
      <button type="button" onClick={onClose}>
        Cancel
      </button>
      <button type="submit" form="export-form" className="primary" disabled={!canSubmit}>
        {busy ? "Starting…" : "Export"}
      </button>
    </>
  );

  return (
    <Dialog open={open} title={ofVersion ? `Export ${model} v${version}` : "Export a checkpoint"} onClose={onClose} footer={footer}>
      {!job ? (
        <form
          id="export-form"
          className="form-grid export-form"
          onSubmit={(e) => {
            e.preventDefault();
            if (canSubmit) void submit();
          }}
        >
          {ofVersion ? (
            <p className="muted span-all">
              {program
                ? "A torch.export program (an MLflow PyTorch model): exported into a file fw serves, checked against the program on its example input and other batch sizes, and registered as the next version."
                : "A run's checkpoint: exported, checked against the model and registered as the next version."}
            </p>
          ) : runId ? (
            <p className="muted span-all">
              Run <Link to={`/runs/${seg(runId)}`}>{runInfo.data?.name || runId}</Link>
              {runInfo.data?.experiment ? ` in ${runInfo.data.experiment}` : ""}
            </p>
          ) : (
            <RunPicker runId={run} onRun={setRun} />
          )}
          {!ofVersion && (
            <label className="span-all">
              Checkpoint
              <select value={ckpt} onChange={(e) => setCkpt(e.target.value)} disabled={list.length === 0}>
                {list.length === 0 && <option value="">{ckpts.loading ? "loading…" : "this run has no checkpoints"}</option>}
                {list.map((c) => (
                  <option key={c.path} value={c.path}>
                    {c.path} · step {c.step}
                    {c.metrics && Object.keys(c.metrics).length > 0
                      ? " · " +
                        Object.entries(c.metrics)
                          .slice(0, 2)
                          .map(([k, v]) => `${k} ${fmtNum(num(v))}`)
                          .join(", ")
                      : ""}
                  </option>
                ))}
              </select>
            </label>
          )}
          <fieldset className="span-all format-choice">
            <legend>Format</legend>
            {FORMATS.map((f) => (
              <label key={f.value} className="radio">
                <input type="radio" name="format" value={f.value} checked={format === f.value} onChange={() => setFormat(f.value)} />
                {f.label}
              </label>
            ))}
          </fieldset>
          {format === "onnx_int8" && (
            <label>
              Quantization
              <select value={quantization} onChange={(e) => setQuantization(e.target.value as Quantization)}>
                {QUANTIZATIONS.filter((q) => !(program && q.value === "static")).map((q) => (
                  <option key={q.value} value={q.value}>
                    {q.label}
                  </option>
                ))}
              </select>
            </label>
          )}
          {isOnnx(format) ? (
            <label>
              ONNX opset version
              <input type="number" min={7} max={30} value={opset} placeholder="the exporter's default" onChange={(e) => setOpset(e.target.value)} />
            </label>
          ) : format === "aoti" ? (
            <p className="muted" data-testid="aoti-note">
              Compiles C++ for this machine's CPU with torch.export and AOTInductor: a minute or more. The package runs where its CPU features are present.
            </p>
          ) : (
            <label>
              Method
              <select value={method} onChange={(e) => setMethod(e.target.value)}>
                <Options values={["trace", "script"]} />
              </select>
            </label>
          )}
          <label>
            Model name
            <input
              value={name}
              placeholder="registry name"
              onChange={(e) => {
                setName(e.target.value);
                setNameTouched(true);
              }}
            />
          </label>
          <div className="span-all">
            <ErrorNote error={error ?? runInfo.error ?? ckpts.error} />
          </div>
        </form>
      ) : (
        <ExportProgress job={job} />
      )}
      {job && <ErrorNote error={error} />}
    </Dialog>
  );
}

/** A running or ended export job: progress, then parity report or failure. */
export function ExportProgress({ job }: { job: ExportJob }) {
  const running = job.state !== "finished" && job.state !== "failed";
  return (
    <div className="stack export-progress" aria-live="polite">
      <div className="row">
        <StatusBadge status={job.state} />
        {running && <span className="spinner" aria-hidden="true" />}
        <span>{running ? `${job.progress || "exporting"}…` : job.state === "finished" ? "Export finished and registered." : "Export failed."}</span>
        <span className="muted">{job.id}</span>
      </div>
      {job.state === "failed" && (
        <div className="error-note" role="alert">
          <strong>The exporter failed</strong>
          <pre className="logs export-error">{job.error || "no message"}</pre>
        </div>
      )}
      {job.report && <ParityView report={job.report} failed={job.state === "failed"} />}
      {job.state === "finished" && job.model && (
        <p>
          Registered as{" "}
          <Link to={`/models/${seg(job.model)}`}>
            {job.model} v{job.version}
          </Link>
          {job.finished ? <span className="muted"> · {fmtTime(job.finished)}</span> : null}
        </p>
      )}
    </div>
  );
}
