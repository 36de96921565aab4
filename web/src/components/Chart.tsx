// A line chart on uPlot: several series on one x axis (step, or time as Unix
// seconds), optional log scale and smoothing, drag to zoom and double-click
// to reset (uPlot's own), a legend with the values under the cursor, and a
// width that follows its container.
import { useEffect, useMemo, useRef } from "react";
import uPlot from "uplot";
import "uplot/dist/uPlot.min.css";
import { colorFor, smooth, yAutoRange } from "../lib/series";
import { fmtNum } from "../lib/format";

/** One line. */
export interface ChartSeries {
  label: string;
  values: (number | null)[];
  color?: string;
}

/** Props of Chart. */
export interface ChartProps {
  title?: string;
  /** The shared x values, ascending. */
  x: number[];
  series: ChartSeries[];
  /** "step" (numbers) or "time" (Unix seconds: a date axis). */
  xMode?: "step" | "time";
  logY?: boolean;
  /** 0 (none) to 0.99: exponential smoothing; the raw line stays faint. */
  smoothing?: number;
  height?: number;
  /** A fixed y range (e.g. [0, 100] for percentages); auto-scaled when absent. */
  yRange?: [number, number];
  /** Test hook / accessible name. */
  testId?: string;
}

function cssVar(name: string, fallback: string): string {
  if (typeof getComputedStyle === "undefined") return fallback;
  const v = getComputedStyle(document.documentElement).getPropertyValue(name).trim();
  return v || fallback;
}

/** A uPlot line chart (see ChartProps). */
export function Chart({ title, x, series, xMode = "step", logY = false, smoothing = 0, height = 220, yRange, testId }: ChartProps) {
  const box = useRef<HTMLDivElement>(null);
  const plot = useRef<uPlot | null>(null);

  // Log scales cannot show values <= 0: those points are left out.
  const data = useMemo(() => {
    const cols: (number | null)[][] = [];
    for (const s of series) {
      let v = s.values;
      if (logY) v = v.map((y) => (y !== null && y > 0 ? y : null));
      if (smoothing > 0) {
        cols.push(smooth(v, smoothing));
        cols.push(v);
      } else cols.push(v);
    }
    return [x, ...cols] as uPlot.AlignedData;
  }, [x, series, logY, smoothing]);

  const shape = `${series.map((s) => s.label).join("\u0000")}|${xMode}|${logY}|${smoothing > 0}|${height}|${yRange?.join(",") ?? ""}`;

  useEffect(() => {
    const el = box.current;
    if (!el) return;
    const fg = cssVar("--fg-muted", "#666");
    const grid = cssVar("--grid", "rgba(128,128,128,0.15)");
    const uSeries: uPlot.Series[] = [{ label: xMode === "time" ? "time" : "step" }];
    series.forEach((s, i) => {
      const stroke = s.color ?? colorFor(i);
      if (smoothing > 0) {
        uSeries.push({ label: s.label, stroke, width: 1.5, spanGaps: true, value: (_u, v) => fmtNum(v) });
        uSeries.push({ label: `${s.label} (raw)`, stroke: stroke + "40", width: 1, spanGaps: true, value: (_u, v) => fmtNum(v) });
      } else {
        uSeries.push({ label: s.label, stroke, width: 1.5, spanGaps: true, value: (_u, v) => fmtNum(v) });
      }
    });
    const axis = { stroke: fg, grid: { stroke: grid, width: 1 }, ticks: { stroke: grid, width: 1 } };
    const opts: uPlot.Options = {
      width: Math.max(200, el.clientWidth || 400),
      height,
      title,
      scales: {
        // One point (a run's first step, the first system sample) would
        // give uPlot a zero-width range it widens by years: pad it instead.
        x: {
          time: xMode === "time",
          range: (_u, min, max): uPlot.Range.MinMax => {
            if (min == null || max == null) return [0, 1];
            if (min === max) return xMode === "time" ? [min - 60, max + 5] : [min - 1, max + 1];
            return [min, max];
          },
        },
        // Auto-scaled y: padded by hand (yAutoRange), so one point has an
        // axis and an accuracy in [0, 1] is not drawn up to 1.5.
        y: logY
          ? { distr: 3 }
          : yRange
            ? { auto: false, range: [yRange[0], yRange[1]] }
            : { range: (_u, min, max): uPlot.Range.MinMax => yAutoRange(min, max) },
      },
      axes: [axis, { ...axis, size: 60, values: (_u, ticks) => ticks.map((t) => fmtNum(t)) }],
      series: uSeries,
      cursor: { drag: { x: true, y: false, setScale: true } },
      legend: { live: true },
    };
    const u = new uPlot(opts, data, el);
    plot.current = u;
    const ro = new ResizeObserver(() => {
      const w = el.clientWidth;
      if (w > 0 && Math.abs(w - u.width) > 2) u.setSize({ width: w, height });
    });
    ro.observe(el);
    return () => {
      ro.disconnect();
      u.destroy();
      plot.current = null;
    };
    // Rebuilt only when the shape changes; data updates go through setData.
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, [shape]);

  useEffect(() => {
    const u = plot.current;
    if (!u) return;
    // Keep a zoom the user made; follow new data otherwise.
    const xs = u.scales.x;
    const zoomed = xs.min != null && x.length > 0 && u.data[0].length > 0 && (xs.min > x[0] || (xs.max ?? Infinity) < u.data[0][u.data[0].length - 1]);
    u.setData(data, !zoomed);
  }, [data, x]);

  return <div className="chart" ref={box} data-testid={testId} data-points={x.length} role="img" aria-label={title ?? "chart"} />;
}
