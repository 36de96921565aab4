// The runs table's bulk actions against a mocked API: the delete
// confirmation stays disabled until the number of runs is typed, one DELETE
// goes out per selected run, deleted runs leave the selection and failures
// are listed; the tag dialog PATCHes each run (null removes the tag); the
// CSV export fetches every page by cursor and downloads the file.
import { afterEach, describe, expect, it, vi } from "vitest";
import { json, testRun, withFakeLayout } from "../test-utils";
import { act, cleanup, fireEvent, render, screen, waitFor, within } from "@testing-library/react";
import { MemoryRouter, useLocation } from "react-router-dom";
import { RunsTable } from "./RunsTable";

// Run 2 has a param that needs CSV quoting, run 3 a NaN loss.
const run = (i: number) => testRun(i, { params: { optimizer: i === 2 ? 'sgd, "fast"' : "adam" }, loss: { last: i === 3 ? "NaN" : 1 / i } });

interface Call {
  method: string;
  url: string;
  body: unknown;
}
let calls: Call[] = [];
let alive: Set<number>;

/**
 * fetch answering the runs listing (the live runs, in pages of `pageSize`
 * by cursor), DELETE and PATCH of a run; `fail` maps "METHOD id" or
 * "export page N" (a page of limit 1000) to an error answer.
 */
function mockFetch(opts: { runs?: number; fail?: Record<string, number>; pageSize?: number } = {}) {
  calls = [];
  alive = new Set(Array.from({ length: opts.runs ?? 3 }, (_, i) => i + 1));
  vi.stubGlobal(
    "fetch",
    vi.fn(async (url: string, init?: RequestInit) => {
      const u = new URL(String(url), "http://x");
      const method = init?.method ?? "GET";
      calls.push({ method, url: String(url), body: init?.body ? JSON.parse(String(init.body)) : undefined });
      const failWith = (key: string) => {
        const status = opts.fail?.[key];
        return status ? json({ error: { code: "internal", message: `${key} broke` } }, status) : undefined;
      };
      if (u.pathname === "/api/experiments/e1/runs" && method === "GET") {
        const ids = [...alive].sort((a, b) => a - b);
        const size = opts.pageSize ?? ids.length;
        const from = Number(u.searchParams.get("cursor") ?? "0");
        const page = from / Math.max(1, size) + 1;
        const failed = u.searchParams.get("limit") === "1000" ? failWith(`export page ${page}`) : undefined;
        if (failed) return failed;
        const slice = ids.slice(from, from + size);
        return json({ runs: slice.map(run), next: from + size < ids.length ? String(from + size) : undefined });
      }
      const m = /^\/api\/runs\/r(\d+)$/.exec(u.pathname);
      if (m) {
        const i = Number(m[1]);
        const failed = failWith(`${method} r${i}`);
        if (failed) return failed;
        if (!alive.has(i)) return json({ error: { code: "not_found", message: `run r${i} not found` } }, 404);
        if (method === "DELETE") {
          alive.delete(i);
          return json({ id: `r${i}`, deleted: true });
        }
        if (method === "PATCH") return json(run(i));
      }
      return json({ error: { code: "not_found", message: "no route" } }, 404);
    }),
  );
}

withFakeLayout();
afterEach(() => {
  cleanup();
  vi.unstubAllGlobals();
  vi.restoreAllMocks();
});

/** The router's search string, to check the selection kept in ?sel=. */
function Search() {
  return <output data-testid="search">{useLocation().search}</output>;
}
const sel = () => new URLSearchParams(screen.getByTestId("search").textContent ?? "").get("sel") ?? "";

const show = (url: string) =>
  render(
    <MemoryRouter initialEntries={[url]}>
      <RunsTable experiment="e1" />
      <Search />
    </MemoryRouter>,
  );

const listings = () => calls.filter((c) => c.method === "GET" && c.url.startsWith("/api/experiments/e1/runs")).length;

describe("Delete selected", () => {
  it("stays disabled until the number is typed, deletes each run, and clears them from the selection", async () => {
    mockFetch();
    show("/experiments/e1?sel=r1,r3");
    await screen.findByRole("link", { name: "run-1" });
    fireEvent.click(screen.getByRole("button", { name: "Delete selected (2)" }));
    const dialog = screen.getByRole("dialog", { name: "Delete runs" });
    expect(dialog.textContent).toContain("2 runs");
    expect(dialog.textContent).toMatch(/metrics, logs, checkpoints and artifacts, for good/);
    expect(dialog.textContent).toContain("run-1, run-3");
    const confirm = within(dialog).getByRole("button", { name: "Delete 2 runs" }) as HTMLButtonElement;
    const input = within(dialog).getByLabelText("Type 2 to confirm");
    expect(confirm.disabled).toBe(true);
    fireEvent.change(input, { target: { value: "3" } });
    expect(confirm.disabled).toBe(true);
    fireEvent.click(confirm);
    expect(calls.some((c) => c.method === "DELETE")).toBe(false);
    fireEvent.change(input, { target: { value: "2" } });
    expect(confirm.disabled).toBe(false);
    const before = listings();
    fireEvent.click(confirm);

    await waitFor(() => expect(sel()).toBe(""));
    expect(
      calls
        .filter((c) => c.method === "DELETE")
        .map((c) => c.url)
        .sort(),
    ).toEqual(["/api/runs/r1", "/api/runs/r3"]);
    await waitFor(() => expect(screen.queryByRole("link", { name: "run-1" })).toBeNull());
    expect(screen.getByRole("link", { name: "run-2" })).toBeTruthy();
    expect(screen.queryByRole("link", { name: "run-3" })).toBeNull();
    expect(listings()).toBeGreaterThan(before);
    expect(screen.queryByRole("dialog", { name: "Delete runs" })).toBeNull();
    expect(screen.queryByRole("button", { name: /Delete selected/ })).toBeNull();
  });

  it("lists the runs that could not be deleted and keeps only them selected", async () => {
    mockFetch({ fail: { "DELETE r2": 500 } });
    show("/experiments/e1?sel=r1,r2,r3");
    await screen.findByRole("link", { name: "run-1" });
    fireEvent.click(screen.getByRole("button", { name: "Delete selected (3)" }));
    const dialog = screen.getByRole("dialog", { name: "Delete runs" });
    fireEvent.change(within(dialog).getByLabelText("Type 3 to confirm"), { target: { value: "3" } });
    fireEvent.click(within(dialog).getByRole("button", { name: "Delete 3 runs" }));

    const alert = await within(dialog).findByRole("alert");
    expect(alert.textContent).toContain("1 run could not be deleted");
    expect(alert.textContent).toContain("run-2: DELETE r2 broke");
    expect(alert.textContent).toContain("internal");
    await waitFor(() => expect(sel()).toBe("r2"));
    expect(within(dialog).getByRole("status").textContent).toContain("2 runs deleted, 1 failed");
    // The dialog now asks about the one run left, disabled until "1" is typed.
    expect((within(dialog).getByRole("button", { name: "Delete 1 run" }) as HTMLButtonElement).disabled).toBe(true);
    expect(within(dialog).getByLabelText("Type 1 to confirm")).toBeTruthy();
    await waitFor(() => expect(screen.queryByRole("link", { name: "run-1" })).toBeNull());
  });
});

describe("Tag selected", () => {
  it("PATCHes each selected run with the tag, and null to remove it", async () => {
    mockFetch();
    show("/experiments/e1?sel=r1,r3");
    await screen.findByRole("link", { name: "run-1" });

    fireEvent.click(screen.getByRole("button", { name: "Tag selected (2)…" }));
    let dialog = screen.getByRole("dialog", { name: "Tag runs" });
    const apply = within(dialog).getByRole("button", { name: "Tag 2 runs" }) as HTMLButtonElement;
    expect(apply.disabled).toBe(true);
    fireEvent.change(within(dialog).getByLabelText("Key"), { target: { value: "team" } });
    fireEvent.change(within(dialog).getByLabelText("Value"), { target: { value: "vision, \"core\"" } });
    expect(apply.disabled).toBe(false);
    const before = listings();
    fireEvent.click(apply);
    await waitFor(() => expect(screen.queryByRole("dialog", { name: "Tag runs" })).toBeNull());
    const patches = () => calls.filter((c) => c.method === "PATCH");
    expect(patches().map((c) => c.url).sort()).toEqual(["/api/runs/r1", "/api/runs/r3"]);
    for (const c of patches()) expect(c.body).toEqual({ tags: { team: 'vision, "core"' } });
    await waitFor(() => expect(listings()).toBeGreaterThan(before));
    expect(sel()).toBe("r1,r3");

    calls = [];
    fireEvent.click(screen.getByRole("button", { name: "Tag selected (2)…" }));
    dialog = screen.getByRole("dialog", { name: "Tag runs" });
    fireEvent.click(within(dialog).getByRole("checkbox", { name: "Remove this tag" }));
    expect((within(dialog).getByLabelText("Value") as HTMLInputElement).disabled).toBe(true);
    fireEvent.click(within(dialog).getByRole("button", { name: "Remove tag from 2 runs" }));
    await waitFor(() => expect(calls.filter((c) => c.method === "PATCH")).toHaveLength(2));
    for (const c of calls.filter((c) => c.method === "PATCH")) expect(c.body).toEqual({ tags: { team: null } });
  });

  it("lists a run the API refused", async () => {
    mockFetch({ fail: { "PATCH r3": 400 } });
    show("/experiments/e1?sel=r1,r3");
    await screen.findByRole("link", { name: "run-1" });
    fireEvent.click(screen.getByRole("button", { name: "Tag selected (2)…" }));
    const dialog = screen.getByRole("dialog", { name: "Tag runs" });
    fireEvent.change(within(dialog).getByLabelText("Key"), { target: { value: "k" } });
    fireEvent.click(within(dialog).getByRole("button", { name: "Tag 2 runs" }));
    const alert = await within(dialog).findByRole("alert");
    expect(alert.textContent).toContain("run-3: PATCH r3 broke");
  });
});

describe("Export CSV", () => {
  const restore: (() => void)[] = [];
  afterEach(() => restore.splice(0).forEach((f) => f()));
  /** Captures the downloaded blob and file name. */
  function captureDownload() {
    const got: { blob?: Blob; name?: string } = {};
    const u = URL as unknown as Record<string, unknown>;
    const orig = { create: u.createObjectURL, revoke: u.revokeObjectURL };
    u.createObjectURL = (b: Blob) => {
      got.blob = b;
      return "blob:csv";
    };
    u.revokeObjectURL = () => {};
    restore.push(() => {
      u.createObjectURL = orig.create;
      u.revokeObjectURL = orig.revoke;
    });
    vi.spyOn(HTMLAnchorElement.prototype, "click").mockImplementation(function (this: HTMLAnchorElement) {
      got.name = this.download;
    });
    return got;
  }

  it("fetches every page by cursor with the table's query and downloads them all as CSV", async () => {
    mockFetch({ runs: 5, pageSize: 2 });
    show("/experiments/e1?filter=status%20%3D%20%22finished%22&cols=params.optimizer,metrics.loss");
    await screen.findByRole("link", { name: "run-1" });
    const got = captureDownload();
    fireEvent.click(screen.getByRole("button", { name: "Export CSV" }));
    await waitFor(() => expect(got.name).toBe("runs-digits.csv"));
    const pages = calls.filter((c) => c.url.includes("limit=1000"));
    expect(pages).toHaveLength(3);
    expect(pages[0].url).not.toContain("cursor=");
    expect(pages[1].url).toContain("cursor=2");
    expect(pages[2].url).toContain("cursor=4");
    for (const p of pages) {
      expect(p.url).toContain("filter=status");
      expect(p.url).toContain("sort=created");
      expect(p.url).toContain("desc=true");
    }
    const text = await new Promise<string>((ok) => {
      const r = new FileReader();
      r.onload = () => ok(String(r.result));
      r.readAsText(got.blob!);
    });
    const lines = text.trimEnd().split("\r\n");
    expect(lines[0]).toBe("id,name,experiment,status,created,started,ended,duration_s,params.optimizer,metrics.loss");
    expect(lines).toHaveLength(6);
    expect(lines[2]).toBe('r2,run-2,digits,finished,2026-11-22T07:00:00Z,2026-11-22T07:00:00Z,2026-11-22T07:01:00Z,60,"sgd, ""fast""",0.5');
    expect(lines[3].endsWith(",adam,NaN")).toBe(true);
    expect(screen.getByRole("button", { name: "Export CSV" })).toBeTruthy();
  });

  it("says which page failed", async () => {
    mockFetch({ runs: 5, pageSize: 2 });
    show("/experiments/e1");
    await screen.findByRole("link", { name: "run-1" });
    const got = captureDownload();
    await act(async () => {
      mockFetch({ runs: 5, pageSize: 2, fail: { "export page 2": 500 } });
    });
    fireEvent.click(screen.getByRole("button", { name: "Export CSV" }));
    const alert = await screen.findByRole("alert");
    expect(alert.textContent).toContain("CSV export failed on page 2 (after 2 runs): export page 2 broke");
    expect(got.name).toBeUndefined();
    fireEvent.click(within(alert).getByRole("button", { name: "Dismiss" }));
    expect(screen.queryByRole("alert")).toBeNull();
  });
});
