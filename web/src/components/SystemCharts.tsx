// Live system resources for the home page: starts from the samples the
// dashboard kept (GET /api/system/history, the last 5 minutes), then polls GET
// /api/system/status every 2 s, keeps a 5-minute window and draws small time
// charts (CPU, memory, free disk, GPUs when present) with the current figures.
import { useEffect, useMemo, useState } from "react";
import { get } from "../api/client";
import { fmtBytes, fmtDuration, fmtNum } from "../lib/format";
import { useApi } from "../lib/hooks";
import { Chart } from "./Chart";
import { ErrorNote } from "./ui";
import type { SystemHistory, SystemSample, SystemStatus } from "../api/types";

/** One kept sample: time in Unix seconds and the host's figures at it. */
export interface Sample {
  t: number;
  s: SystemSample;
}

/** How long samples are kept (seconds). */
export const WINDOW_S = 300;

/** Adds a sample (skipping one with the same time) and drops those older than the window. */
export function appendSample(list: Sample[], s: SystemSample, windowS = WINDOW_S): Sample[] {
  const parsed = Date.parse(s.time);
  const t = (Number.isNaN(parsed) ? Date.now() : parsed) / 1000;
  if (list.length > 0 && list[list.length - 1].t >= t) return list;
  const next = [...list, { t, s }];
  const from = t - windowS;
  let i = 0;
  while (i < next.length && next[i].t < from) i++;
  return i > 0 ? next.slice(i) : next;
}

const GIB = 1024 ** 3;
const SHORT: Record<string, string> = { experiments: "exp", checkpoints: "ckpt" };

/** One small chart with its headline figure. */
function Mini({ title, figure, sub, hint, x, series, testId, yRange }: { title: string; figure: string; sub?: string; hint?: string; x: number[]; series: { label: string; values: (number | null)[] }[]; testId: string; yRange?: [number, number] }) {
  return (
    <div className="sys-mini" data-testid={testId} title={hint}>
      <div className="sys-mini-head">
        <span className="sys-mini-title">{title}</span>
        <span className="sys-mini-figure num">{figure}</span>
      </div>
      {sub && <div className="muted small">{sub}</div>}
      <Chart x={x} series={series} xMode="time" height={110} title={undefined} yRange={yRange} testId={`${testId}-chart`} />
    </div>
  );
}

/** The system panel: figures and charts of the last five minutes. */
export function SystemCharts({ pollMs = 2000 }: { pollMs?: number }) {
  const status = useApi((sig) => get<SystemStatus>("/api/system/status", undefined, sig), [], pollMs);
  // The kept samples, once: the charts start full instead of from one point.
  const history = useApi((sig) => get<SystemHistory>("/api/system/history", { seconds: String(WINDOW_S) }, sig), []);
  // The polls so far; what is drawn (the kept samples, the polls and the
  // latest answer) is derived in the same render, so no frame shows the
  // latest answer before the kept samples are merged in.
  const [polled, setPolled] = useState<Sample[]>([]);
  useEffect(() => {
    if (status.data) setPolled((l) => appendSample(l, status.data as SystemStatus));
  }, [status.data]);
  const last = status.data;
  const samples = useMemo(() => {
    const all: SystemSample[] = [...(history.data?.samples ?? []), ...polled.map((p) => p.s), ...(last ? [last] : [])];
    return all.sort((a, b) => Date.parse(a.time) - Date.parse(b.time)).reduce<Sample[]>((acc, x) => appendSample(acc, x), []);
  }, [history.data, polled, last]);

  const x = useMemo(() => samples.map((p) => p.t), [samples]);
  const cpu = useMemo(() => [{ label: "CPU %", values: samples.map((p) => p.s.cpu.percent) }], [samples]);
  const mem = useMemo(() => [{ label: "used GiB", values: samples.map((p) => p.s.memory.used_bytes / GIB) }], [samples]);
  const diskNames = (last?.disks ?? []).map((d) => d.name);
  const disks = useMemo(
    () => diskNames.map((n) => ({ label: `${n} free GiB`, values: samples.map((p) => { const d = p.s.disks?.find((k) => k.name === n); return d && !d.error ? d.free_bytes / GIB : null; }) })),
    // eslint-disable-next-line react-hooks/exhaustive-deps
    [samples, diskNames.join(",")],
  );
  const gpuCount = last?.gpus?.length ?? 0;
  const gpuUtil = useMemo(
    () => Array.from({ length: gpuCount }, (_, i) => ({ label: `GPU ${i} %`, values: samples.map((p) => p.s.gpus?.[i]?.utilization_percent ?? null) })),
    [samples, gpuCount],
  );
  const gpuMem = useMemo(
    () => Array.from({ length: gpuCount }, (_, i) => ({ label: `GPU ${i} GiB`, values: samples.map((p) => { const g = p.s.gpus?.[i]; return g ? g.memory_used_bytes / GIB : null; }) })),
    [samples, gpuCount],
  );

  // Wait for the kept samples too (unless they cannot be had), so the charts
  // are drawn full at once rather than from the first poll's single point.
  if (!last || (history.loading && !history.data && !history.error)) return status.error ? <ErrorNote error={status.error} /> : <p className="muted">Loading system status…</p>;
  const memPct = last.memory.total_bytes > 0 ? (100 * last.memory.used_bytes) / last.memory.total_bytes : 0;

  return (
    <div className="stack system-charts">
      <div className="sys-figures" aria-label="system figures">
        <div className="stat">
          <span className="muted">CPU</span>
          <strong data-testid="fig-cpu">{fmtNum(Number(last.cpu.percent.toFixed(1)))}%</strong>
          <span className="muted small">{last.cpu.cores} cores</span>
        </div>
        <div className="stat">
          <span className="muted">Load</span>
          <strong data-testid="fig-load">{last.load ? `${last.load.load1.toFixed(2)} ${last.load.load5.toFixed(2)} ${last.load.load15.toFixed(2)}` : "–"}</strong>
          <span className="muted small">1, 5, 15 min</span>
        </div>
        <div className="stat">
          <span className="muted">Memory</span>
          <strong data-testid="fig-mem">{fmtBytes(last.memory.used_bytes)}</strong>
          <span className="muted small">
            of {fmtBytes(last.memory.total_bytes)} ({memPct.toFixed(0)}%)
          </span>
        </div>
        <div className="stat">
          <span className="muted">Dashboard uptime</span>
          <strong data-testid="fig-uptime">{fmtDuration(last.process?.uptime_seconds)}</strong>
          <span className="muted small">
            {last.process?.version ? `fw ${last.process.version}` : ""}
            {last.process?.rss_bytes ? ` · RSS ${fmtBytes(last.process.rss_bytes)}` : ""}
          </span>
        </div>
      </div>
      <div className="sys-grid">
        <Mini title="CPU" figure={`${last.cpu.percent.toFixed(0)}%`} x={x} series={cpu} testId="sys-cpu" yRange={[0, 100]} />
        <Mini title="Memory used" figure={fmtBytes(last.memory.used_bytes)} x={x} series={mem} testId="sys-mem" />
        {diskNames.length > 0 && (
          <Mini
            title="Disk free"
            figure={(last.disks ?? []).map((d) => `${SHORT[d.name] ?? d.name} ${d.error ? "?" : fmtBytes(d.free_bytes)}`).join(" · ")}
            hint={(last.disks ?? []).map((d) => `${d.name}: ${d.path}`).join("\n")}
            x={x}
            series={disks}
            testId="sys-disk"
          />
        )}
        {gpuCount > 0 && (
          <>
            <Mini title="GPU utilisation" figure={(last.gpus ?? []).map((g) => `${g.utilization_percent.toFixed(0)}%`).join(" · ")} sub={(last.gpus ?? []).map((g) => g.name).join(", ")} x={x} series={gpuUtil} testId="sys-gpu" yRange={[0, 100]} />
            <Mini
              title="GPU memory"
              figure={(last.gpus ?? []).map((g) => `${fmtBytes(g.memory_used_bytes)} / ${fmtBytes(g.memory_total_bytes)}`).join(" · ")}
              x={x}
              series={gpuMem}
              testId="sys-gpu-mem"
            />
          </>
        )}
      </div>
      {last.errors && last.errors.length > 0 && <p className="muted small">Not readable: {last.errors.join("; ")}</p>}
    </div>
  );
}
