// A form built from a training recipe's parameter schema (GET
// /api/training/recipes): one labelled input per parameter, its description
// as a hint, and the same checks the dashboard makes (integer, range,
// choices) shown next to the field before the request is sent.
import { useEffect, useId, useState } from "react";
import { fmtParam } from "../lib/format";
import type { RecipeParam } from "../api/types";

/** The recipe's defaults as a values object. */
export function paramDefaults(params: RecipeParam[]): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const p of params) out[p.name] = p.default;
  return out;
}

const isNumeric = (p: RecipeParam) => p.type === "int" || p.type === "float";

/** Checks one value against its parameter; "" when fine. */
export function validateParam(p: RecipeParam, v: unknown): string {
  if (v === undefined) return "";
  if (isNumeric(p)) {
    if (v === "" || v === null) return "Required: enter a number.";
    if (typeof v === "string") return p.type === "int" ? "Not an integer." : "Not a number.";
    if (typeof v !== "number" || !Number.isFinite(v)) return "Not a number.";
    if (p.type === "int" && !Number.isInteger(v)) return "Not an integer.";
    if (p.min != null && v < p.min) return `Below the minimum ${p.min}.`;
    if (p.max != null && v > p.max) return `Above the maximum ${p.max}.`;
  } else if (p.type === "bool") {
    if (typeof v !== "boolean") return "Expected true or false.";
  } else if (p.type === "str") {
    if (typeof v !== "string") return "Expected text.";
  }
  if (p.choices && p.choices.length > 0 && !p.choices.some((c) => JSON.stringify(c) === JSON.stringify(v))) {
    return `Not one of ${p.choices.map(fmtParam).join(", ")}.`;
  }
  return "";
}

/** Errors per field name (empty when every value is valid). */
export function validateParams(params: RecipeParam[], values: Record<string, unknown>): Record<string, string> {
  const errors: Record<string, string> = {};
  for (const p of params) {
    const e = validateParam(p, values[p.name]);
    if (e) errors[p.name] = e;
  }
  return errors;
}

/** Turns a number input's text into the value to send: a number, or the text when it is not one. */
function parseNumber(text: string): number | string {
  const t = text.trim();
  if (t === "") return "";
  const n = Number(t);
  return Number.isFinite(n) ? n : text;
}

/** A step for number inputs: 1 for ints, "any" for floats. */
function stepFor(p: RecipeParam): string {
  return p.type === "int" ? "1" : "any";
}

/**
 * A number input that keeps the text being typed ("0.", "1e-") while
 * reporting parsed numbers, and follows value changes from outside.
 */
function NumberInput({ id, param: p, value, describedBy, invalid, onChange }: { id: string; param: RecipeParam; value: unknown; describedBy?: string; invalid: boolean; onChange: (v: unknown) => void }) {
  const shown = value === undefined || value === null ? "" : String(value);
  const [text, setText] = useState(shown);
  useEffect(() => {
    // A new value from outside (defaults of another recipe): show it.
    setText((t) => (parseNumber(t) === value ? t : shown));
  }, [value, shown]);
  return (
    <input
      id={id}
      type="number"
      inputMode={p.type === "int" ? "numeric" : "decimal"}
      min={p.min ?? undefined}
      max={p.max ?? undefined}
      step={stepFor(p)}
      value={text}
      aria-describedby={describedBy}
      aria-invalid={invalid || undefined}
      onChange={(e) => {
        setText(e.target.value);
        onChange(parseNumber(e.target.value));
      }}
    />
  );
}

/** One parameter's input with its label, hint and error. */
function ParamField({ param: p, value, onChange }: { param: RecipeParam; value: unknown; onChange: (v: unknown) => void }) {
  const id = useId();
  const error = validateParam(p, value);
  const hintId = `${id}-hint`;
  const errId = `${id}-err`;
  const describedBy = [p.description ? hintId : "", error ? errId : ""].filter(Boolean).join(" ") || undefined;
  let input;
  if (p.choices && p.choices.length > 0) {
    const idx = p.choices.findIndex((c) => JSON.stringify(c) === JSON.stringify(value));
    input = (
      <select id={id} value={idx < 0 ? "" : String(idx)} aria-describedby={describedBy} aria-invalid={error ? true : undefined} onChange={(e) => onChange(p.choices![Number(e.target.value)])}>
        {idx < 0 && <option value="">(choose)</option>}
        {p.choices.map((c, i) => (
          <option key={i} value={String(i)}>
            {fmtParam(c)}
          </option>
        ))}
      </select>
    );
  } else if (p.type === "bool") {
    input = <input id={id} type="checkbox" checked={value === true} aria-describedby={describedBy} onChange={(e) => onChange(e.target.checked)} />;
  } else if (isNumeric(p)) {
    input = <NumberInput id={id} param={p} value={value} describedBy={describedBy} invalid={!!error} onChange={onChange} />;
  } else {
    input = <input id={id} type="text" value={value == null ? "" : String(value)} aria-describedby={describedBy} aria-invalid={error ? true : undefined} onChange={(e) => onChange(e.target.value)} />;
  }
  const range = isNumeric(p) && (p.min != null || p.max != null) ? ` (${p.min ?? "…"} to ${p.max ?? "…"})` : "";
  return (
    <div className={`param-field${p.type === "bool" ? " param-bool" : ""}${error ? " invalid" : ""}`}>
      <label htmlFor={id}>
        <code>{p.name}</code>
        <span className="param-type">
          {" "}
          {p.type}
          {range}
        </span>
      </label>
      {input}
      {p.description && (
        <small id={hintId} className="hint">
          {p.description} · default {fmtParam(p.default)}
        </small>
      )}
      {error && (
        <small id={errId} className="field-error" role="alert">
          {error}
        </small>
      )}
    </div>
  );
}

/** Props of ParamsForm. */
export interface ParamsFormProps {
  params: RecipeParam[];
  values: Record<string, unknown>;
  onChange: (v: Record<string, unknown>) => void;
}

/** The inputs for a recipe's parameters (a fieldset to put inside a form). */
export function ParamsForm({ params, values, onChange }: ParamsFormProps) {
  if (params.length === 0) return <p className="muted">This recipe has no parameters.</p>;
  return (
    <fieldset className="params-form">
      <legend>Parameters</legend>
      {params.map((p) => (
        <ParamField key={p.name} param={p} value={values[p.name]} onChange={(v) => onChange({ ...values, [p.name]: v })} />
      ))}
    </fieldset>
  );
}
