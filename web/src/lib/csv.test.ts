// The runs CSV: RFC 4180 escaping, the fixed and chosen columns, metric
// summary values (NaN and the infinities as numbers or as the API's strings),
// and the file name.
import { describe, expect, it } from "vitest";
import { csvField, csvFileName, metricText, paramText, parseColumn, runsToCsv } from "./csv";
import type { Run } from "../api/types";

function run(over: Partial<Run> = {}): Run {
  return {
    id: "r1",
    experiment_id: "e1",
    experiment: "digits",
    name: "run-1",
    status: "finished",
    created: "2026-01-02T03:04:05Z",
    updated: "2026-01-02T03:06:00Z",
    started: "2026-01-02T03:04:05Z",
    ended: "2026-01-02T03:05:35.5Z",
    progress: {} as Run["progress"],
    source: {} as Run["source"],
    params: { lr: 0.001, optimizer: "adam" },
    tags: null,
    metrics: { loss: { last: 0.25, last_step: 10, last_time: "2026-01-02T03:05:00Z", min: 0.2, min_step: 8, max: 2, max_step: 0, count: 11 } },
    ...over,
  };
}

/** Splits CSV text into rows of fields (quotes honoured), to check what a reader gets back. */
function parse(text: string): string[][] {
  const rows: string[][] = [];
  let row: string[] = [];
  let f = "";
  let q = false;
  for (let i = 0; i < text.length; i++) {
    const c = text[i];
    if (q) {
      if (c === '"' && text[i + 1] === '"') {
        f += '"';
        i++;
      } else if (c === '"') q = false;
      else f += c;
    } else if (c === '"') q = true;
    else if (c === ",") {
      row.push(f);
      f = "";
    } else if (c === "\r" && text[i + 1] === "\n") {
      row.push(f);
      rows.push(row);
      row = [];
      f = "";
      i++;
    } else f += c;
  }
  if (f || row.length) rows.push([...row, f]);
  return rows;
}

describe("csvField", () => {
  it("leaves plain text alone and quotes quotes, commas, newlines and edge spaces", () => {
    expect(csvField("plain")).toBe("plain");
    expect(csvField("")).toBe("");
    expect(csvField("a,b")).toBe('"a,b"');
    expect(csvField('say "hi"')).toBe('"say ""hi"""');
    expect(csvField("two\nlines")).toBe('"two\nlines"');
    expect(csvField("cr\rhere")).toBe('"cr\rhere"');
    expect(csvField(" padded")).toBe('" padded"');
  });
});

describe("values", () => {
  it("writes metric values as numbers, NaN and infinities spelled out either way the API sends them", () => {
    expect(metricText(0.5)).toBe("0.5");
    expect(metricText(1e-7)).toBe("1e-7");
    expect(metricText(NaN)).toBe("NaN");
    expect(metricText(Infinity)).toBe("Infinity");
    expect(metricText(-Infinity)).toBe("-Infinity");
    expect(metricText("NaN")).toBe("NaN");
    expect(metricText("Infinity")).toBe("Infinity");
    expect(metricText("-Infinity")).toBe("-Infinity");
    expect(metricText(undefined)).toBe("");
  });

  it("writes params as text, JSON for lists and objects, empty when absent", () => {
    expect(paramText("adam")).toBe("adam");
    expect(paramText(32)).toBe("32");
    expect(paramText(true)).toBe("true");
    expect(paramText([1, 2])).toBe("[1,2]");
    expect(paramText({ a: "b" })).toBe('{"a":"b"}');
    expect(paramText(null)).toBe("");
    expect(paramText(undefined)).toBe("");
    expect(paramText("NaN")).toBe("NaN");
  });

  it("reads table column ids, quoted keys included", () => {
    expect(parseColumn("params.lr")).toEqual({ kind: "param", key: "lr" });
    expect(parseColumn('metrics."val.loss"')).toEqual({ kind: "metric", key: "val.loss", stat: "last" });
    expect(parseColumn("metrics.val/loss", "min")).toEqual({ kind: "metric", key: "val/loss", stat: "min" });
    expect(parseColumn("name")).toBeUndefined();
    expect(parseColumn("tags.x")).toBeUndefined();
  });
});

describe("runsToCsv", () => {
  it("writes the fixed columns, then the chosen params and metrics", () => {
    const text = runsToCsv([run()], [parseColumn("params.lr")!, parseColumn("params.optimizer")!, parseColumn("metrics.loss")!, parseColumn("params.missing")!]);
    expect(text.endsWith("\r\n")).toBe(true);
    const [head, row, ...rest] = parse(text);
    expect(rest).toEqual([]);
    expect(head).toEqual(["id", "name", "experiment", "status", "created", "started", "ended", "duration_s", "params.lr", "params.optimizer", "metrics.loss", "params.missing"]);
    expect(row).toEqual(["r1", "run-1", "digits", "finished", "2026-01-02T03:04:05Z", "2026-01-02T03:04:05Z", "2026-01-02T03:05:35.5Z", "90.5", "0.001", "adam", "0.25", ""]);
  });

  it("takes the min or max of a metric when the column says so, and lists a column once", () => {
    const cols = [parseColumn("metrics.loss", "min")!, parseColumn("metrics.loss", "max")!, parseColumn("metrics.loss", "min")!];
    const [head, row] = parse(runsToCsv([run()], cols));
    expect(head.slice(8)).toEqual(["metrics.loss (min)", "metrics.loss (max)"]);
    expect(row.slice(8)).toEqual(["0.2", "2"]);
  });

  it("escapes names with quotes, commas and newlines so a reader gets them back", () => {
    const name = 'my "best", run\nsecond line';
    const text = runsToCsv([run({ name, params: { note: "a,b" } })], [parseColumn("params.note")!]);
    expect(text).toContain('"my ""best"", run\nsecond line"');
    const rows = parse(text);
    expect(rows).toHaveLength(2);
    expect(rows[1][1]).toBe(name);
    expect(rows[1][8]).toBe("a,b");
  });

  it("writes NaN, \"NaN\" and infinite metrics, and blanks for what a run lacks", () => {
    const metric = (last: number | "NaN" | "Infinity" | "-Infinity") => ({ last, last_step: 1, last_time: "", min: last, min_step: 1, max: last, max_step: 1, count: 1 });
    const runs = [
      run({ id: "a", metrics: { m: metric(NaN) } }),
      run({ id: "b", metrics: { m: metric("NaN") } }),
      run({ id: "c", metrics: { m: metric(Infinity) } }),
      run({ id: "d", metrics: { m: metric("-Infinity") } }),
      run({ id: "e", metrics: null, params: null, started: undefined, ended: undefined, status: "queued" }),
    ];
    const rows = parse(runsToCsv(runs, [parseColumn("metrics.m")!, parseColumn("params.lr")!]));
    expect(rows.slice(1).map((r) => r[8])).toEqual(["NaN", "NaN", "Infinity", "-Infinity", ""]);
    expect(rows[5].slice(5, 10)).toEqual(["", "", "", "", ""]);
  });

  it("counts a running run's duration until now", () => {
    const r = run({ status: "running", ended: undefined });
    const now = Date.parse("2026-01-02T03:05:05Z");
    expect(parse(runsToCsv([r], [], now))[1][7]).toBe("60");
  });

  it("writes only the header for no runs", () => {
    expect(runsToCsv([], [])).toBe("id,name,experiment,status,created,started,ended,duration_s\r\n");
  });
});

describe("csvFileName", () => {
  it("names the file after the experiment, or all, with safe characters only", () => {
    expect(csvFileName("digits")).toBe("runs-digits.csv");
    expect(csvFileName(undefined)).toBe("runs-all.csv");
    expect(csvFileName("my exp/../x")).toBe("runs-my_exp_.._x.csv");
    expect(csvFileName("..")).toBe("runs-all.csv");
  });
});
