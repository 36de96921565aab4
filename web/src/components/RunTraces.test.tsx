// A run's MLflow traces: listed from /api/runs/{id}/traces, the picked
// one's spans (/api/traces/tr-...) as a waterfall; none, a hint.
import { afterEach, describe, expect, it, vi } from "vitest";
import { cleanup, fireEvent, render, screen, within } from "@testing-library/react";
import { RunTraces, fmtMs, preview, traceStatus } from "./RunTraces";
import type { Span, TraceSummary } from "../api/types";

afterEach(() => {
  cleanup();
  vi.unstubAllGlobals();
});

const ID = "tr-0af7651916cd43dd8448eb211c80319c";
const summary: TraceSummary = { trace_id: ID, name: "pipeline", state: "ERROR", request_time_ms: 1_700_000_000_000, duration_ms: 42, request_preview: '{"q": "hi"}' };

function span(over: Partial<Span>): Span {
  return {
    trace_id: ID.slice(3), span_id: "0000000000000001", parent_id: "", service: "mlflow", name: "pipeline",
    kind: 1, start_ns: 1_000_000_000, end_ns: 1_042_000_000, status: 2, attributes: {}, links: [], ...over,
  }; // prettier-ignore
}

describe("RunTraces", () => {
  it("lists the run's traces and opens one's waterfall", async () => {
    const urls: string[] = [];
    vi.stubGlobal(
      "fetch",
      vi.fn(async (url: string) => {
        urls.push(String(url));
        if (String(url).startsWith("/api/runs/r1/traces")) return new Response(JSON.stringify({ traces: [summary] }), { status: 200 });
        if (String(url) === `/api/traces/${ID}`)
          return new Response(JSON.stringify({ trace_id: ID, spans: [span({}), span({ span_id: "0000000000000002", parent_id: "0000000000000001", name: "retrieve", status: 0, attributes: { "mlflow.spanInputs": '{"q": "hi"}', docs: 3 } })] }), { status: 200 });
        return new Response("{}", { status: 404 });
      }),
    );
    render(<RunTraces runId="r1" />);
    const open = await screen.findByRole("button", { name: "pipeline" });
    expect(screen.getByText("ERROR")).toBeTruthy();
    expect(screen.getByText("42 ms")).toBeTruthy();
    expect(screen.getByText('{"q": "hi"}')).toBeTruthy();
    fireEvent.click(open);
    const wf = await screen.findByTestId("waterfall");
    expect(wf.textContent).toContain("retrieve");
    expect(wf.textContent).toContain("2 spans");
    expect(urls).toContain(`/api/traces/${ID}`);
    // A span's attributes, as MLflow's client sent them.
    fireEvent.click(within(wf).getByRole("button", { name: "retrieve" }));
    const attrs = screen.getByTestId("span-attributes");
    expect(attrs.textContent).toContain("mlflow.spanInputs");
    expect(attrs.textContent).toContain('{"q": "hi"}');
  });

  it("explains how traces get here when the run has none", async () => {
    vi.stubGlobal("fetch", vi.fn(async () => new Response(JSON.stringify({ traces: [] }), { status: 200 })));
    render(<RunTraces runId="r2" />);
    expect(await screen.findByText(/No traces: code traced with MLflow/)).toBeTruthy();
  });

  it("maps states to badges and cuts previews", () => {
    expect(traceStatus({ ...summary, state: "OK" })).toBe("finished");
    expect(traceStatus({ ...summary, state: "STATE_UNSPECIFIED" })).toBe("unknown");
    expect(preview("x".repeat(100), 10)).toBe("xxxxxxxxx…");
    expect(preview(undefined)).toBe("");
    expect(fmtMs(9e18)).toBe("–");
  });
});
