// The system panel shows the figures of a mocked status and keeps a window
// of samples.
import { afterEach, describe, expect, it, vi } from "vitest";
import { cleanup, render, screen } from "@testing-library/react";
import { SystemCharts, appendSample } from "./SystemCharts";
import type { SystemStatus } from "../api/types";

// uPlot needs a canvas; jsdom has none, so the chart is replaced.
vi.mock("./Chart", () => ({ Chart: ({ testId, x }: { testId?: string; x: number[] }) => <div data-testid={testId} data-points={x.length} /> }));

const GIB = 1024 ** 3;
function status(time: string, gpus = true): SystemStatus {
  return {
    time,
    cpu: { cores: 8, percent: 42.4, per_core: [] },
    load: { load1: 1.5, load5: 1.25, load15: 1 },
    memory: { total_bytes: 16 * GIB, used_bytes: 4 * GIB, available_bytes: 12 * GIB },
    disks: [
      { name: "experiments", path: "/data/exp", free_bytes: 100 * GIB, total_bytes: 200 * GIB },
      { name: "checkpoints", path: "/data/ckpt", free_bytes: 50 * GIB, total_bytes: 200 * GIB },
    ],
    gpus: gpus ? [{ index: 0, name: "H100", utilization_percent: 87, memory_used_bytes: 10 * GIB, memory_total_bytes: 80 * GIB, temperature_celsius: 61 }] : [],
    errors: null,
    process: { version: "1.2.3", pid: 4242, started: "2026-01-01T00:00:00Z", uptime_seconds: 3725, rss_bytes: 50 * 1024 * 1024, goroutines: 12 },
    jobs: { running: 1, queued: 0 },
    deployments: null,
  };
}

afterEach(() => {
  cleanup();
  vi.unstubAllGlobals();
});

describe("appendSample", () => {
  it("drops samples older than the window and repeated times", () => {
    let l = appendSample([], status("2026-01-01T00:00:00Z"), 300);
    l = appendSample(l, status("2026-01-01T00:00:00Z"), 300);
    expect(l).toHaveLength(1);
    l = appendSample(l, status("2026-01-01T00:04:00Z"), 300);
    l = appendSample(l, status("2026-01-01T00:06:00Z"), 300);
    expect(l.map((s) => s.t - l[0].t)).toEqual([0, 120]);
  });
});

/** A fetch answering /api/system/history with kept samples and every other path with the status. */
function serve(now: SystemStatus, kept: SystemStatus[] = []) {
  return vi.fn(async (url: string | URL | Request) => {
    const u = String(url);
    const body = u.includes("/api/system/history") ? { interval_seconds: 1, samples: kept.map(({ time, cpu, load, memory, disks, gpus }) => ({ time, cpu, load, memory, disks, gpus })) } : now;
    return new Response(JSON.stringify(body), { status: 200 });
  });
}

describe("SystemCharts", () => {
  it("starts from the samples the dashboard kept, not from one point", async () => {
    const t0 = Date.now() - 120_000;
    const kept = [0, 30, 60, 90].map((s) => status(new Date(t0 + s * 1000).toISOString()));
    vi.stubGlobal("fetch", serve(status(new Date().toISOString()), kept));
    render(<SystemCharts pollMs={60000} />);
    await screen.findByTestId("fig-cpu");
    await vi.waitFor(() => expect(screen.getByTestId("sys-cpu-chart").getAttribute("data-points")).toBe("5"));
  });

  it("renders the figures and a chart per resource, GPUs included", async () => {
    vi.stubGlobal("fetch", serve(status(new Date().toISOString())));
    render(<SystemCharts pollMs={60000} />);
    expect((await screen.findByTestId("fig-cpu")).textContent).toBe("42.4%");
    expect(screen.getByTestId("fig-mem").textContent).toBe("4.0 GiB");
    expect(screen.getByTestId("fig-load").textContent).toBe("1.50 1.25 1.00");
    expect(screen.getByTestId("fig-uptime").textContent).toBe("1h 02m");
    for (const id of ["sys-cpu", "sys-mem", "sys-disk", "sys-gpu", "sys-gpu-mem"]) expect(screen.getByTestId(id)).toBeTruthy();
    expect(screen.getByTestId("sys-disk").textContent).toContain("exp 100 GiB · ckpt 50 GiB");
  });

  it("leaves the GPU charts out without GPUs", async () => {
    vi.stubGlobal("fetch", serve(status(new Date().toISOString(), false)));
    render(<SystemCharts pollMs={60000} />);
    await screen.findByTestId("fig-cpu");
    expect(screen.queryByTestId("sys-gpu")).toBeNull();
  });
});
