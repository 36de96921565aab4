// The runs table renders the rows of a mocked API, sends the sort of a
// clicked column header to the API, and shows a filter error inline.
import { afterEach, describe, expect, it, vi } from "vitest";
import { json, testRun, withFakeLayout } from "../test-utils";
import { cleanup, fireEvent, render, screen, waitFor } from "@testing-library/react";
import { MemoryRouter } from "react-router-dom";
import { CHOOSER_MAX, ColumnChooser, RunsTable, fieldFor } from "./RunsTable";
import { combinedFilter } from "./FilterBar";

const run = (i: number) => testRun(i);

let urls: string[] = [];

/** fetch answering the runs listing; a filter containing "bad" is refused like the API does. */
function mockFetch() {
  urls = [];
  vi.stubGlobal(
    "fetch",
    vi.fn(async (url: string) => {
      const u = new URL(String(url), "http://x");
      urls.push(String(url));
      if (u.pathname === "/api/experiments/e1/runs") {
        if ((u.searchParams.get("filter") ?? "").includes("bad")) {
          return json({ error: { code: "invalid_argument", message: "filter: unknown field bad at column 1" } }, 400);
        }
        return json({ runs: [run(1), run(2), run(3)] });
      }
      return json({ error: { code: "not_found", message: "no route" } }, 404);
    }),
  );
}

withFakeLayout();
afterEach(() => {
  cleanup();
  vi.unstubAllGlobals();
});

const show = (url = "/experiments/e1") =>
  render(
    <MemoryRouter initialEntries={[url]}>
      <RunsTable experiment="e1" />
    </MemoryRouter>,
  );

describe("RunsTable", () => {
  it("renders the runs of the API with their param and metric columns", async () => {
    mockFetch();
    show();
    expect(await screen.findByRole("link", { name: "run-2" })).toBeTruthy();
    expect(screen.getByRole("link", { name: "run-1" }).getAttribute("href")).toBe("/runs/r1");
    expect(screen.getByRole("button", { name: "Sort by metric loss" })).toBeTruthy();
    expect(screen.getByRole("button", { name: "Sort by param lr" })).toBeTruthy();
    expect(screen.getByText("0.5")).toBeTruthy(); // loss of run-2
    expect(urls[0]).toContain("sort=created");
    expect(urls[0]).toContain("desc=true");
  });

  it("asks the API for the clicked column's sort, then flips the direction", async () => {
    mockFetch();
    show();
    await screen.findByRole("link", { name: "run-1" });
    fireEvent.click(screen.getByRole("button", { name: "Sort by metric loss" }));
    await waitFor(() => expect(urls.some((u) => u.includes("sort=metrics.loss") && u.includes("desc=true"))).toBe(true));
    fireEvent.click(screen.getByRole("button", { name: "Sort by metric loss" }));
    await waitFor(() => expect(urls[urls.length - 1]).toContain("sort=metrics.loss"));
    expect(urls[urls.length - 1]).not.toContain("desc=");
  });

  it("shows the API's filter error inline with a caret at its column", async () => {
    mockFetch();
    show();
    await screen.findByRole("link", { name: "run-1" });
    fireEvent.change(screen.getByRole("textbox", { name: "Filter" }), { target: { value: "bad = 1" } });
    fireEvent.click(screen.getByRole("button", { name: "Apply" }));
    const alert = await screen.findByRole("alert");
    expect(alert.textContent).toContain("unknown field bad at column 1");
    expect(alert.querySelector(".filter-caret")?.textContent).toContain("^");
    expect(screen.getByRole("textbox", { name: "Filter" }).getAttribute("aria-invalid")).toBe("true");
  });

  it("keeps the selection in the URL and links the compare view", async () => {
    mockFetch();
    show("/experiments/e1?sel=r1,r3");
    await screen.findByRole("link", { name: "run-1" });
    expect((screen.getByRole("checkbox", { name: "Select run run-1" }) as HTMLInputElement).checked).toBe(true);
    expect(screen.getByRole("link", { name: "Compare selected (2)" }).getAttribute("href")).toBe("/compare?runs=r1,r3");
  });
});

describe("query helpers", () => {
  it("quotes keys that are not identifiers and combines search with the filter", () => {
    expect(fieldFor("metrics", "val/loss")).toBe("metrics.val/loss");
    expect(fieldFor("params", "opt.lr")).toBe('params."opt.lr"');
    expect(combinedFilter('status = "finished"', 'a"b')).toBe('(status = "finished") AND name ~ "a\\"b"');
    expect(combinedFilter("", "")).toBe("");
  });

  it("with the experiment's keys, fetches only the shown columns and offers every key", async () => {
    mockFetch();
    const keys = { metrics: ["acc", "loss"], params: ["lr", "opt"] };
    render(
      <MemoryRouter initialEntries={["/experiments/e1?cols=metrics.loss,params.lr"]}>
        <RunsTable experiment="e1" keys={keys} />
      </MemoryRouter>,
    );
    expect(await screen.findByRole("link", { name: "run-2" })).toBeTruthy();
    const u = new URL(urls[0], "http://x");
    expect(u.searchParams.get("columns")).toBe("metrics.loss,params.lr");
    expect(screen.getByRole("checkbox", { name: "acc" })).toBeTruthy(); // a key no loaded run carries
    fireEvent.click(screen.getByRole("checkbox", { name: "opt" }));
    await waitFor(() => expect(new URL(urls[urls.length - 1], "http://x").searchParams.get("columns")).toBe("metrics.loss,params.lr,params.opt"));
  });
});

describe("ColumnChooser", () => {
  it("lists at most CHOOSER_MAX of 1,500 keys, the shown ones first, and the search narrows", () => {
    const metrics = Array.from({ length: 1500 }, (_, i) => `layer${String(i).padStart(4, "0")}/loss`);
    const onToggle = vi.fn();
    render(<ColumnChooser known={{ metrics, params: ["lr"] }} columns={[fieldFor("metrics", metrics[1499])]} onToggle={onToggle} onReset={() => {}} />);
    const boxes = screen.getAllByRole("checkbox");
    expect(boxes.length).toBe(CHOOSER_MAX + 1); // + the param
    expect((boxes[0] as HTMLInputElement).checked).toBe(true); // the shown column, though last by name
    expect(screen.getByTestId("chooser-more-metrics").textContent).toContain(`${(1500 - CHOOSER_MAX).toLocaleString()} more`);
    fireEvent.change(screen.getByRole("searchbox", { name: "Find a column" }), { target: { value: "layer0042" } });
    expect(screen.getAllByRole("checkbox").length).toBe(1);
    fireEvent.click(screen.getByRole("checkbox", { name: "layer0042/loss" }));
    expect(onToggle).toHaveBeenCalledWith(fieldFor("metrics", "layer0042/loss"));
  });
});
