import { describe, expect, it } from "vitest";
import { alignSeries, smooth, upsertPoint, type XY } from "./series";

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
