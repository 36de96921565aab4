// LiveRun's helpers: progress fraction (steps, else epochs) and the ETA.
import { describe, expect, it } from "vitest";
import { etaSeconds, progressFraction } from "./LiveRun";

describe("progressFraction", () => {
  it("uses steps, else epochs, else nothing", () => {
    expect(progressFraction({ step: 25, total_steps: 100, epoch: 1, total_epochs: 4 })).toEqual({ value: 25, total: 100, frac: 0.25 });
    expect(progressFraction({ step: 0, total_steps: 0, epoch: 3, total_epochs: 4 })).toEqual({ value: 3, total: 4, frac: 0.75 });
    expect(progressFraction({ step: 10, total_steps: 0, epoch: 0, total_epochs: 0 })).toBeNull();
    expect(progressFraction(undefined)).toBeNull();
    expect(progressFraction({ step: 120, total_steps: 100 })?.frac).toBe(1);
  });
});

describe("etaSeconds", () => {
  it("is elapsed * (1 - frac) / frac", () => {
    expect(etaSeconds(30, 0.25)).toBe(90);
    expect(etaSeconds(10, 0.5)).toBe(10);
    expect(etaSeconds(10, 1)).toBe(0);
    expect(etaSeconds(10, 0)).toBeNull();
    expect(etaSeconds(0, 0.5)).toBeNull();
    expect(etaSeconds(NaN, 0.5)).toBeNull();
  });
});
