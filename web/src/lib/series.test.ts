import { describe, expect, it } from "vitest";
import { alignSeries, smooth, upsertPoint, yAutoRange, type XY } from "./series";

describe("smooth", () => {
  it("is the identity at weight 0", () => {
    const v = [1, 2, null, 4];
    expect(smooth(v, 0)).toBe(v);
  });
  it("debiases the first value and keeps nulls and NaN", () => {
    const out = smooth([10, null, 10, NaN, 10], 0.9);
    expect(out[0]).toBeCloseTo(10);
    expect(out[1]).toBeNull();
    expect(out[2]).toBeCloseTo(10);
    expect(Number.isNaN(out[3] as number)).toBe(true);
    expect(out[4]).toBeCloseTo(10);
  });
  it("lags behind a step change", () => {
    const out = smooth([0, 0, 0, 1], 0.5) as number[];
    expect(out[3]).toBeGreaterThan(0);
    expect(out[3]).toBeLessThan(1);
  });
});

describe("upsertPoint", () => {
  it("appends, inserts in order and replaces an existing step", () => {
    const s: XY = { x: [], y: [] };
    upsertPoint(s, 1, 0.5);
    upsertPoint(s, 3, 0.3);
    upsertPoint(s, 2, 0.4);
    upsertPoint(s, 3, 0.25);
    expect(s.x).toEqual([1, 2, 3]);
    expect(s.y).toEqual([0.5, 0.4, 0.25]);
  });
});

describe("alignSeries", () => {
  it("puts series on the union of their x values with nulls", () => {
    const { x, ys } = alignSeries([
      { x: [1, 2], y: [10, 20] },
      { x: [2, 3], y: [200, 300] },
    ]);
    expect(x).toEqual([1, 2, 3]);
    expect(ys).toEqual([
      [10, 20, null],
      [null, 200, 300],
    ]);
  });
});

describe("yAutoRange", () => {
  it("keeps values of the unit interval in it", () => {
    expect(yAutoRange(0.2, 1)).toEqual([expect.closeTo(0.16), 1]);
    const [lo, hi] = yAutoRange(0.95, 0.95);
    expect(lo).toBeCloseTo(0.855);
    expect(hi).toBe(1);
  });
  it("pads a span by 5 % and a lone value by a tenth of itself", () => {
    expect(yAutoRange(-10, 10)).toEqual([-11, 11]);
    expect(yAutoRange(2.3, 2.3)).toEqual([expect.closeTo(2.07), expect.closeTo(2.53)]);
    expect(yAutoRange(-5, -5)).toEqual([-5.5, -4.5]);
  });
  it("does not go below 0 for non-negative values, and has a range for 0 alone and no data", () => {
    expect(yAutoRange(0.5, 30)[0]).toBe(0);
    expect(yAutoRange(0, 0)).toEqual([0, 1]);
    expect(yAutoRange(null, null)).toEqual([0, 1]);
  });
});
