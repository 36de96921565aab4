// A deployment's logged traffic: the drift table from /api/payloads/drift,
// the latest records, and a record opened in Try it as a /predict body.
import { afterEach, describe, expect, it, vi } from "vitest";
import { cleanup, fireEvent, render, screen } from "@testing-library/react";
import { MemoryRouter } from "react-router-dom";
import { Traffic, nest, requestBody, trafficQuery } from "./Traffic";
import type { Deployment, PayloadRecord } from "../api/types";

afterEach(() => {
  cleanup();
  vi.unstubAllGlobals();
});

const rec = (over: Partial<PayloadRecord> = {}): PayloadRecord => ({
  id: "r1", time: "2026-11-27T09:00:00Z", model: "digits", version: "1", latency_ms: 0.42,
  inputs: [{ name: "x", datatype: "float32", shape: [1, 2, 2], data: [1, 2, 3, 4] }],
  outputs: [{ name: "logits", datatype: "float32", shape: [1, 3], data: [0, 5, 1] }], ...over,
}); // prettier-ignore

describe("requestBody", () => {
  it("nests a logged input back into rows", () => {
    expect(nest([1, 2, 3, 4, 5, 6], [1, 2, 3])).toEqual([[[1, 2, 3], [4, 5, 6]]]);
    expect(JSON.parse(requestBody(rec()) ?? "")).toEqual({ data: [[[1, 2], [3, 4]]] });
  });
  it("names inputs when there are several, and gives up on one not logged whole", () => {
    const two = rec({ inputs: [{ name: "a", datatype: "float32", shape: [1, 1], data: [1] }, { name: "b", datatype: "int64", shape: [1, 2], data: [2, 3] }] });
    expect(JSON.parse(requestBody(two) ?? "")).toEqual({ inputs: { a: [[1]], b: [[2, 3]] } });
    expect(requestBody(rec({ inputs: [{ name: "x", datatype: "float32", shape: [1, 2], redacted: true }] }))).toBeUndefined();
    expect(requestBody(rec({ inputs: [{ name: "x", datatype: "float32", shape: [1, 9999], summary: { n: 9999, mean: 0, std: 1, min: 0, max: 1 } }] }))).toBeUndefined();
  });
  it("asks for a shared deployment's traffic by model version", () => {
    expect(trafficQuery({ id: "dep-1", target: "shared", model: "m", version: 2 } as unknown as Deployment)).toEqual({ model: "m", version: "2" });
    expect(trafficQuery({ id: "dep-1", target: "process", model: "m", version: 2 } as unknown as Deployment)).toEqual({ deployment: "dep-1" });
  });
});

describe("Traffic", () => {
  it("shows the drift per feature and opens a logged request in Try it", async () => {
    const urls: string[] = [];
    vi.stubGlobal(
      "fetch",
      vi.fn(async (url: string) => {
        urls.push(String(url));
        if (String(url).startsWith("/api/payloads/drift?"))
          return new Response(
            JSON.stringify({
              deployment: "dep-1", model: "", version: "", statistic: "PSI",
              reference: { from: "2026-11-27T08:00:00Z", to: "2026-11-27T08:10:00Z", records: 200 },
              current: { from: "2026-11-27T09:00:00Z", to: "2026-11-27T09:10:00Z", records: 500 },
              features: [
                { name: "logits class", kind: "categorical", psi: 1.2, level: "drift", reference: { shares: { "1": 1 } }, current: { shares: { "2": 0.8, "1": 0.2 } },
                  series: [{ from: "2026-11-27T09:00:00Z", to: "2026-11-27T09:05:00Z", records: 250, psi: 0.01 }, { from: "2026-11-27T09:05:00Z", to: "2026-11-27T09:10:00Z", records: 250, psi: 2.1 }] },
                { name: "x mean", kind: "numeric", psi: 0.02, level: "stable", reference: { mean: 2.5, std: 1 }, current: { mean: 2.51, std: 1 }, series: [] },
              ],
            }),
            { status: 200 },
          ); // prettier-ignore
        return new Response(JSON.stringify({ records: [{ id: "r1", deployment: "dep-1", model: "digits", version: "1", time: "2026-11-27T09:00:00Z", failed: false, record: rec() }] }), { status: 200 });
      }),
    );
    const onTry = vi.fn();
    render(<Traffic deployments={[{ id: "dep-1", model: "digits", version: 1, target: "process" } as unknown as Deployment]} onTry={onTry} />);
    const drifted = await screen.findByText("logits class");
    expect(drifted.closest("tr")?.getAttribute("data-level")).toBe("drift");
    expect(screen.getByText("2: 80%, 1: 20%")).toBeTruthy();
    expect(screen.getByRole("img", { name: "PSI over time: 0.01, 2.10" })).toBeTruthy();
    fireEvent.click(screen.getByRole("button", { name: "Open in Try it" }));
    expect(onTry).toHaveBeenCalledWith("dep-1", JSON.stringify({ data: [[[1, 2], [3, 4]]] }));
    // A chosen reference window goes to the API.
    fireEvent.change(screen.getByLabelText("Reference from"), { target: { value: "2026-11-27T08:00" } });
    fireEvent.change(screen.getByLabelText("to"), { target: { value: "2026-11-27T08:30" } });
    await vi.waitFor(() => expect(urls.some((u) => u.includes("reference_from=") && u.includes("reference_to="))).toBe(true));
  });
  it("compares with the training run's data summary when the version has a run", async () => {
    const urls: string[] = [];
    vi.stubGlobal(
      "fetch",
      vi.fn(async (url: string) => {
        urls.push(String(url));
        if (String(url).startsWith("/api/payloads/drift?")) {
          const training = String(url).includes("reference_run=train-1");
          return new Response(
            JSON.stringify({
              deployment: "dep-1", model: "", version: "", statistic: "PSI", ...(training ? { reference_run: "train-1" } : {}),
              reference: { from: "2026-11-01T00:00:00Z", to: "2026-11-01T00:00:00Z", records: training ? 1000 : 200 },
              current: { from: "2026-11-27T09:00:00Z", to: "2026-11-27T09:10:00Z", records: 500 },
              features: [{ name: "input mean", kind: "numeric", psi: training ? 0.4 : 0.01, level: training ? "drift" : "stable", reference: { mean: 0, std: 1 }, current: { mean: 1, std: 1 }, series: [] }],
            }),
            { status: 200 },
          ); // prettier-ignore
        }
        return new Response(JSON.stringify({ records: [{ id: "r1", deployment: "dep-1", model: "digits", version: "1", time: "2026-11-27T09:00:00Z", failed: false, record: rec() }] }), { status: 200 });
      }),
    );
    const dep = { id: "dep-1", model: "digits", version: 1, target: "process" } as unknown as Deployment;
    render(
      <MemoryRouter>
        <Traffic deployments={[dep]} onTry={vi.fn()} trainingRun={(d) => (d.version === 1 ? "train-1" : undefined)} />
      </MemoryRouter>,
    );
    expect((await screen.findByText("input mean")).closest("tr")?.getAttribute("data-level")).toBe("stable");
    fireEvent.click(screen.getByLabelText("Against the training data"));
    await vi.waitFor(() => expect(screen.getByText("input mean").closest("tr")?.getAttribute("data-level")).toBe("drift"));
    expect(urls.some((u) => u.includes("reference_run=train-1") && !u.includes("reference_from"))).toBe(true);
    expect(screen.getByRole("link", { name: "train-1" }).getAttribute("href")).toBe("/runs/train-1");
    expect(screen.queryByLabelText("Reference from")).toBeNull(); // the window is not the reference now
  });
  it("offers no training reference for a version without a run", async () => {
    vi.stubGlobal("fetch", vi.fn(async () => new Response(JSON.stringify({ records: [] }), { status: 200 })));
    render(<Traffic deployments={[{ id: "dep-1", model: "digits", version: 1, target: "process" } as unknown as Deployment]} onTry={vi.fn()} trainingRun={() => undefined} />);
    await screen.findByText(/No logged requests/);
    expect(screen.queryByLabelText("Against the training data")).toBeNull();
  });
});
