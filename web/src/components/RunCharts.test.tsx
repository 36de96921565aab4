// A run with 1,500 metric keys: its charts page in, CHART_PAGE at a time,
// fetching only the shown keys' histories; the filter searches every key;
// a key first seen on the live stream gets a chart.
import { afterEach, describe, expect, it, vi } from "vitest";
import { act, cleanup, fireEvent, render, screen, waitFor } from "@testing-library/react";
import { CHART_PAGE, RunCharts, type LiveEvent } from "./RunCharts";
import { json, testRun } from "../test-utils";

// uPlot needs a canvas; jsdom has none, so the chart is replaced.
vi.mock("./Chart", () => ({ Chart: ({ title, x }: { title: string; x: number[] }) => <div data-testid={`plot-${title}`} data-points={x.length} /> }));

afterEach(() => {
  cleanup();
  vi.unstubAllGlobals();
});

const KEYS = Array.from({ length: 1500 }, (_, i) => `layer${String(i).padStart(4, "0")}/grad_norm`);
const settings = { xMode: "step" as const, log: false, smooth: 0 };

function bigRun() {
  return { ...testRun(1), status: "running", metrics: Object.fromEntries(KEYS.map((k) => [k, { last: 1, last_step: 2, min: 0, max: 1, count: 3 }])) };
}

/** A fetch answering /metrics with 3 points for each asked key, recording the keys asked. */
function serve() {
  const asked: string[][] = [];
  const fetch = vi.fn(async (url: string | URL | Request) => {
    const u = new URL(String(url), "http://x");
    const keys = (u.searchParams.get("keys") ?? "").split(",").filter(Boolean);
    asked.push(keys);
    return json({ run_id: "r1", series: keys.map((k) => ({ key: k, downsampled: false, buckets: [0, 1, 2].map((s) => ({ step: s, value: s, min: s, max: s, count: 1 })) })) });
  });
  vi.stubGlobal("fetch", fetch);
  return asked;
}

describe("RunCharts with 1,500 metric keys", () => {
  it("draws a page of charts and fetches only their keys, then the next page", async () => {
    const asked = serve();
    render(<RunCharts run={bigRun() as never} settings={settings as never} />);
    await waitFor(() => expect(screen.getAllByTestId(/^plot-/)).toHaveLength(CHART_PAGE));
    expect(asked).toHaveLength(1);
    expect(asked[0]).toEqual(KEYS.slice(0, CHART_PAGE));
    expect(screen.getByText(`${CHART_PAGE} of 1,500 charts`)).toBeTruthy();
    fireEvent.click(screen.getByRole("button", { name: `Show ${CHART_PAGE} more` }));
    await waitFor(() => expect(screen.getAllByTestId(/^plot-/)).toHaveLength(2 * CHART_PAGE));
    expect(asked).toHaveLength(2);
    expect(asked[1]).toEqual(KEYS.slice(CHART_PAGE, 2 * CHART_PAGE)); // the first page is not fetched again
  });

  it("filters over every key, not only the shown ones", async () => {
    const asked = serve();
    render(<RunCharts run={bigRun() as never} settings={settings as never} />);
    await waitFor(() => expect(screen.getAllByTestId(/^plot-/)).toHaveLength(CHART_PAGE));
    fireEvent.change(screen.getByLabelText("Filter charts by key"), { target: { value: "layer1499" } });
    await waitFor(() => expect(screen.getAllByTestId(/^plot-/)).toHaveLength(1));
    expect(screen.getByTestId("plot-layer1499/grad_norm")).toBeTruthy();
    expect(asked[asked.length - 1]).toEqual(["layer1499/grad_norm"]);
  });

  it("charts a key first seen on the live stream, with its stored history", async () => {
    const asked = serve();
    const r = testRun(1);
    let send: (e: LiveEvent) => void = () => {};
    const subscribe = (fn: (e: LiveEvent) => void) => {
      send = fn;
      return () => {};
    };
    render(<RunCharts run={r as never} settings={settings as never} subscribe={subscribe} />);
    await waitFor(() => expect(screen.getAllByTestId(/^plot-/)).toHaveLength(1));
    act(() => send({ type: "metric", run_id: "r1", time: "2026-11-22T07:00:00Z", data: { step: 3, values: { "val/accuracy": 0.5 } } } as never));
    await waitFor(() => expect(screen.getByTestId("plot-val/accuracy")).toBeTruthy());
    expect(asked[asked.length - 1]).toEqual(["val/accuracy"]);
  });
});
