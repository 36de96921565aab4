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

describe("ComparePage with many metric keys", () => {
  it("fetches and draws a page of keys at a time, more on request and by filter", async () => {
    const all = Array.from({ length: 1500 }, (_, i) => `layer${String(i).padStart(4, "0")}/loss`);
    const answer = (keys: string[]) => ({
      ...comparison,
      keys,
      metric_keys: all,
      metrics: Object.fromEntries(keys.map((k) => [k, { x: [1], values: { a: [1], b: [2] } }])),
      summaries: { a: Object.fromEntries(keys.map((k) => [k, summary(1)])), b: Object.fromEntries(keys.map((k) => [k, summary(2)])) },
    });
    const urls: URL[] = [];
    vi.stubGlobal(
      "fetch",
      vi.fn(async (url: string) => {
        const u = new URL(String(url), "http://x");
        urls.push(u);
        const asked = u.searchParams.get("keys");
        const keys = asked ? asked.split(",") : all.slice(0, Number(u.searchParams.get("key_limit")));
        return new Response(JSON.stringify(answer(keys)), { status: 200 });
      }),
    );
    render(
      <MemoryRouter initialEntries={["/compare?runs=a,b"]}>
        <ComparePage />
      </MemoryRouter>,
    );
    expect(await screen.findByTestId("compare-chart-layer0000/loss")).toBeTruthy();
    expect(urls[0].searchParams.get("key_limit")).toBe("24");
    expect(screen.getAllByTestId(/^compare-chart-/).length).toBe(24);
    expect(screen.getByTestId("compare-more").textContent).toContain("24 of 1,500 charts");
    // The summaries table has a column per shown key, not 1,500.
    const table = document.querySelector("table.compare-summaries")!;
    expect(table.querySelectorAll("thead th").length).toBe(25);

    fireEvent.click(screen.getByRole("button", { name: "Show 24 more" }));
    expect(await screen.findByTestId("compare-chart-layer0047/loss")).toBeTruthy();
    const second = urls.find((u) => u.searchParams.get("keys"))!;
    expect(second.searchParams.get("keys")!.split(",")).toEqual(all.slice(24, 48));
    expect(screen.getAllByTestId(/^compare-chart-/).length).toBe(48);

    // A filter shows the matching keys, fetching only those not fetched yet.
    fireEvent.change(screen.getByRole("searchbox", { name: "Filter charts by key" }), { target: { value: "layer149" } });
    expect(await screen.findByTestId("compare-chart-layer1499/loss")).toBeTruthy();
    expect(screen.getAllByTestId(/^compare-chart-/).length).toBe(10);
    const third = urls.filter((u) => u.searchParams.get("keys"))[1];
    expect(third.searchParams.get("keys")!.split(",")).toEqual(all.slice(1490, 1500));
    expect(urls.length).toBe(3);
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
