// LogTail: the REST tail, appended lines, stderr marking, the bound.
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { cleanup, render, screen, waitFor } from "@testing-library/react";
import { LogTail, MAX_LINES, appendBounded, linesOfEvent, type TailLine } from "./LogTail";

const restLines = [
  { id: 1, stream: "stdout", time: "2026-11-22T06:00:00Z", line: "epoch 1/5" },
  { id: 2, stream: "stderr", time: "2026-11-22T06:00:01Z", line: "warning: slow" },
];

beforeEach(() => {
  vi.stubGlobal(
    "fetch",
    vi.fn(async (url: string) => {
      expect(String(url)).toBe("/api/runs/r1/logs?tail=500");
      return new Response(JSON.stringify({ run_id: "r1", lines: restLines }), { status: 200 });
    }),
  );
});
afterEach(() => {
  cleanup();
  vi.unstubAllGlobals();
});

describe("LogTail", () => {
  it("renders the REST tail, marks stderr, and appends fed lines", async () => {
    const { rerender } = render(<LogTail runId="r1" lines={[]} />);
    await screen.findByText("epoch 1/5");
    expect(screen.getByText("warning: slow").className).toContain("stderr");
    expect(screen.getByText("epoch 1/5").className).not.toContain("stderr");
    const fed: TailLine[] = [{ stream: "stdout", line: "epoch 2/5" }];
    rerender(<LogTail runId="r1" lines={fed} />);
    expect(screen.getByText("epoch 2/5")).toBeTruthy();
    const text = screen.getByTestId("log-tail").textContent ?? "";
    expect(text.indexOf("epoch 1/5")).toBeLessThan(text.indexOf("epoch 2/5"));
    expect(screen.getByLabelText("Follow")).toHaveProperty("checked", true);
  });

  it("keeps only the last MAX_LINES lines", async () => {
    const fed: TailLine[] = Array.from({ length: MAX_LINES + 500 }, (_, i) => ({ stream: "stdout", line: `line ${i}` }));
    render(<LogTail runId="r1" lines={fed} />);
    await waitFor(() => expect(screen.getByTestId("log-tail").querySelectorAll(".log-line").length).toBe(MAX_LINES));
    expect(screen.queryByText("epoch 1/5")).toBeNull();
    expect(screen.queryByText("line 499")).toBeNull();
    expect(screen.getByText(`line ${MAX_LINES + 499}`)).toBeTruthy();
  });
});

describe("appendBounded and linesOfEvent", () => {
  it("bounds and converts", () => {
    expect(appendBounded([1, 2, 3], [4, 5], 4)).toEqual([2, 3, 4, 5]);
    const prev = [1];
    expect(appendBounded(prev, [])).toBe(prev);
    const lines = linesOfEvent({ type: "log", cursor: 1, run_id: "r1", seq: 1, time: "t", data: { stream: "stderr", lines: ["a", "b"] } });
    expect(lines).toEqual([
      { stream: "stderr", line: "a", time: "t" },
      { stream: "stderr", line: "b", time: "t" },
    ]);
    expect(linesOfEvent({ type: "metric", cursor: 2, run_id: "r1", seq: 2, time: "t", data: {} })).toEqual([]);
  });
});
