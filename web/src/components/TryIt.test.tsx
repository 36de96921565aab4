// The try-it panel builds a valid example from the input spec, sends rows
// and images to the deployment proxy and renders the top classes.
import { afterEach, describe, expect, it, vi } from "vitest";
import { cleanup, fireEvent, render, screen, within } from "@testing-library/react";
import { TryIt, exampleBody, topClasses } from "./TryIt";

afterEach(() => {
  cleanup();
  vi.unstubAllGlobals();
});

const labels = ["0", "1", "2", "3", "4", "5", "6", "7", "8", "9"];

describe("exampleBody", () => {
  it("is one row of zeros of the per-sample shape", () => {
    const body = exampleBody([{ name: "x", dtype: "float32", shape: [-1, 1, 2, 3] }]);
    expect(body).toEqual({ data: [[[[0, 0, 0], [0, 0, 0]]]] });
  });
  it("names every input of a multi-input model", () => {
    const body = exampleBody([
      { name: "ids", dtype: "int64", shape: [-1, 4] },
      { name: "mask", dtype: "float32", shape: [-1, 2] },
    ]);
    expect(body).toEqual({ inputs: { ids: [[0, 0, 0, 0]], mask: [[0, 0]] } });
  });
});

describe("topClasses", () => {
  it("uses the image answer's top_k as is", () => {
    const top = topClasses({ predictions: [{ top_k: [{ label: "3", index: 3, score: 0.9 }, { label: "8", index: 8, score: 0.05 }] }] }, labels);
    expect(top.map((c) => c.label)).toEqual(["3", "8"]);
  });
  it("takes the softmax of row scores, best first, with labels", () => {
    const top = topClasses({ predictions: [[0, 0, 5, 1, 0, 0, 0, 0, 0, 0]] }, labels, 2);
    expect(top.map((c) => c.label)).toEqual(["2", "3"]);
    expect(top[0].score).toBeGreaterThan(0.9);
  });
});

describe("TryIt", () => {
  it("prefills the example, predicts and renders the top classes", async () => {
    const calls: { url: string; body: string }[] = [];
    vi.stubGlobal(
      "fetch",
      vi.fn(async (url: string, init?: RequestInit) => {
        calls.push({ url: String(url), body: String(init?.body) });
        return new Response(JSON.stringify({ predictions: [[0, 0, 0, 0, 0, 0, 0, 9, 0, 1]], labels: ["7"], model: { name: "d", version: "1" } }), { status: 200 });
      }),
    );
    render(<TryIt deploymentId="dep-1" inputs={[{ name: "x", dtype: "float32", shape: [-1, 4] }]} labels={labels} />);
    const editor = screen.getByLabelText(/Request body/) as HTMLTextAreaElement;
    expect(JSON.parse(editor.value)).toEqual({ data: [[0, 0, 0, 0]] });
    fireEvent.click(screen.getByRole("button", { name: "Predict" }));
    const list = await screen.findByRole("list", { name: "top classes" });
    const sent = calls.find((c) => c.url === "/api/deployments/dep-1/predict");
    expect(sent && JSON.parse(sent.body)).toEqual({ data: [[0, 0, 0, 0]] });
    const items = within(list).getAllByRole("listitem");
    expect(items[0].textContent).toContain("7");
    expect(items[1].textContent).toContain("9");
  });

  it("shows the API's error", async () => {
    vi.stubGlobal(
      "fetch",
      vi.fn(async () => new Response(JSON.stringify({ error: { code: "bad_shape", message: "row 0 has 3 values, want 4" } }), { status: 400 })),
    );
    render(<TryIt deploymentId="dep-1" inputs={[{ name: "x", dtype: "float32", shape: [-1, 4] }]} />);
    fireEvent.click(screen.getByRole("button", { name: "Predict" }));
    expect((await screen.findByRole("alert")).textContent).toContain("row 0 has 3 values, want 4");
  });
});
