// A deployment's traced requests: listed from /api/traces (the shared
// server's filtered to this version), and the picked one's spans as a
// waterfall, its engine call opened through the link.
import { afterEach, describe, expect, it, vi } from "vitest";
import { cleanup, fireEvent, render, screen, within } from "@testing-library/react";
import { Requests, answerOf, waterfall } from "./Requests";
import type { Deployment, Span } from "../api/types";

afterEach(() => {
  cleanup();
  vi.unstubAllGlobals();
});

const T = "0af7651916cd43dd8448eb211c80319c";
const E = "1bf7651916cd43dd8448eb211c80319d";

function span(over: Partial<Span>): Span {
  return {
    trace_id: T, span_id: "0000000000000001", parent_id: "", service: "fw-serve", deployment: "dep-1", name: "POST /predict",
    kind: 2, start_ns: 1_000_000_000, end_ns: 1_004_000_000, status: 0, attributes: {}, links: [], ...over,
  }; // prettier-ignore
}

const request = span({ attributes: { "http.response.status_code": 200, "fw.model": "digits", "fw.model.version": "1" } });
const trace = [
  request,
  span({ span_id: "0000000000000004", parent_id: request.span_id, name: "encode", kind: 1, start_ns: 1_003_000_000, end_ns: 1_004_000_000 }),
  span({ span_id: "0000000000000002", parent_id: request.span_id, name: "decode", kind: 1, start_ns: 1_000_000_000, end_ns: 1_001_000_000 }),
  span({
    span_id: "0000000000000003", parent_id: request.span_id, name: "infer", kind: 1, start_ns: 1_001_000_000, end_ns: 1_003_000_000,
    attributes: { "fw.batch.requests": 3, "fw.batch.rows": 5 }, links: [{ trace_id: E, span_id: "00000000000000e1" }],
  }), // prettier-ignore
];

describe("waterfall", () => {
  it("puts children under their parent by start, and a span with an unknown parent at the top", () => {
    const rows = waterfall([...trace, span({ span_id: "0000000000000009", parent_id: "00000000000000ff", name: "orphan", start_ns: 2_000_000_000 })]);
    expect(rows.map((r) => `${r.depth}:${r.span.name}`)).toEqual(["0:POST /predict", "1:decode", "1:infer", "1:encode", "0:orphan"]);
  });
  it("survives a cycle", () => {
    const a = span({ span_id: "000000000000000a", parent_id: "000000000000000b" });
    const b = span({ span_id: "000000000000000b", parent_id: "000000000000000a" });
    expect(waterfall([a, b]).length).toBeLessThanOrEqual(2);
  });
  it("reads the answer of HTTP and gRPC requests", () => {
    expect(answerOf(request)).toBe("200");
    expect(answerOf(span({ attributes: { "rpc.grpc.status_code": 0 } }))).toBe("gRPC 0");
  });
});

describe("Requests", () => {
  it("lists a deployment's requests and opens one's waterfall, then its engine call", async () => {
    const urls: string[] = [];
    vi.stubGlobal(
      "fetch",
      vi.fn(async (url: string) => {
        urls.push(String(url));
        if (String(url).startsWith("/api/traces?")) return new Response(JSON.stringify({ requests: [request] }), { status: 200 });
        if (String(url) === `/api/traces/${T}`) return new Response(JSON.stringify({ trace_id: T, spans: trace }), { status: 200 });
        if (String(url) === `/api/traces/${E}`)
          return new Response(JSON.stringify({ trace_id: E, spans: [span({ trace_id: E, span_id: "00000000000000e1", name: "engine call digits", kind: 1 })] }), { status: 200 });
        return new Response("{}", { status: 404 });
      }),
    );
    const dep = { id: "dep-1", model: "digits", version: 1, target: "process" } as unknown as Deployment;
    render(<Requests deployments={[dep]} />);
    const row = await screen.findByRole("button", { name: "POST /predict" });
    expect(urls[0]).toContain("deployment=dep-1");
    expect(urls[0]).toContain("sort=recent");
    fireEvent.click(row);
    const wf = await screen.findByTestId("waterfall");
    expect(within(wf).getByText(/batch of 3 \(5 rows\)/)).toBeTruthy();
    expect(wf.textContent).toMatch(/POST \/predict.*decode.*infer.*encode/s);
    fireEvent.click(within(wf).getByRole("button", { name: "linked ↗" }));
    expect(await screen.findByText("engine call digits")).toBeTruthy();
  });

  it("shows only this version's requests on the shared server", async () => {
    const other = span({ span_id: "0000000000000005", trace_id: E, name: "POST /v2/models/{model}/infer", attributes: { "fw.model": "cnn", "fw.model.version": "1" } });
    const urls: string[] = [];
    vi.stubGlobal(
      "fetch",
      vi.fn(async (url: string) => {
        urls.push(String(url));
        return new Response(JSON.stringify({ requests: [other, request] }), { status: 200 });
      }),
    );
    const dep = { id: "dep-2", model: "digits", version: 1, target: "shared" } as unknown as Deployment;
    render(<Requests deployments={[dep]} />);
    expect(await screen.findByRole("button", { name: "POST /predict" })).toBeTruthy();
    expect(screen.queryByRole("button", { name: "POST /v2/models/{model}/infer" })).toBeNull();
    expect(urls[0]).toContain("deployment=shared-server");
  });
});
