// The Training start form: built from the recipes answer, sends the right
// body, shows the API's 422 details.
import { afterEach, describe, expect, it, vi } from "vitest";
import { cleanup, fireEvent, render, screen, waitFor } from "@testing-library/react";
import { MemoryRouter, Route, Routes, useParams } from "react-router-dom";
import { StartForm } from "./Training";

const recipes = {
  recipes: [
    {
      name: "digits_mlp",
      description: "MLP on digits",
      module: "fw.recipes.digits_mlp",
      builtin: true,
      params: [
        { name: "epochs", type: "int", default: 5, min: 1, max: 200, description: "passes" },
        { name: "lr", type: "float", default: 0.001, min: 1e-6, max: 1, description: "learning rate" },
      ],
    },
    {
      name: "diabetes_mlp",
      description: "regression",
      params: [{ name: "hidden", type: "int", default: 64, min: 4, max: 1024, description: "units" }],
    },
  ],
};

interface Sent {
  method: string;
  url: string;
  body: unknown;
}

/** Mocks the dashboard: recipes, experiments, and the start answer given. */
function mockApi(start: { status: number; body: unknown }): Sent[] {
  const sent: Sent[] = [];
  vi.stubGlobal(
    "fetch",
    vi.fn(async (url: string, init?: RequestInit) => {
      const u = String(url);
      sent.push({ method: init?.method ?? "GET", url: u, body: init?.body ? JSON.parse(String(init.body)) : undefined });
      if (u.startsWith("/api/training/recipes")) return new Response(JSON.stringify(recipes), { status: 200 });
      if (u.startsWith("/api/experiments")) return new Response(JSON.stringify({ experiments: [{ id: "e1", name: "digits" }] }), { status: 200 });
      if (u === "/api/training/start") return new Response(JSON.stringify(start.body), { status: start.status });
      return new Response(JSON.stringify({ error: { code: "not_found", message: "no" } }), { status: 404 });
    }),
  );
  return sent;
}

function Live() {
  return <p>live {useParams().runId}</p>;
}

function renderForm() {
  return render(
    <MemoryRouter initialEntries={["/training"]}>
      <Routes>
        <Route path="/training" element={<StartForm />} />
        <Route path="/training/:runId" element={<Live />} />
      </Routes>
    </MemoryRouter>,
  );
}

afterEach(() => {
  cleanup();
  vi.unstubAllGlobals();
});

describe("StartForm", () => {
  it("builds the form from the recipe's schema and posts the right body", async () => {
    const sent = mockApi({ status: 202, body: { id: "run42", status: "running" } });
    renderForm();
    const epochs = (await screen.findByLabelText(/epochs/)) as HTMLInputElement;
    expect(epochs.value).toBe("5");
    expect(screen.getByText("MLP on digits")).toBeTruthy();
    expect(document.querySelector("datalist option")?.getAttribute("value")).toBe("digits");
    fireEvent.change(screen.getByLabelText("Experiment"), { target: { value: "digits" } });
    fireEvent.change(screen.getByLabelText("Run name"), { target: { value: "first" } });
    fireEvent.change(epochs, { target: { value: "3" } });
    fireEvent.click(screen.getByRole("button", { name: "Start training" }));
    await screen.findByText("live run42");
    const post = sent.find((s) => s.method === "POST");
    expect(post).toEqual({ method: "POST", url: "/api/training/start", body: { recipe: "digits_mlp", experiment: "digits", name: "first", params: { epochs: 3, lr: 0.001 } } });
  });

  it("switches to another recipe's defaults", async () => {
    const sent = mockApi({ status: 202, body: { id: "r2", status: "queued" } });
    renderForm();
    await screen.findByLabelText(/epochs/);
    fireEvent.change(screen.getByLabelText("Recipe"), { target: { value: "diabetes_mlp" } });
    expect(((await screen.findByLabelText(/hidden/)) as HTMLInputElement).value).toBe("64");
    expect(screen.queryByLabelText(/epochs/)).toBeNull();
    fireEvent.change(screen.getByLabelText("Experiment"), { target: { value: "diabetes" } });
    fireEvent.click(screen.getByRole("button", { name: "Start training" }));
    await screen.findByText("live r2");
    expect(sent.find((s) => s.method === "POST")?.body).toEqual({ recipe: "diabetes_mlp", experiment: "diabetes", params: { hidden: 64 } });
  });

  it("does not send invalid params and shows the API's 422 details", async () => {
    const sent = mockApi({
      status: 422,
      body: { error: { code: "invalid_params", message: "the params do not match recipe digits_mlp", details: ["lr: 0.5 is above the maximum 0.1"] } },
    });
    renderForm();
    await screen.findByLabelText(/epochs/);
    fireEvent.change(screen.getByLabelText(/epochs/), { target: { value: "0" } });
    fireEvent.click(screen.getByRole("button", { name: "Start training" }));
    expect(await screen.findByText(/Name the experiment/)).toBeTruthy();
    expect(screen.getByText(/below the minimum 1/i)).toBeTruthy();
    expect(sent.some((s) => s.method === "POST")).toBe(false);

    fireEvent.change(screen.getByLabelText("Experiment"), { target: { value: "digits" } });
    fireEvent.change(screen.getByLabelText(/epochs/), { target: { value: "2" } });
    fireEvent.click(screen.getByRole("button", { name: "Start training" }));
    await screen.findByText("the params do not match recipe digits_mlp");
    expect(screen.getByText("lr: 0.5 is above the maximum 0.1")).toBeTruthy();
    expect(screen.getByText("invalid_params")).toBeTruthy();
    await waitFor(() => expect(sent.filter((s) => s.method === "POST").length).toBe(1));
  });
});
