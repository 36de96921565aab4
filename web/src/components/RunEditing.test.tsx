// Editing a run from the run page against a mocked API: Rename… PATCHes the
// name (and shows the API's refusal), the tag chips' × and the Add tag form
// PATCH {"tags": {k: null}} and {"tags": {k: v}}, notes live in the `note`
// tag (line breaks as U+2028, an empty note removes it, never a chip), and
// Delete run… stays disabled until the run's name is typed, then DELETEs
// and opens the run's experiment.
import { json } from "../test-utils";
import { afterEach, describe, expect, it, vi } from "vitest";
import { cleanup, fireEvent, render, screen, waitFor, within } from "@testing-library/react";
import { MemoryRouter, Route, Routes, useParams } from "react-router-dom";
import { RunPage } from "../pages/Run";
import { decodeNote, encodeNote } from "./RunEditing";

interface Call {
  method: string;
  path: string;
  body: unknown;
}
let calls: Call[] = [];
let run: Record<string, unknown>;

function mockFetch(opts: { failPatch?: { status: number; code: string; message: string } } = {}) {
  calls = [];
  run = {
    id: "r1",
    experiment_id: "e1",
    experiment: "digits",
    name: "first-run",
    status: "finished",
    created: "2026-11-22T07:00:00Z",
    updated: "2026-11-22T07:01:00Z",
    started: "2026-11-22T07:00:00Z",
    ended: "2026-11-22T07:01:00Z",
    params: { lr: 0.01 },
    metrics: {},
    tags: { team: "vision", note: "first line\u2028second line" },
  };
  vi.stubGlobal(
    "fetch",
    vi.fn(async (url: string, init?: RequestInit) => {
      const u = new URL(String(url), "http://x");
      const method = init?.method ?? "GET";
      const body = init?.body ? JSON.parse(String(init.body)) : undefined;
      calls.push({ method, path: u.pathname, body });
      if (u.pathname === "/api/runs/r1") {
        if (method === "GET") return run ? json(run) : json({ error: { code: "not_found", message: "no run" } }, 404);
        if (method === "PATCH") {
          if (opts.failPatch) return json({ error: { code: opts.failPatch.code, message: opts.failPatch.message } }, opts.failPatch.status);
          const tags = { ...(run.tags as Record<string, string>) };
          for (const [k, v] of Object.entries((body.tags ?? {}) as Record<string, string | null>)) {
            if (v === null) delete tags[k];
            else tags[k] = v;
          }
          run = { ...run, name: body.name ?? run.name, tags };
          return json(run);
        }
        if (method === "DELETE") return json({ id: "r1", deleted: true });
      }
      return json({ error: { code: "not_found", message: "no route" } }, 404);
    }),
  );
}

function ExperimentStub() {
  const { id } = useParams();
  return <h1>experiment page {id}</h1>;
}

function renderPage() {
  return render(
    <MemoryRouter initialEntries={["/runs/r1?tab=overview"]}>
      <Routes>
        <Route path="/runs/:id" element={<RunPage />} />
        <Route path="/experiments/:id" element={<ExperimentStub />} />
      </Routes>
    </MemoryRouter>,
  );
}

const mutations = () => calls.filter((c) => c.method !== "GET");

afterEach(() => {
  cleanup();
  vi.unstubAllGlobals();
});

describe("note encoding", () => {
  it("keeps line breaks as U+2028 and back", () => {
    expect(encodeNote("a\nb\r\nc")).toBe("a\u2028b\u2028c");
    expect(decodeNote("a\u2028b")).toBe("a\nb");
  });
});

describe("run editing", () => {
  it("renames the run with a PATCH of its name", async () => {
    mockFetch();
    renderPage();
    await screen.findByRole("heading", { name: "first-run", level: 1 });
    fireEvent.click(screen.getByRole("button", { name: "Rename…" }));
    const dialog = screen.getByRole("dialog", { name: "Rename run" });
    const input = within(dialog).getByLabelText("Name");
    expect((input as HTMLInputElement).value).toBe("first-run");
    fireEvent.change(input, { target: { value: " renamed-run " } });
    fireEvent.click(within(dialog).getByRole("button", { name: "Rename" }));
    await screen.findByRole("heading", { name: "renamed-run", level: 1 });
    expect(mutations()).toEqual([{ method: "PATCH", path: "/api/runs/r1", body: { name: "renamed-run" } }]);
    expect(screen.queryByRole("dialog", { name: "Rename run" })).toBeNull();
  });

  it("shows the API's refusal of a name", async () => {
    mockFetch({ failPatch: { status: 400, code: "invalid_name", message: "run name: character '!' is not allowed" } });
    renderPage();
    await screen.findByRole("heading", { name: "first-run", level: 1 });
    fireEvent.click(screen.getByRole("button", { name: "Rename…" }));
    const dialog = screen.getByRole("dialog", { name: "Rename run" });
    fireEvent.change(within(dialog).getByLabelText("Name"), { target: { value: "bad!" } });
    fireEvent.click(within(dialog).getByRole("button", { name: "Rename" }));
    expect((await within(dialog).findByRole("alert")).textContent).toContain("is not allowed");
    expect(screen.getByRole("dialog", { name: "Rename run" })).toBeTruthy();
  });

  it("shows tags as chips without the note, removes and adds tags", async () => {
    mockFetch();
    renderPage();
    await screen.findByRole("heading", { name: "first-run", level: 1 });
    const list = screen.getByRole("list", { name: "Tags" });
    expect(within(list).getByText("team=vision")).toBeTruthy();
    expect(within(list).queryByText(/^note=/)).toBeNull();
    expect(screen.queryByRole("button", { name: "Remove tag note" })).toBeNull();

    fireEvent.click(screen.getByRole("button", { name: "Remove tag team" }));
    await waitFor(() => expect(screen.queryByText("team=vision")).toBeNull());
    expect(mutations()).toEqual([{ method: "PATCH", path: "/api/runs/r1", body: { tags: { team: null } } }]);

    fireEvent.click(screen.getByRole("button", { name: "Add tag" }));
    const form = screen.getByRole("form", { name: "Add tag" });
    fireEvent.change(within(form).getByLabelText("Key"), { target: { value: "stage" } });
    fireEvent.change(within(form).getByLabelText("Value"), { target: { value: "baseline" } });
    fireEvent.click(within(form).getByRole("button", { name: "Add" }));
    await screen.findByText("stage=baseline");
    expect(mutations()[1]).toEqual({ method: "PATCH", path: "/api/runs/r1", body: { tags: { stage: "baseline" } } });
    expect(screen.getByRole("button", { name: "Remove tag stage" })).toBeTruthy();
  });

  it("shows a refused tag's error", async () => {
    mockFetch({ failPatch: { status: 400, code: "invalid_key", message: "tag: key contains a control character" } });
    renderPage();
    await screen.findByRole("heading", { name: "first-run", level: 1 });
    fireEvent.click(screen.getByRole("button", { name: "Remove tag team" }));
    expect((await screen.findByRole("alert")).textContent).toContain("control character");
    expect(screen.getByText("team=vision")).toBeTruthy();
  });

  it("saves notes in the note tag and removes them when emptied", async () => {
    mockFetch();
    renderPage();
    await screen.findByRole("heading", { name: "first-run", level: 1 });
    const notes = screen.getByRole("region", { name: "Notes" });
    expect(notes.querySelector(".run-notes-text")?.textContent).toBe("first line\nsecond line");

    fireEvent.click(within(notes).getByRole("button", { name: "Edit notes" }));
    const area = within(notes).getByLabelText("Notes") as HTMLTextAreaElement;
    expect(area.value).toBe("first line\nsecond line");
    fireEvent.change(area, { target: { value: "lr too high\nretry with 1e-3" } });
    fireEvent.click(within(notes).getByRole("button", { name: "Save" }));
    await waitFor(() => expect(notes.querySelector(".run-notes-text")?.textContent).toBe("lr too high\nretry with 1e-3"));
    expect(mutations()).toEqual([{ method: "PATCH", path: "/api/runs/r1", body: { tags: { note: "lr too high\u2028retry with 1e-3" } } }]);

    fireEvent.click(within(notes).getByRole("button", { name: "Edit notes" }));
    fireEvent.change(within(notes).getByLabelText("Notes"), { target: { value: "  " } });
    fireEvent.click(within(notes).getByRole("button", { name: "Save" }));
    await within(notes).findByText("No notes.");
    expect(mutations()[1]).toEqual({ method: "PATCH", path: "/api/runs/r1", body: { tags: { note: null } } });
  });

  it("cancelling notes sends nothing", async () => {
    mockFetch();
    renderPage();
    await screen.findByRole("heading", { name: "first-run", level: 1 });
    const notes = screen.getByRole("region", { name: "Notes" });
    fireEvent.click(within(notes).getByRole("button", { name: "Edit notes" }));
    fireEvent.change(within(notes).getByLabelText("Notes"), { target: { value: "draft" } });
    fireEvent.click(within(notes).getByRole("button", { name: "Cancel" }));
    expect(within(notes).getByText(/first line/)).toBeTruthy();
    expect(mutations()).toEqual([]);
  });

  it("deletes the run only after its name is typed, then opens its experiment", async () => {
    mockFetch();
    renderPage();
    await screen.findByRole("heading", { name: "first-run", level: 1 });
    fireEvent.click(screen.getByRole("button", { name: "Delete run…" }));
    const dialog = screen.getByRole("dialog", { name: "Delete run" });
    expect(dialog.textContent).toMatch(/metrics, logs, checkpoints and artifacts/);
    const confirm = within(dialog).getByRole("button", { name: "Delete for good" }) as HTMLButtonElement;
    expect(confirm.disabled).toBe(true);
    const input = within(dialog).getByLabelText("Type the run name to confirm");
    fireEvent.change(input, { target: { value: "first-ru" } });
    expect(confirm.disabled).toBe(true);
    fireEvent.click(confirm);
    expect(mutations()).toEqual([]);
    fireEvent.change(input, { target: { value: "first-run" } });
    expect(confirm.disabled).toBe(false);
    fireEvent.click(confirm);
    await screen.findByRole("heading", { name: "experiment page e1" });
    expect(mutations()).toEqual([{ method: "DELETE", path: "/api/runs/r1", body: undefined }]);
  });
});
