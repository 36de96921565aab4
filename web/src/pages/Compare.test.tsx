// The compare view highlights the params that differ (and can show only
// those), and the params plot draws one line per run.
import { afterEach, describe, expect, it, vi } from "vitest";
import { cleanup, fireEvent, render, screen, within } from "@testing-library/react";
import { MemoryRouter } from "react-router-dom";
import { ComparePage } from "./Compare";
import { ParamsPlot, makeAxis } from "../components/ParamsPlot";

// uPlot needs a canvas, which jsdom lacks; the charts are not what is tested here.
vi.mock("../components/Chart", () => ({ Chart: ({ title }: { title?: string }) => <div data-testid="chart">{title}</div> }));

const summary = (last: number) => ({ last, last_step: 3, min: last, max: last + 1, count: 3 });
const comparison = {
  runs: [
    { id: "a", name: "run a", experiment: "digits", status: "finished" },
    { id: "b", name: "run b", experiment: "digits", status: "finished" },
  ],
  align: "step",
  keys: ["val/loss"],
  metrics: { "val/loss": { x: [1, 2, 3], values: { a: [3, 2, 1], b: [3, 2.5, "NaN"] } } },
  params: {
    lr: { values: { a: 0.001, b: 0.01 }, differs: true },
    epochs: { values: { a: 3, b: 3 }, differs: false },
    hidden: { values: { a: 128 }, differs: true },
  },
  summaries: { a: { "val/loss": summary(1) }, b: { "val/loss": summary(2) } },
};

afterEach(() => {
  cleanup();
  vi.unstubAllGlobals();
});

describe("ComparePage", () => {
  it("highlights differing params and hides equal ones on request", async () => {
    const urls: string[] = [];
    vi.stubGlobal(
      "fetch",
      vi.fn(async (url: string) => {
        urls.push(String(url));
        return new Response(JSON.stringify(comparison), { status: 200 });
      }),
    );
    render(
      <MemoryRouter initialEntries={["/compare?runs=a,b"]}>
        <ComparePage />
      </MemoryRouter>,
    );
    const lr = await screen.findByRole("rowheader", { name: "lr" });
    expect(urls[0]).toContain("/api/compare?runs=a%2Cb");
    expect(urls[0]).toContain("align=step");
    expect(lr.closest("tr")?.className).toContain("diff");
    expect(screen.getByRole("rowheader", { name: "epochs" }).closest("tr")?.className ?? "").not.toContain("diff");
    const hidden = screen.getByRole("rowheader", { name: "hidden" }).closest("tr")!;
    expect(hidden.className).toContain("diff");
    expect(within(hidden).getByText("absent")).toBeTruthy();
    expect(screen.getByText("Params (2 of 3 differ)")).toBeTruthy();

    fireEvent.click(screen.getByRole("checkbox", { name: "Only differences" }));
    expect(screen.queryByRole("rowheader", { name: "epochs" })).toBeNull();
    expect(screen.getByRole("rowheader", { name: "lr" })).toBeTruthy();

    // The parallel coordinates: one line per run.
    const plot = screen.getByTestId("params-plot");
    expect(plot.querySelectorAll("polyline").length).toBe(2);
  });
});

describe("ParamsPlot", () => {
  const runs = [
    { id: "a", label: "a" },
    { id: "b", label: "b" },
    { id: "c", label: "c" },
  ];
  const params = { lr: { a: 0.1, b: 0.01, c: 0.001 }, opt: { a: "adam", b: "sgd", c: "adam" } };
  const metric = { a: 0.9, b: 0.8, c: null };

  it("draws an axis per param plus the metric and a polyline per run", () => {
    render(<ParamsPlot runs={runs} params={params} metric={metric} metricLabel="acc" mode="parallel" />);
    const svg = screen.getByRole("img", { name: /Parallel coordinates of 2 params and acc/ });
    expect(svg.querySelectorAll("line.axis").length).toBe(3);
    const lines = svg.querySelectorAll("polyline");
    expect(lines.length).toBe(3);
    // Run c has no metric value: its line stops at the last param axis.
    expect(lines[2].getAttribute("points")!.split(" ").length).toBe(2);
  });

  it("draws a dot per run that has both values in scatter mode", () => {
    render(<ParamsPlot runs={runs} params={params} metric={metric} metricLabel="acc" mode="scatter" xParam="lr" />);
    expect(screen.getByRole("img", { name: "Scatter of lr against acc" }).querySelectorAll("circle").length).toBe(2);
  });

  it("maps numbers linearly and text to categories", () => {
    const n = makeAxis("lr", [1, 3, undefined]);
    expect(n.kind).toBe("number");
    expect(n.pos(2)).toBe(0.5);
    expect(n.pos(undefined)).toBeNull();
    const c = makeAxis("opt", ["sgd", "adam"]);
    expect(c.kind).toBe("category");
    expect(c.pos("adam")).toBe(0);
    expect(c.pos("sgd")).toBe(1);
  });
});
