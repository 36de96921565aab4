// The model page shows which server holds which versions: each fw serve of
// its own (a deployment row), and the shared server with this model's
// versions and their state in its repository index; undeploying a shared
// version says it leaves the others serving and sends DELETE for it. The
// deploy dialog builds the shared deploy body.
import { afterEach, describe, expect, it, vi } from "vitest";
import { cleanup, fireEvent, render, screen, waitFor, within } from "@testing-library/react";
import { MemoryRouter, Route, Routes } from "react-router-dom";
import { ModelPage } from "./Model";
import { deployBody } from "../components/DeployDialog";
import { otherModels } from "../components/SharedServer";
import { json } from "../test-utils";

afterEach(() => {
  cleanup();
  vi.unstubAllGlobals();
});

const spec = { inputs: [{ name: "input", dtype: "float32", shape: [-1, 64] }], outputs: [{ name: "logits", dtype: "float32", shape: [-1, 10] }] };
const model = {
  name: "mlp",
  created: "2026-11-26T10:00:00Z",
  aliases: {},
  versions: [1, 2, 3].map((v) => ({ version: v, format: "onnx", size: 1000, source: { upload: `v${v}.onnx` }, created: "2026-11-26T10:00:00Z", ...spec })),
};
const server = { url: "http://127.0.0.1:8100", grpc_address: "127.0.0.1:8101", port: 8100, pid: 42, device: "cpu", started: "2026-11-26T10:05:00Z", log: "x.log" };
const deployments = [
  { id: "dep-own", target: "process", model: "mlp", version: 3, port: 8001, pid: 7, url: "http://127.0.0.1:8001", device: "cpu", started: "2026-11-26T10:01:00Z", state: "running", log: "y.log", healthy: true },
  { id: "dep-sh1", target: "shared", model: "mlp", version: 1, ...server, state: "running", healthy: true, model_state: "READY" },
  { id: "dep-cnn", target: "shared", model: "cnn", version: 1, ...server, state: "running", healthy: true, model_state: "READY" },
];
const shared = {
  state: "running",
  healthy: true,
  ...server,
  repository: "/x/serving/shared",
  versions: [
    { model: "cnn", version: 1, state: "READY", deployment: "dep-cnn" },
    { model: "mlp", version: 1, state: "READY", deployment: "dep-sh1" },
    { model: "mlp", version: 2, state: "UNAVAILABLE", reason: "unloaded" },
  ],
};

function mockApi(sharedAnswer: unknown = shared, deps: unknown[] = deployments) {
  const sent: { method: string; url: string }[] = [];
  vi.stubGlobal(
    "fetch",
    vi.fn(async (url: string, init?: RequestInit) => {
      const u = String(url);
      const method = init?.method ?? "GET";
      sent.push({ method, url: u });
      if (method === "DELETE") return json({ ...deployments[1], state: "stopped" });
      if (u === "/api/models/mlp") return json(model);
      if (u === "/api/deployments") return json({ deployments: deps });
      if (u === "/api/shared-server") return json(sharedAnswer);
      return json({ error: { code: "not_found", message: `no ${u}` } }, 404);
    }),
  );
  return sent;
}

function renderPage() {
  return render(
    <MemoryRouter initialEntries={["/models/mlp"]}>
      <Routes>
        <Route path="/models/:name" element={<ModelPage />} />
      </Routes>
    </MemoryRouter>,
  );
}

/** The Deployments card. */
async function deploymentsCard() {
  const heading = await screen.findByRole("heading", { name: "Deployments" });
  return heading.closest(".card") as HTMLElement;
}

describe("ModelPage deployments", () => {
  it("shows its own fw serve and the shared server's versions of this model with their index states", async () => {
    mockApi();
    renderPage();
    const card = await deploymentsCard();
    await within(card).findByText("dep-own");
    await within(card).findByRole("heading", { name: "Shared server" });
    // The shared server: where it is, and this model's versions on it.
    within(card).getByRole("link", { name: "http://127.0.0.1:8100" });
    within(card).getByText("127.0.0.1:8101");
    const tables = within(card).getAllByRole("table");
    expect(tables).toHaveLength(2);
    const rows = within(tables[1]).getAllByRole("row").slice(1);
    expect(rows.map((r) => r.textContent)).toEqual([expect.stringMatching(/^v1.*ready.*dep-sh1/), expect.stringMatching(/^v2.*unavailable.*unloaded/)]);
    expect(rows[0].textContent).toContain("/v2/models/mlp/versions/1/infer");
    // v2 was undeployed: listed by the server, nothing to undeploy.
    expect(within(rows[1]).queryByRole("button")).toBeNull();
    // The own deployment's row is not repeated in the shared table, and the other model is named.
    expect(within(tables[1]).queryByText("dep-own")).toBeNull();
    within(card).getByText(/Also on it: cnn v1/);
  });

  it("undeploys a shared version, saying the others keep serving", async () => {
    const sent = mockApi();
    renderPage();
    const card = await deploymentsCard();
    fireEvent.click(await within(card).findByRole("button", { name: "Undeploy dep-sh1" }));
    const dialog = await screen.findByRole("dialog", { name: "Undeploy" });
    expect(dialog.textContent).toContain("Take mlp v1 off the shared server at http://127.0.0.1:8100");
    fireEvent.click(within(dialog).getByRole("button", { name: "Undeploy" }));
    await waitFor(() => expect(sent).toContainEqual({ method: "DELETE", url: "/api/deployments/dep-sh1" }));
  });

  it("says when there is no shared server, and shows no shared section", async () => {
    mockApi({ state: "stopped", healthy: false, versions: [] }, deployments.slice(0, 1));
    renderPage();
    const card = await deploymentsCard();
    await within(card).findByText("dep-own");
    expect(within(card).queryByRole("heading", { name: "Shared server" })).toBeNull();
  });
});

describe("deployBody", () => {
  it("sends target shared with no port unless one is typed, and the process body as before", () => {
    const form = { target: "2", port: "", device: "cpu", maxBatch: "", maxDelay: "" };
    expect(deployBody({ ...form, server: "shared" })).toEqual({ target: "shared", port: 0, device: "cpu", version: 2 });
    expect(deployBody({ ...form, server: "shared", port: "8100", maxBatch: "8" })).toEqual({ target: "shared", port: 8100, device: "cpu", version: 2, max_batch_size: 8 });
    expect(deployBody({ ...form, port: "8001", target: "production" })).toEqual({ port: 8001, device: "cpu", version: "production" });
  });
});

describe("otherModels", () => {
  it("lists the other models' ready versions", () => {
    expect(otherModels(shared.versions, "mlp")).toBe("cnn v1");
    expect(otherModels(shared.versions, "cnn")).toBe("mlp v1");
  });
});

describe("ModelPage MLflow versions", () => {
  it("lists a version registered through MLflow's API with its source and stage, without a Deploy button", async () => {
    const withMlflow = {
      ...model,
      versions: [
        model.versions[0],
        { version: 4, format: "mlflow", size: 0, source: { run_id: "r1", uri: "models:/m-abc" }, stage: "Production", created: "2026-11-26T11:00:00Z" },
      ],
    };
    vi.stubGlobal(
      "fetch",
      vi.fn(async (url: string) => {
        const u = String(url);
        if (u === "/api/models/mlp") return json(withMlflow);
        if (u === "/api/deployments") return json({ deployments: [] });
        if (u === "/api/shared-server") return json({ ...shared, versions: [] });
        return json({ error: { code: "not_found", message: `no ${u}` } }, 404);
      }),
    );
    renderPage();
    expect(await screen.findByText("models:/m-abc")).toBeTruthy();
    expect(screen.getByText("Production")).toBeTruthy();
    expect(screen.getByRole("button", { name: "Deploy v1" })).toBeTruthy();
    expect(screen.queryByRole("button", { name: "Deploy v4" })).toBeNull();
  });
});

describe("ModelPage export of a version", () => {
  it("offers Export, not Deploy, for a torch.export program and posts that version", async () => {
    const torchy = {
      name: "torchy",
      created: "2026-11-26T10:00:00Z",
      aliases: {},
      versions: [{ version: 1, format: "torch_export", size: 12000, source: { uri: "models:/m-1" }, created: "2026-11-26T10:00:00Z" }],
    };
    const posted: unknown[] = [];
    vi.stubGlobal(
      "fetch",
      vi.fn(async (url: string, init?: RequestInit) => {
        const u = String(url);
        if (init?.method === "POST" && u === "/api/models/export") {
          posted.push(JSON.parse(String(init.body)));
          return json({ id: "exp-1", state: "running" }, 202);
        }
        if (u === "/api/models/torchy") return json(torchy);
        if (u === "/api/models/exports/exp-1") return json({ id: "exp-1", state: "finished", progress: "done", model: "torchy", version: 2, started: "2026-11-26T10:00:00Z", request: {} });
        if (u === "/api/deployments") return json({ deployments: [] });
        if (u === "/api/shared-server") return json({ state: "stopped", healthy: false, versions: [] });
        return json({ error: { code: "not_found", message: `no ${u}` } }, 404);
      }),
    );
    render(
      <MemoryRouter initialEntries={["/models/torchy"]}>
        <Routes>
          <Route path="/models/:name" element={<ModelPage />} />
        </Routes>
      </MemoryRouter>,
    );
    const exportButton = await screen.findByRole("button", { name: "Export v1" });
    expect(screen.queryByRole("button", { name: "Deploy v1" })).toBeNull();
    fireEvent.click(exportButton);
    const dialog = await screen.findByRole("dialog", { name: "Export torchy v1" });
    expect(within(dialog).getByText(/torch\.export program/)).toBeTruthy();
    expect(within(dialog).queryByLabelText("Checkpoint")).toBeNull(); // no run's checkpoint to pick
    fireEvent.click(within(dialog).getByRole("button", { name: "Export" }));
    await waitFor(() => expect(posted).toEqual([{ model: "torchy", version: 1, format: "onnx", name: "torchy" }]));
    expect(await within(dialog).findByText(/Export finished and registered/)).toBeTruthy();
  });
});
