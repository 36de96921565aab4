// The runs table's CSV export as pure functions: the columns (the fixed run
// fields, then the chosen params and metrics), RFC 4180 escaping, and the
// file name. The fetching and the download live in RunBulkActions.
import type { Run } from "../api/types";

/** Which value of a metric's summary a column holds. */
export type MetricStat = "last" | "min" | "max";

/** The fixed columns, in order. */
export const CSV_FIXED = ["id", "name", "experiment", "status", "created", "started", "ended", "duration_s"] as const;

/** One chosen column of the table: a param or a metric (with the summary value it shows). */
export interface CsvColumn {
  kind: "param" | "metric";
  key: string;
  stat?: MetricStat;
}

/**
 * A table column id ("params.lr", 'metrics."val.loss"') as a CsvColumn;
 * undefined for anything else.
 */
export function parseColumn(col: string, stat: MetricStat = "last"): CsvColumn | undefined {
  const dot = col.indexOf(".");
  if (dot < 0) return undefined;
  const prefix = col.slice(0, dot);
  let key = col.slice(dot + 1);
  if (key.startsWith('"')) {
    try {
      key = JSON.parse(key) as string;
    } catch {
      /* keep it as it is */
    }
  }
  if (!key) return undefined;
  if (prefix === "params") return { kind: "param", key };
  if (prefix === "metrics") return { kind: "metric", key, stat };
  return undefined;
}

/** One CSV field: quoted (quotes doubled) when it holds a quote, comma, CR or LF, or starts or ends with a space. */
export function csvField(s: string): string {
  return /[",\r\n]|^\s|\s$/.test(s) ? `"${s.replace(/"/g, '""')}"` : s;
}

/** A number as text: NaN and the infinities spelled as the API spells them. */
function numText(v: number): string {
  if (Number.isNaN(v)) return "NaN";
  if (v === Infinity) return "Infinity";
  if (v === -Infinity) return "-Infinity";
  return String(v);
}

/** A metric summary value (a number, or "NaN" / "Infinity" / "-Infinity" as the API sends them). */
export function metricText(v: unknown): string {
  if (v === null || v === undefined) return "";
  if (typeof v === "number") return numText(v);
  if (typeof v === "string") {
    if (v === "NaN" || v === "Infinity" || v === "-Infinity") return v;
    const n = Number(v);
    return v.trim() !== "" && !Number.isNaN(n) ? numText(n) : v;
  }
  return String(v);
}

/** A param value: strings as they are, numbers and booleans as text, anything else as JSON; absent is empty. */
export function paramText(v: unknown): string {
  if (v === null || v === undefined) return "";
  if (typeof v === "string") return v;
  if (typeof v === "number") return numText(v);
  if (typeof v === "boolean") return String(v);
  return JSON.stringify(v);
}

/** Seconds a run ran: until `now` while it runs, until its last update if it never ended; "" before it started. */
export function durationSeconds(r: Run, now: number): string {
  if (!r.started) return "";
  const start = Date.parse(r.started);
  const end = r.ended ? Date.parse(r.ended) : r.status === "running" ? now : Date.parse(r.updated);
  if (Number.isNaN(start) || Number.isNaN(end)) return "";
  return String(Math.round(end - start) / 1000);
}

/** The header of a chosen column: "params.KEY", "metrics.KEY", or "metrics.KEY (min)". */
export function columnHeader(c: CsvColumn): string {
  if (c.kind === "param") return `params.${c.key}`;
  return c.stat && c.stat !== "last" ? `metrics.${c.key} (${c.stat})` : `metrics.${c.key}`;
}

/**
 * The runs as CSV text (CRLF line ends, a header row first): id, name,
 * experiment, status, created, started, ended, duration_s, then one column
 * per chosen param or metric (duplicates once).
 */
export function runsToCsv(runs: Run[], columns: CsvColumn[], now = Date.now()): string {
  const seen = new Set<string>();
  const cols = columns.filter((c) => {
    const h = `${c.kind}\u0000${c.key}\u0000${c.stat ?? "last"}`;
    if (seen.has(h)) return false;
    seen.add(h);
    return true;
  });
  const lines = [[...CSV_FIXED, ...cols.map(columnHeader)].map(csvField).join(",")];
  for (const r of runs) {
    const cells = [r.id, r.name, r.experiment, r.status, r.created ?? "", r.started ?? "", r.ended ?? "", durationSeconds(r, now)];
    for (const c of cols) {
      if (c.kind === "param") cells.push(paramText(r.params?.[c.key]));
      else cells.push(metricText(r.metrics?.[c.key]?.[c.stat ?? "last"]));
    }
    lines.push(cells.map(csvField).join(","));
  }
  return lines.join("\r\n") + "\r\n";
}

/** The download's name: runs-<experiment>.csv, or runs-all.csv, with only safe characters. */
export function csvFileName(experiment: string | undefined): string {
  const name = (experiment ?? "").replace(/[^A-Za-z0-9._-]+/g, "_").replace(/^[._]+|_+$/g, "");
  return `runs-${name || "all"}.csv`;
}
