// The "try it" panel of a model page: send JSON rows or an uploaded image to
// a ready deployment (through the dashboard's proxy) and show the prediction,
// as top classes with bars for classifiers, plus the raw JSON.
import { useEffect, useMemo, useState } from "react";
import { get, request, seg, withQuery } from "../api/client";
import { useApi } from "../lib/hooks";
import type { Prediction, ServedModel, TensorSpec } from "../api/types";
import { ErrorNote } from "./ui";

/** One class of a prediction. */
export interface TopClass {
  label: string;
  index: number;
  score: number;
}

/** Zeros nested to `shape` (dynamic dims, written -1 or 0, become 1). */
export function zeros(shape: number[], integer = false): unknown {
  if (shape.length === 0) return integer ? 0 : 0.0;
  const n = shape[0] > 0 ? shape[0] : 1;
  return Array.from({ length: n }, () => zeros(shape.slice(1), integer));
}

/** A valid /predict body for the inputs: one row of zeros, batch dim left out. */
export function exampleBody(inputs: TensorSpec[] | undefined): Record<string, unknown> {
  const specs = inputs ?? [];
  const row = (s: TensorSpec) => zeros(s.shape.slice(1), /int|long/i.test(s.dtype));
  if (specs.length <= 1) return { data: specs.length === 1 ? [row(specs[0])] : [[0]] };
  const ins: Record<string, unknown> = {};
  for (const s of specs) ins[s.name] = [row(s)];
  return { inputs: ins };
}

/** The JSON text of the example body: rows on one line each. */
export function exampleText(inputs: TensorSpec[] | undefined): string {
  const body = exampleBody(inputs);
  if ("data" in body) {
    const rows = body.data as unknown[];
    return `{"data": [\n  ${rows.map((r) => JSON.stringify(r)).join(",\n  ")}\n]}`;
  }
  return JSON.stringify(body, null, 2);
}

/** Softmax of a score vector (left as is when it already sums to 1). */
export function softmax(v: number[]): number[] {
  const sum = v.reduce((a, b) => a + b, 0);
  if (v.every((x) => x >= 0 && x <= 1) && Math.abs(sum - 1) < 1e-3) return v;
  const m = Math.max(...v);
  const e = v.map((x) => Math.exp(x - m));
  const s = e.reduce((a, b) => a + b, 0);
  return e.map((x) => x / s);
}

/** The top k classes of the first row of an answer (image top_k, or softmax of row scores). */
export function topClasses(answer: unknown, labels: string[] | undefined, k = 5): TopClass[] {
  const preds = (answer as Prediction | undefined)?.predictions;
  if (!Array.isArray(preds) || preds.length === 0) return [];
  const first = preds[0] as unknown;
  if (first && typeof first === "object" && !Array.isArray(first) && Array.isArray((first as { top_k?: unknown }).top_k)) {
    return ((first as { top_k: TopClass[] }).top_k ?? []).slice(0, k);
  }
  if (Array.isArray(first) && first.length > 1 && first.every((x) => typeof x === "number")) {
    const p = softmax(first as number[]);
    return p
      .map((score, index) => ({ index, score, label: labels?.[index] ?? String(index) }))
      .sort((a, b) => b.score - a.score)
      .slice(0, k);
  }
  return [];
}

/** A probability as a percent: "<0.01%" for the tiny ones. */
export function fmtPct(p: number): string {
  if (p > 0 && p < 0.0001) return "<0.01%";
  return `${(p * 100).toFixed(p > 0.999 || p < 0.01 ? 2 : 1)}%`;
}

/** Horizontal bars of the top classes. */
export function TopClassBars({ classes }: { classes: TopClass[] }) {
  if (classes.length === 0) return null;
  return (
    <ol className="topk" aria-label="top classes">
      {classes.map((c) => (
        <li key={c.index}>
          <span className="topk-label">{c.label}</span>
          <span className="topk-bar" aria-hidden="true">
            <span style={{ width: `${Math.max(0.5, c.score * 100)}%` }} />
          </span>
          <span className="num topk-score">{fmtPct(c.score)}</span>
        </li>
      ))}
    </ol>
  );
}

/** Image query parameters from an NCHW input shape, for a file without a preprocessing recipe. */
export function imageParams(inputs: TensorSpec[] | undefined): { height: string; width: string; channels: string } {
  const sh = inputs?.[0]?.shape ?? [];
  if (sh.length === 4 && sh[1] > 0 && sh[2] > 0 && sh[3] > 0) return { channels: String(sh[1]), height: String(sh[2]), width: String(sh[3]) };
  return { height: "", width: "", channels: "" };
}

/** True when the first input looks like an image batch (N, 1|3, H, W). */
function looksLikeImage(inputs: TensorSpec[] | undefined): boolean {
  const sh = inputs?.[0]?.shape ?? [];
  return sh.length === 4 && (sh[1] === 1 || sh[1] === 3);
}

/** Sends rows or an image to one deployment and shows the answer. */
export function TryIt({
  deploymentId,
  inputs,
  labels: givenLabels,
  body,
}: {
  deploymentId: string;
  inputs?: TensorSpec[];
  labels?: string[];
  /** A request body to load into the rows editor (a logged request opened from Traffic); its change loads it. */
  body?: string;
}) {
  const [mode, setMode] = useState<"rows" | "image">(looksLikeImage(inputs) ? "image" : "rows");
  const served = useApi((sig) => get<ServedModel>(`/api/deployments/${seg(deploymentId)}/model`, undefined, sig), [deploymentId]);
  const hasRecipe = !!served.data?.metadata?.preprocessing?.image;
  const labels = givenLabels && givenLabels.length > 0 ? givenLabels : (served.data?.labels ?? undefined);
  const [img, setImg] = useState(() => imageParams(inputs));
  const [invert, setInvert] = useState(false);
  const example = useMemo(() => exampleText(inputs), [inputs]);
  const [text, setText] = useState(body ?? example);
  useEffect(() => {
    if (body !== undefined) {
      setText(body);
      setMode("rows");
    }
  }, [body]);
  const [file, setFile] = useState<File | null>(null);
  const [preview, setPreview] = useState<string>();
  const [answer, setAnswer] = useState<unknown>();
  const [error, setError] = useState<unknown>();
  const [busy, setBusy] = useState(false);

  useEffect(() => setText(example), [example]);
  useEffect(() => {
    if (!file) {
      setPreview(undefined);
      return;
    }
    if (typeof URL.createObjectURL !== "function") return;
    const u = URL.createObjectURL(file);
    setPreview(u);
    return () => URL.revokeObjectURL(u);
  }, [file]);

  const base = `/api/deployments/${seg(deploymentId)}`;
  const predictRows = async () => {
    let body: unknown;
    try {
      body = JSON.parse(text);
    } catch (e) {
      setError(`The rows are not valid JSON: ${(e as Error).message}`);
      return;
    }
    await send(() => request("POST", `${base}/predict`, { body }));
  };
  const predictImage = async () => {
    if (!file) return;
    // Without the file's own recipe the server needs the size and channels.
    const q = hasRecipe ? {} : { height: img.height, width: img.width, channels: img.channels, invert: invert ? "true" : undefined };
    await send(() => request("POST", withQuery(`${base}/predict/image`, q), { body: file, headers: { "Content-Type": file.type || "application/octet-stream" } }));
  };
  const send = async (call: () => Promise<unknown>) => {
    setBusy(true);
    setError(undefined);
    try {
      setAnswer(await call());
    } catch (e) {
      setAnswer(undefined);
      setError(e);
    } finally {
      setBusy(false);
    }
  };

  const classes = topClasses(answer, labels);
  const firstLabels = (answer as Prediction | undefined)?.labels;

  return (
    <div className="tryit">
      <div className="tabs" role="tablist" aria-label="input kind">
        <button type="button" role="tab" aria-selected={mode === "rows"} className={mode === "rows" ? "active" : ""} onClick={() => setMode("rows")}>
          JSON rows
        </button>
        <button type="button" role="tab" aria-selected={mode === "image"} className={mode === "image" ? "active" : ""} onClick={() => setMode("image")}>
          Image
        </button>
      </div>
      <div className="tryit-body">
        <div className="tryit-input">
          {mode === "rows" ? (
            <>
              <label className="stack">
                Request body (POST /predict)
                <textarea className="code" rows={8} spellCheck={false} value={text} onChange={(e) => setText(e.target.value)} />
              </label>
              <div className="row">
                <button type="button" className="primary" disabled={busy} onClick={() => void predictRows()}>
                  {busy ? "Predicting…" : "Predict"}
                </button>
                <button type="button" className="ghost" onClick={() => setText(example)}>
                  Reset example
                </button>
              </div>
            </>
          ) : (
            <>
              <label className="stack">
                Image (POST /predict/image)
                <input type="file" accept="image/*" onChange={(e) => setFile(e.target.files?.[0] ?? null)} />
              </label>
              {served.data && !hasRecipe && (
                <fieldset className="tryit-params">
                  <legend>No preprocessing recipe in the model file: resize to</legend>
                  <label>
                    Height
                    <input type="number" min={1} value={img.height} onChange={(e) => setImg({ ...img, height: e.target.value })} />
                  </label>
                  <label>
                    Width
                    <input type="number" min={1} value={img.width} onChange={(e) => setImg({ ...img, width: e.target.value })} />
                  </label>
                  <label>
                    Channels
                    <select value={img.channels} onChange={(e) => setImg({ ...img, channels: e.target.value })}>
                      <option value="1">1 (grey)</option>
                      <option value="3">3 (RGB)</option>
                    </select>
                  </label>
                  <label className="radio">
                    <input type="checkbox" checked={invert} onChange={(e) => setInvert(e.target.checked)} />
                    Invert
                  </label>
                </fieldset>
              )}
              {preview && <img className="tryit-preview" src={preview} alt="uploaded image preview" />}
              <div className="row">
                <button type="button" className="primary" disabled={busy || !file} onClick={() => void predictImage()}>
                  {busy ? "Predicting…" : "Predict image"}
                </button>
              </div>
            </>
          )}
        </div>
        <div className="tryit-output" aria-live="polite">
          <ErrorNote error={error} />
          {answer !== undefined && (
            <>
              {classes.length > 0 ? (
                <>
                  <h3>Top classes</h3>
                  <TopClassBars classes={classes} />
                </>
              ) : (
                firstLabels && (
                  <p>
                    Labels: <strong>{firstLabels.join(", ")}</strong>
                  </p>
                )
              )}
              <details open={classes.length === 0}>
                <summary>Raw answer</summary>
                <pre className="logs tryit-raw">{JSON.stringify(answer, (_k, v) => (typeof v === "number" && Number.isFinite(v) ? Number(v.toPrecision(6)) : v), 2)}</pre>
              </details>
            </>
          )}
          {answer === undefined && !error && <p className="muted">The prediction appears here.</p>}
        </div>
      </div>
    </div>
  );
}
