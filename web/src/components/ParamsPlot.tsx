// Params against a metric for several runs, in SVG: parallel coordinates
// (one vertical axis per param plus the metric, one polyline per run in its
// colour) or a scatter of one param against the metric. Numeric params get
// a linear axis; text and boolean params a categorical one.
import { fmtNum, fmtParam } from "../lib/format";
import { colorFor } from "../lib/series";

/** A run on the plot. */
export interface PlotRun {
  id: string;
  label: string;
}

/** Props of ParamsPlot. */
export interface ParamsPlotProps {
  runs: PlotRun[];
  /** Per param: run ID -> value (a run lacking it is absent). */
  params: Record<string, Record<string, unknown>>;
  /** Per run: the chosen metric's value. */
  metric: Record<string, number | null | undefined>;
  metricLabel: string;
  mode: "parallel" | "scatter";
  /** The param on the scatter's x axis. */
  xParam?: string;
}

/** One axis: maps a value to 0..1 (bottom to top), or null when the run lacks it. */
export interface Axis {
  name: string;
  kind: "number" | "category";
  pos: (v: unknown) => number | null;
  ticks: { at: number; label: string }[];
}

/** Builds an axis over the values the runs have. */
export function makeAxis(name: string, values: unknown[]): Axis {
  const present = values.filter((v) => v !== undefined && v !== null);
  const nums = present.filter((v): v is number => typeof v === "number" && Number.isFinite(v));
  if (present.length > 0 && nums.length === present.length) {
    let lo = Math.min(...nums);
    let hi = Math.max(...nums);
    if (lo === hi) {
      lo -= 1;
      hi += 1;
    }
    const ticks = [0, 0.5, 1].map((f) => ({ at: f, label: fmtNum(lo + f * (hi - lo)) }));
    return {
      name,
      kind: "number",
      pos: (v) => (typeof v === "number" && Number.isFinite(v) ? (v - lo) / (hi - lo) : null),
      ticks: nums.length === 1 ? [{ at: 0.5, label: fmtNum(nums[0]) }] : ticks,
    };
  }
  const cats = [...new Set(present.map((v) => fmtParam(v)))].sort();
  const at = (i: number) => (cats.length === 1 ? 0.5 : i / (cats.length - 1));
  return {
    name,
    kind: "category",
    pos: (v) => {
      if (v === undefined || v === null) return null;
      const i = cats.indexOf(fmtParam(v));
      return i < 0 ? null : at(i);
    },
    ticks: cats.map((c, i) => ({ at: at(i), label: c })),
  };
}

const W = 960;
const H = 340;
const PAD = { top: 36, bottom: 28, left: 60, right: 60 };

/** Parallel coordinates or a scatter (see ParamsPlotProps). */
export function ParamsPlot({ runs, params, metric, metricLabel, mode, xParam }: ParamsPlotProps) {
  const names = Object.keys(params).sort();
  if (runs.length === 0) return null;
  const metricAxis = makeAxis(metricLabel, runs.map((r) => metric[r.id]));
  const y = (f: number) => PAD.top + (1 - f) * (H - PAD.top - PAD.bottom);

  if (mode === "scatter") {
    const xname = xParam && params[xParam] ? xParam : names[0];
    if (!xname) return <p className="muted">No params to plot.</p>;
    const xAxis = makeAxis(xname, runs.map((r) => params[xname][r.id]));
    const x = (f: number) => PAD.left + f * (W - PAD.left - PAD.right);
    return (
      <svg className="params-plot" viewBox={`0 0 ${W} ${H}`} role="img" aria-label={`Scatter of ${xname} against ${metricLabel}`} data-testid="params-plot">
        <line className="axis" x1={PAD.left} y1={y(0)} x2={W - PAD.right} y2={y(0)} />
        <line className="axis" x1={PAD.left} y1={y(0)} x2={PAD.left} y2={y(1)} />
        {xAxis.ticks.map((t) => (
          <text key={`x${t.label}`} className="tick" x={x(t.at)} y={y(0) + 16} textAnchor="middle">
            {t.label}
          </text>
        ))}
        {metricAxis.ticks.map((t) => (
          <text key={`y${t.label}`} className="tick" x={PAD.left - 6} y={y(t.at) + 4} textAnchor="end">
            {t.label}
          </text>
        ))}
        <text className="axis-label" x={W / 2} y={H - 2} textAnchor="middle">
          {xname}
        </text>
        <text className="axis-label" x={PAD.left} y={PAD.top - 14} textAnchor="middle">
          {metricLabel}
        </text>
        {runs.map((r, i) => {
          const px = xAxis.pos(params[xname][r.id]);
          const py = metricAxis.pos(metric[r.id]);
          if (px === null || py === null) return null;
          return (
            <circle key={r.id} className="dot" cx={x(px)} cy={y(py)} r={6} fill={colorFor(i)} data-run={r.id}>
              <title>{`${r.label}: ${xname} = ${fmtParam(params[xname][r.id])}, ${metricLabel} = ${fmtNum(metric[r.id] ?? null)}`}</title>
            </circle>
          );
        })}
      </svg>
    );
  }

  const axes = [...names.map((n) => makeAxis(n, runs.map((r) => params[n][r.id]))), metricAxis];
  const step = axes.length > 1 ? (W - PAD.left - PAD.right) / (axes.length - 1) : 0;
  const ax = (i: number) => (axes.length > 1 ? PAD.left + i * step : W / 2);
  return (
    <svg className="params-plot" viewBox={`0 0 ${W} ${H}`} role="img" aria-label={`Parallel coordinates of ${names.length} params and ${metricLabel}`} data-testid="params-plot">
      {axes.map((a, i) => (
        <g key={a.name} className={i === axes.length - 1 ? "metric-axis" : undefined}>
          <line className="axis" x1={ax(i)} y1={y(0)} x2={ax(i)} y2={y(1)} />
          <text className="axis-label" x={ax(i)} y={PAD.top - 16} textAnchor="middle">
            {a.name.length > 18 ? a.name.slice(0, 17) + "…" : a.name}
            <title>{a.name}</title>
          </text>
          {a.ticks.map((t) => (
            <text key={t.label + t.at} className="tick" x={ax(i) + 5} y={y(t.at) + 4}>
              {t.label.length > 12 ? t.label.slice(0, 11) + "…" : t.label}
            </text>
          ))}
        </g>
      ))}
      {runs.map((r, ri) => {
        const pts: string[] = [];
        axes.forEach((a, i) => {
          const v = i === axes.length - 1 ? metric[r.id] : params[a.name][r.id];
          const p = a.pos(v);
          if (p !== null) pts.push(`${ax(i).toFixed(1)},${y(p).toFixed(1)}`);
        });
        return (
          <polyline key={r.id} className="run-line" points={pts.join(" ")} stroke={colorFor(ri)} data-run={r.id}>
            <title>{r.label}</title>
          </polyline>
        );
      })}
    </svg>
  );
}
