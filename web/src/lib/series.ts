// Series helpers for the charts: smoothing, merging streamed points into a
// series, and a stable colour per series.

/**
 * Exponential moving average with TensorBoard's debiasing, skipping nulls
 * and non-finite values (they stay as they are). weight 0 = no smoothing.
 */
export function smooth(values: (number | null)[], weight: number): (number | null)[] {
  if (weight <= 0) return values;
  const w = Math.min(weight, 0.999);
  let last = 0;
  let n = 0;
  return values.map((v) => {
    if (v === null || !Number.isFinite(v)) return v;
    last = last * w + (1 - w) * v;
    n++;
    const debias = 1 - Math.pow(w, n);
    return last / debias;
  });
}

/** A series as parallel arrays of x and y, sorted by x. */
export interface XY {
  x: number[];
  y: (number | null)[];
}

/**
 * Adds or replaces the point at x (a later write at the same step replaces
 * the earlier one, as the store does), keeping x sorted. Appending at the end
 * is O(1), the common case for live training.
 */
export function upsertPoint(s: XY, x: number, y: number | null): void {
  const n = s.x.length;
  if (n === 0 || x > s.x[n - 1]) {
    s.x.push(x);
    s.y.push(y);
    return;
  }
  let lo = 0;
  let hi = n;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (s.x[mid] < x) lo = mid + 1;
    else hi = mid;
  }
  if (s.x[lo] === x) s.y[lo] = y;
  else {
    s.x.splice(lo, 0, x);
    s.y.splice(lo, 0, y);
  }
}

/**
 * Puts several series on one x grid (the union of their x values), with null
 * where a series has no point: what uPlot wants for overlaid lines.
 */
export function alignSeries(series: XY[]): { x: number[]; ys: (number | null)[][] } {
  const xs = new Set<number>();
  for (const s of series) for (const x of s.x) xs.add(x);
  const x = [...xs].sort((a, b) => a - b);
  const index = new Map(x.map((v, i) => [v, i]));
  const ys = series.map((s) => {
    const out: (number | null)[] = new Array(x.length).fill(null);
    s.x.forEach((v, i) => {
      out[index.get(v)!] = s.y[i];
    });
    return out;
  });
  return { x, ys };
}

const PALETTE = ["#2563eb", "#dc2626", "#16a34a", "#d97706", "#9333ea", "#0891b2", "#db2777", "#65a30d", "#7c3aed", "#ea580c"];

/** A colour for the i-th series (cycles through a palette readable in light and dark). */
export function colorFor(i: number): string {
  return PALETTE[((i % PALETTE.length) + PALETTE.length) % PALETTE.length];
}

/**
 * The y range a chart auto-scales to for data between min and max (null
 * when it has none): 5 % of the span above and below, a lone value (a run's
 * first point) padded by a tenth of itself instead of uPlot's nice-number
 * widening, and never past 0 or 1 when every value lies in [0, 1] (an
 * accuracy of 0.95 is not drawn up to 1.5) nor below 0 when none is
 * negative.
 */
export function yAutoRange(min: number | null, max: number | null): [number, number] {
  if (min === null || max === null || !Number.isFinite(min) || !Number.isFinite(max)) return [0, 1];
  const span = max - min;
  const pad = span > 0 ? span * 0.05 : Math.abs(min) * 0.1 || 1;
  let lo = min - pad;
  let hi = max + pad;
  if (min >= 0 && lo < 0) lo = 0;
  if (min >= 0 && max <= 1 && hi > 1) hi = 1;
  if (hi <= lo) hi = lo + 1;
  return [lo, hi];
}
