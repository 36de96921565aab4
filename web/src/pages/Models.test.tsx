// The Models page lists MLflow 3's logged models beside the registry: name,
// ID, status, the experiment and run each came from (links to their pages),
// how many there are when the page shows only the newest; and says how to
// log one when there is none.
import { afterEach, describe, expect, it, vi } from "vitest";
import { cleanup, render, screen, waitFor, within } from "@testing-library/react";
import { MemoryRouter } from "react-router-dom";
import { ModelsPage } from "./Models";
import { json } from "../test-utils";

afterEach(() => {
  cleanup();
  vi.unstubAllGlobals();
});

const logged = {
  model_id: "m-0123456789abcdef0123456789abcdef",
  name: "autolog-model",
  experiment_id: "e7",
  experiment: "autolog",
  mlflow_experiment_id: "e7",
  model_type: "pytorch",
  source_run_id: "9f1c2b3a4d5e6f708192a3b4c5d6e7f8",
  status: "LOGGED_MODEL_READY",
  created_ms: Date.parse("2026-11-27T10:00:00Z"),
  updated_ms: Date.parse("2026-11-27T10:00:01Z"),
  artifact_uri: "mlflow-artifacts:/e7/models/m-0123456789abcdef0123456789abcdef/artifacts",
};

function mockApi(models: unknown[], total: number) {
  const urls: string[] = [];
  vi.stubGlobal(
    "fetch",
    vi.fn(async (url: string) => {
      const u = String(url);
      urls.push(u);
      if (u === "/api/models") return json({ models: [] });
      if (u === "/api/deployments") return json({ deployments: [] });
      if (u.startsWith("/api/logged-models")) return json({ logged_models: models, total });
      return json({ error: { code: "not_found", message: `no ${u}` } }, 404);
    }),
  );
  return urls;
}

describe("Models page: logged models", () => {
  it("lists MLflow's logged models with their run and experiment", async () => {
    const urls = mockApi([logged, { ...logged, model_id: "m-gone", name: "orphan", experiment_id: undefined, experiment: undefined, mlflow_experiment_id: "3", source_run_id: undefined, status: "LOGGED_MODEL_PENDING" }], 120);
    render(
      <MemoryRouter>
        <ModelsPage />
      </MemoryRouter>,
    );
    await waitFor(() => expect(screen.getByText("autolog-model")).toBeTruthy());
    const card = document.querySelector(".logged-models") as HTMLElement;
    const row = within(card).getByText("autolog-model").closest("tr") as HTMLElement;
    expect(within(row).getByText(logged.model_id).getAttribute("title")).toBe(logged.artifact_uri);
    expect(within(row).getByText("autolog").closest("a")?.getAttribute("href")).toBe("/experiments/e7");
    expect(within(row).getByText("9f1c2b3a4d5e").closest("a")?.getAttribute("href")).toBe(`/runs/${logged.source_run_id}`);
    expect(within(row).getByText("ready")).toBeTruthy();
    const orphan = within(card).getByText("orphan").closest("tr") as HTMLElement;
    expect(within(orphan).getByText("MLflow experiment 3")).toBeTruthy();
    expect(within(orphan).getByText("pending")).toBeTruthy();
    expect(within(card).getByText(/The newest 2 of 120/)).toBeTruthy();
    expect(urls).toContain("/api/logged-models?limit=100");
  });

  it("says how to log one when there is none", async () => {
    mockApi([], 0);
    render(
      <MemoryRouter>
        <ModelsPage />
      </MemoryRouter>,
    );
    await waitFor(() => expect(screen.getByText(/No logged models/)).toBeTruthy());
    expect(screen.getByText(/mlflow.pytorch.autolog\(\)/)).toBeTruthy();
  });
});
