// The export dialog sends the export body the API expects and, once the job
// has finished, shows the parity report and the registered version.
import { json } from "../test-utils";
import { afterEach, describe, expect, it, vi } from "vitest";
import { cleanup, fireEvent, render, screen, waitFor, within } from "@testing-library/react";
import { MemoryRouter } from "react-router-dom";
import { ExportDialog, exportBody } from "./ExportDialog";

interface Sent {
  method: string;
  url: string;
  body: unknown;
}

const report = {
  path: "/tmp/x/model.onnx",
  format: "onnx",
  name: "digits_cnn",
  max_abs_error: 2.5e-6,
  atol: 1e-4,
  rtol: 1e-3,
  size_bytes: 123456,
  seconds: 1.2,
  method: "trace",
  checks: [
    { input: "example", batch: 1, max_abs_error: 1e-6 },
    { input: "random batch 7", batch: 7, max_abs_error: 2.5e-6 },
  ],
};

function mockApi(finalJob: Record<string, unknown>): Sent[] {
  const sent: Sent[] = [];
  vi.stubGlobal(
    "fetch",
    vi.fn(async (url: string, init?: RequestInit) => {
      const u = String(url);
      const method = init?.method ?? "GET";
      sent.push({ method, url: u, body: init?.body ? JSON.parse(String(init.body)) : undefined });
      if (u === "/api/runs/r1") return json({ id: "r1", name: "run one", experiment: "digits", source: { recipe: "digits_cnn" } });
      if (u === "/api/runs/r1/checkpoints")
        return json({ checkpoints: [{ path: "epoch-1.pt", step: 10, epoch: 1, metrics: { val_acc: 0.9 } }, { path: "epoch-2.pt", step: 20, epoch: 2, metrics: { val_acc: 0.95 } }] });
      if (u === "/api/models/export" && method === "POST") {
        const job = { id: "exp-1", state: "running", progress: "exporting", model: "digits_cnn" };
        return json({ id: "exp-1", state: "running", job }, 202);
      }
      if (u === "/api/models/exports/exp-1") return json({ id: "exp-1", progress: "done", model: "digits_cnn", ...finalJob });
      return json({ error: { code: "not_found", message: "no route" } }, 404);
    }),
  );
  return sent;
}

afterEach(() => {
  cleanup();
  vi.unstubAllGlobals();
});

describe("exportBody", () => {
  it("keeps opset for ONNX only and method for TorchScript only", () => {
    expect(exportBody({ runId: "r", checkpoint: "c", format: "onnx", opset: "17", method: "script", name: " m " })).toEqual({ run_id: "r", checkpoint: "c", format: "onnx", opset_version: 17, name: "m" });
    expect(exportBody({ runId: "r", checkpoint: "c", format: "torchscript", opset: "17", method: "script", name: "" })).toEqual({ run_id: "r", checkpoint: "c", format: "torchscript", method: "script" });
  });
  it("sends the quantization method and opset for int8 ONNX only", () => {
    expect(exportBody({ runId: "r", checkpoint: "c", format: "onnx_int8", opset: "14", method: "script", name: "", quantization: "static" })).toEqual({
      run_id: "r",
      checkpoint: "c",
      format: "onnx_int8",
      opset_version: 14,
      quantization: "static",
    });
    expect(exportBody({ runId: "r", checkpoint: "c", format: "onnx", opset: "14", method: "trace", name: "", quantization: "static" })).toEqual({ run_id: "r", checkpoint: "c", format: "onnx", opset_version: 14 });
  });

  it("sends neither opset nor method for AOTInductor (the API refuses a method for aoti)", () => {
    expect(exportBody({ runId: "r", checkpoint: "c", format: "aoti", opset: "17", method: "trace", name: "m" })).toEqual({ run_id: "r", checkpoint: "c", format: "aoti", name: "m" });
  });
});

describe("ExportDialog", () => {
  it("submits the export and shows the parity report of the finished job", async () => {
    const sent = mockApi({ state: "finished", version: 3, report });
    const done = vi.fn();
    render(
      <MemoryRouter>
        <ExportDialog open onClose={() => {}} runId="r1" checkpoint="epoch-2.pt" onDone={done} />
      </MemoryRouter>,
    );
    // The model name defaults to the run's recipe.
    await waitFor(() => expect(screen.getByLabelText("Model name")).toHaveProperty("value", "digits_cnn"));
    expect(screen.getByLabelText("Checkpoint")).toHaveProperty("value", "epoch-2.pt");
    fireEvent.change(screen.getByLabelText("ONNX opset version"), { target: { value: "17" } });
    fireEvent.click(screen.getByRole("button", { name: "Export" }));

    const report_ = await screen.findByTestId("parity-report", undefined, { timeout: 5000 });
    const post = sent.find((s) => s.method === "POST");
    expect(post?.url).toBe("/api/models/export");
    expect(post?.body).toEqual({ run_id: "r1", checkpoint: "epoch-2.pt", format: "onnx", opset_version: 17, name: "digits_cnn" });
    expect(within(report_).getByText("parity pass")).toBeTruthy();
    expect(within(report_).getAllByText("2.500e-6")).toHaveLength(2); // headline and the batch-7 check
    expect(within(report_).getByText("random batch 7")).toBeTruthy();
    expect(screen.getByRole("link", { name: "digits_cnn v3" }).getAttribute("href")).toBe("/models/digits_cnn");
    expect(done).toHaveBeenCalledWith(expect.objectContaining({ state: "finished", version: 3 }));
  });

  it("exports int8 ONNX with static quantization and shows the method in the report", async () => {
    const sent = mockApi({ state: "finished", version: 4, report: { ...report, format: "onnx_int8", max_abs_error: 0.13, atol: 0.25, rtol: 0.1, quantization: "static" } });
    render(
      <MemoryRouter>
        <ExportDialog open onClose={() => {}} runId="r1" checkpoint="epoch-2.pt" />
      </MemoryRouter>,
    );
    await waitFor(() => expect(screen.getByLabelText("Model name")).toHaveProperty("value", "digits_cnn"));
    expect(screen.queryByLabelText("Quantization")).toBeNull();
    fireEvent.click(screen.getByLabelText("int8 ONNX (runs on ONNX Runtime)"));
    fireEvent.change(screen.getByLabelText("Quantization"), { target: { value: "static" } });
    // The opset field starts empty: the exporter's own opset (fw.export's default).
    expect((screen.getByLabelText("ONNX opset version") as HTMLInputElement).value).toBe("");
    fireEvent.click(screen.getByRole("button", { name: "Export" }));
    const report_ = await screen.findByTestId("parity-report", undefined, { timeout: 5000 });
    expect(sent.find((s) => s.method === "POST")?.body).toEqual({ run_id: "r1", checkpoint: "epoch-2.pt", format: "onnx_int8", quantization: "static", name: "digits_cnn" });
    expect(within(report_).getByText("int8 static")).toBeTruthy();
    expect(within(report_).getByText("format onnx_int8")).toBeTruthy();
  });

  it("exports an AOTInductor package without a method and says it compiles", async () => {
    const sent = mockApi({ state: "finished", version: 1, report: { ...report, format: "aoti", method: "export", path: "/tmp/x/model.pt2" } });
    render(
      <MemoryRouter>
        <ExportDialog open onClose={() => {}} runId="r1" checkpoint="epoch-2.pt" />
      </MemoryRouter>,
    );
    await waitFor(() => expect(screen.getByLabelText("Model name")).toHaveProperty("value", "digits_cnn"));
    fireEvent.click(screen.getByLabelText("AOTInductor (.pt2)"));
    expect(screen.getByTestId("aoti-note").textContent).toMatch(/compiles C\+\+/i);
    expect(screen.queryByLabelText("Method")).toBeNull();
    fireEvent.click(screen.getByRole("button", { name: "Export" }));
    const report_ = await screen.findByTestId("parity-report", undefined, { timeout: 5000 });
    expect(sent.find((s) => s.method === "POST")?.body).toEqual({ run_id: "r1", checkpoint: "epoch-2.pt", format: "aoti", name: "digits_cnn" });
    expect(within(report_).getByText("format aoti")).toBeTruthy();
  });

  it("shows the exporter's message when the export fails", async () => {
    mockApi({ state: "failed", error: "ParityError: the exported onnx file differs" });
    render(
      <MemoryRouter>
        <ExportDialog open onClose={() => {}} runId="r1" checkpoint="epoch-1.pt" />
      </MemoryRouter>,
    );
    await waitFor(() => expect(screen.getByLabelText("Checkpoint")).toHaveProperty("value", "epoch-1.pt"));
    fireEvent.click(screen.getByLabelText("TorchScript"));
    fireEvent.click(screen.getByRole("button", { name: "Export" }));
    expect(await screen.findByText(/ParityError: the exported onnx file differs/, undefined, { timeout: 5000 })).toBeTruthy();
  });
});
