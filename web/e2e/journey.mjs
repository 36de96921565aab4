// The end-to-end journey of the web UI in a real browser against a real
// dashboard (make test-e2e): Home; start digits_mlp from the Training form
// and watch it live (charts grow, the progress bar moves); stop it through
// the confirmation dialog; run a second one to the end; compare the two;
// export the better checkpoint to ONNX; deploy it; predict an uploaded digit
// image in "try it"; undeploy; a page on another origin (and one reached
// through DNS rebinding) can neither change nor read anything; a run logged
// by MLflow's own client shows up beside them with its charts. Screenshots
// of each page: build/screenshots/.
//
// Env: FW_BIN (bin/fw), FW_PYTHON (the Python with fw, torch, scikit-learn
// and PIL: runs the recipes and draws the test digit), FW_MLFLOW_PYTHON (the
// MLflow venv's Python, scripts/setup-mlflow-venv.sh), FW_DASHBOARD_UI_DIR
// (serve another UI build), FW_KEEP_E2E (keep the temp dir).
// Waits are generous (this may run on 2 busy cores); nothing is timed.
import { execFileSync } from "node:child_process";
import { readFileSync, statSync } from "node:fs";
import { createServer as createHttpServer } from "node:http";
import { join } from "node:path";
import { ROOT, cleanup, freePort, journey, launchBrowser, screenshot, startDashboard, until } from "./harness.mjs";

const PYTHON = process.env.FW_PYTHON ?? join(ROOT, ".venv", "bin", "python");
const MLFLOW_PYTHON = process.env.FW_MLFLOW_PYTHON ?? join(process.env.HOME ?? "", ".cache", "fw", "mlflow-venv", "bin", "python");
const LONG = 120_000;
const EXPERIMENT = "e2e-digits";

/** Draws a digit from scikit-learn's set as a 32x32 grayscale PNG (white on black, like the training data). */
function drawDigit(dir) {
  const png = join(dir, "digit.png");
  const script = `
import json, sys
import numpy as np
from PIL import Image
from sklearn.datasets import load_digits
d = load_digits()
i = 0  # the first image of the set: a 0
px = np.round(d.images[i] * 255.0 / 16.0).astype(np.uint8)
Image.fromarray(px, mode="L").resize((32, 32), Image.NEAREST).save(sys.argv[1])
print(json.dumps({"label": int(d.target[i]), "row": [float(v) / 16.0 for v in d.data[i]]}))
`;
  const out = execFileSync(PYTHON, ["-c", script, png], { encoding: "utf8" });
  const { label, row } = JSON.parse(out.trim().split("\n").pop());
  return { png, label, row };
}

/** The number a [data-points] attribute or aria-valuenow holds (0 when absent). */
async function numAttr(locator, name) {
  const v = await locator.getAttribute(name);
  return v === null ? 0 : Number(v);
}

/** Fills the Training page's form and starts a run; returns its ID (from the URL). */
async function startFromForm(page, url, { name, params }) {
  await page.goto(url + "/training");
  const form = page.getByRole("form", { name: "Start training" });
  await form.waitFor({ timeout: LONG });
  await form.getByLabel("Recipe").selectOption("digits_mlp");
  await form.getByLabel("Experiment").fill(EXPERIMENT);
  await form.getByLabel("Run name").fill(name);
  for (const [k, v] of Object.entries(params)) await form.getByLabel(k, { exact: false }).first().fill(String(v));
  await form.getByRole("button", { name: "Start training" }).click();
  await page.waitForURL(/\/training\/[^/]+$/, { timeout: LONG });
  return decodeURIComponent(new URL(page.url()).pathname.split("/").pop());
}

await journey("web UI journey", async (step) => {
  // Every request the deployments serve is logged (the Traffic card).
  const DASH_ARGS = ["--deployment-payload-rate", "1"];
  let dash = await step("start the dashboard", () => startDashboard({ env: { FW_PYTHON: PYTHON }, args: DASH_ARGS }));
  const browser = await step("launch chromium", () => launchBrowser());
  const problems = [];
  let page;
  try {
    const digit = await step("draw a test digit with scikit-learn and PIL", () => drawDigit(dash.dir));
    page = await browser.newPage({ viewport: { width: 1440, height: 900 } });
    page.setDefaultTimeout(LONG);
    page.on("pageerror", (e) => problems.push(`page error: ${e}`));
    page.on("console", (m) => {
      if (m.type() === "error") problems.push(`console error on ${page.url()}: ${m.text()} ${JSON.stringify(m.location())}`);
    });
    page.on("response", (r) => {
      if (r.status() >= 500) problems.push(`HTTP ${r.status()} ${r.request().method()} ${r.url()}`);
    });
    const noProblems = () => {
      if (problems.length) throw new Error(problems.join("\n"));
    };

    await step("open Home", async () => {
      await page.goto(dash.url + "/");
      await page.getByRole("navigation", { name: "Main" }).waitFor();
      await page.getByRole("heading", { level: 1 }).first().waitFor();
      await screenshot(page, "01-home");
      noProblems();
    });

    let first = "";
    await step("start digits_mlp from the Training form", async () => {
      await page.goto(dash.url + "/training");
      await page.getByRole("form", { name: "Start training" }).waitFor();
      await screenshot(page, "02-training-form");
      // 20 epochs slowed down a little: long enough to watch, stopped halfway.
      first = await startFromForm(page, dash.url, { name: "first-run", params: { epochs: 20, step_delay: 0.05 } });
      await page.getByRole("heading", { name: /first-run/ }).waitFor();
    });

    await step("watch metrics arrive live and the progress bar move", async () => {
      const bar = page.getByRole("progressbar", { name: "Training progress" });
      const chart = page.getByRole("region", { name: "Metric train/loss" });
      await chart.waitFor({ timeout: LONG });
      const p0 = await until("progress above 0", async () => {
        const v = await numAttr(bar, "aria-valuenow");
        return v > 0 ? v : null;
      }, LONG);
      const n0 = await numAttr(chart, "data-points");
      const last0 = await chart.getByLabel("train/loss latest value").textContent();
      await until("more train/loss points", async () => (await numAttr(chart, "data-points")) > n0, LONG);
      await until("a new latest train/loss value", async () => (await chart.getByLabel("train/loss latest value").textContent()) !== last0, LONG);
      await until("the progress bar to move", async () => (await numAttr(bar, "aria-valuenow")) > p0, LONG);
      await page.getByRole("region", { name: "Metric val/accuracy" }).waitFor({ timeout: LONG });
      await page.getByTestId("log-tail").getByText(/epoch 1\//).waitFor({ timeout: LONG });
      await screenshot(page, "03-training-live");
      noProblems();
    });

    await step("stop it through the Stop button and its confirmation", async () => {
      await page.getByRole("button", { name: "Stop", exact: true }).click();
      const dialog = page.getByRole("dialog", { name: "Stop training" });
      await dialog.getByText(/final checkpoint/).waitFor();
      await screenshot(page, "04-stop-confirmation");
      await dialog.getByRole("button", { name: "Stop run" }).click();
      const final = page.getByRole("region", { name: "Final state" });
      await final.waitFor({ timeout: LONG });
      await final.getByText("Run stopped").waitFor();
      await until("the header badge to say stopped", async () => (await page.locator("h1 [data-status]").getAttribute("data-status")) === "stopped", LONG);
      await final.getByRole("link", { name: "Open run page" }).waitFor();
      await final.getByRole("link", { name: "Export a checkpoint" }).waitFor();
      await screenshot(page, "05-training-stopped");
      const run = await dash.api("GET", `/api/runs/${first}`);
      if (run.status !== "stopped") throw new Error(`run ${first} is ${run.status}, want stopped`);
      noProblems();
    });

    let second = "";
    await step("start a second run and let it finish", async () => {
      second = await startFromForm(page, dash.url, { name: "second-run", params: { epochs: 12, lr: 0.005 } });
      const final = page.getByRole("region", { name: "Final state" });
      await final.waitFor({ timeout: 240_000 });
      await final.getByText("Run finished").waitFor();
      const bar = page.getByRole("progressbar", { name: "Training progress" });
      await until("the progress bar at 100%", async () => (await numAttr(bar, "aria-valuenow")) === 100, LONG);
      // What the screenshot shows: the fill spans the whole track at once (it
      // used to lag the text behind a width transition, "100%" over a bar
      // filled to about 85%).
      const drawn = await bar.evaluate((el) => el.querySelector(".progress-fill").getBoundingClientRect().width / el.querySelector(".progress-track").getBoundingClientRect().width);
      if (Math.abs(drawn - 1) > 0.005) throw new Error(`the bar says 100% but its fill covers ${(drawn * 100).toFixed(1)}% of the track`);
      await screenshot(page, "06-training-finished");
      await page.goto(dash.url + "/training");
      await page.getByRole("table", { name: "Training jobs" }).getByRole("link", { name: "second-run" }).waitFor();
      await screenshot(page, "07-training-jobs");
      noProblems();
    });

    await step("select both runs on the experiment page and compare them", async () => {
      await page.goto(dash.url + "/experiments");
      await page.getByRole("link", { name: EXPERIMENT }).first().click();
      await page.getByRole("heading", { name: EXPERIMENT, level: 1 }).waitFor();
      const runs = page.getByRole("region", { name: "Runs" });
      await runs.getByLabel("Select run first-run").check();
      await runs.getByLabel("Select run second-run").check();
      await screenshot(page, "08-experiment");
      await runs.getByRole("link", { name: /Compare selected \(2\)/ }).click();
      await page.getByRole("heading", { name: "Compare runs" }).waitFor();
      const ids = new URL(page.url()).searchParams.get("runs")?.split(",") ?? [];
      if (!ids.includes(first) || !ids.includes(second)) throw new Error(`compare URL ${page.url()} lacks ${first} or ${second}`);
      const main = page.getByRole("main");
      await main.getByText("first-run").first().waitFor();
      await main.getByText("second-run").first().waitFor();
      // The params table names the params that differ (epochs, lr, step_delay).
      const params = page.getByRole("table").filter({ hasText: "step_delay" });
      await params.first().waitFor();
      await params.first().getByText("lr", { exact: true }).first().waitFor();
      await screenshot(page, "09-compare");
      noProblems();
    });

    // The better checkpoint: the highest val/accuracy over both runs' checkpoints.
    const best = await step("pick the better checkpoint", async () => {
      let top = null;
      for (const id of [first, second]) {
        const { checkpoints } = await dash.api("GET", `/api/runs/${id}/checkpoints`);
        for (const c of checkpoints ?? []) {
          const acc = c.metrics?.["val/accuracy"] ?? -1;
          if (!top || acc > top.acc) top = { run: id, path: c.path, acc };
        }
      }
      if (!top) throw new Error("no checkpoints in either run");
      return top;
    });

    const modelName = "digits-e2e";
    await step("export it to ONNX and wait for the parity report", async () => {
      // The run page's Checkpoints tab (where the live page's "Export a checkpoint" leads).
      await page.goto(`${dash.url}/runs/${best.run}?tab=checkpoints`);
      await page.getByRole("button", { name: `Export ${best.path}` }).waitFor();
      await screenshot(page, "10-run-checkpoints");
      // The checkpoint itself can be saved, too.
      const [dl] = await Promise.all([page.waitForEvent("download"), page.getByRole("button", { name: `Download ${best.path}` }).click()]);
      const saved = await dl.path();
      if (dl.suggestedFilename() !== best.path.split("/").pop() || !saved || statSync(saved).size < 1000) {
        throw new Error(`checkpoint download: ${dl.suggestedFilename()} at ${saved}`);
      }
      await page.getByRole("button", { name: `Export ${best.path}` }).click();
      const dialog = page.getByRole("dialog", { name: "Export a checkpoint" });
      await until("the checkpoint list", async () => (await dialog.getByLabel("Checkpoint").locator(`option[value="${best.path}"]`).count()) > 0, LONG);
      if ((await dialog.getByLabel("Checkpoint").inputValue()) !== best.path) throw new Error(`the dialog did not preselect ${best.path}`);
      await dialog.getByLabel("ONNX", { exact: false }).first().check();
      await dialog.getByLabel("Model name").fill(modelName);
      await screenshot(page, "11-export-dialog");
      await dialog.getByRole("button", { name: "Export", exact: true }).click();
      await dialog.getByText("Export finished and registered.").waitFor({ timeout: 240_000 });
      await dialog.getByText(/max abs error/i).first().waitFor();
      await screenshot(page, "12-export-parity");
      await dialog.getByRole("link", { name: new RegExp(`${modelName} v\\d+`) }).click();
      await page.getByRole("heading", { name: modelName, level: 1 }).waitFor();
      noProblems();
    });

    let port = 0;
    await step("deploy it on a free port and wait until it is ready", async () => {
      port = await freePort();
      await page.getByRole("button", { name: /^Deploy/ }).first().click();
      const dialog = page.getByRole("dialog", { name: `Deploy ${modelName}` });
      await dialog.getByLabel("Port").fill(String(port));
      await dialog.getByRole("button", { name: "Deploy", exact: true }).click();
      await dialog.waitFor({ state: "hidden", timeout: LONG });
      const deps = page.getByRole("region", { name: "Deployments" }).or(page.locator(".card").filter({ has: page.getByRole("heading", { name: "Deployments" }) }));
      await deps.first().locator('[data-status="ready"]').waitFor({ timeout: LONG });
      // The same model answers over gRPC on a port the dashboard picked; the page shows where.
      const [dep] = (await dash.api("GET", "/api/deployments")).deployments;
      if (!/^127\.0\.0\.1:\d+$/.test(dep?.grpc_address ?? "")) throw new Error(`deployment has no gRPC address: ${JSON.stringify(dep)}`);
      await deps.first().getByText(dep.grpc_address).waitFor({ timeout: LONG });
      await screenshot(page, "13-model-deployed");
      noProblems();
    });

    await step("predict the uploaded digit in try it", async () => {
      const tryIt = page.locator(".card").filter({ has: page.getByRole("heading", { name: "Try it" }) });
      await tryIt.getByRole("tab", { name: "Image" }).click();
      await tryIt.getByLabel(/Image/).setInputFiles(digit.png);
      await tryIt.getByRole("button", { name: "Predict image" }).click();
      const top = tryIt.getByRole("list", { name: "top classes" });
      // The recipe's checkpoints carry the labels and the image preprocessing
      // (fw.recipes digits_meta), so the exported file takes the image as it is.
      await top.waitFor({ timeout: LONG });
      const label = (await top.locator(".topk-label").first().textContent()).trim();
      if (label !== String(digit.label)) throw new Error(`predicted ${label}, the digit is ${digit.label}`);
      await screenshot(page, "14-try-it");
      noProblems();
    });

    await step("the try-it request's trace: listed under Requests, its waterfall and its engine call", async () => {
      // The deployment sends its traces to the dashboard (POST /v1/traces, batched every 5 s by
      // default); a request through the dashboard's proxy is always traced.
      const requests = page.locator(".card").filter({ has: page.getByRole("heading", { name: "Requests" }) });
      const row = requests.getByRole("button", { name: "POST /predict/image" }).first();
      await row.waitFor({ timeout: LONG });
      await row.click();
      const wf = requests.getByTestId("waterfall");
      for (const phase of ["decode", "queue", "infer", "encode"]) await wf.getByText(phase, { exact: true }).first().waitFor();
      await wf.getByRole("button", { name: "linked ↗" }).first().click();
      await requests.getByTestId("waterfall").getByText(/^engine call /).waitFor({ timeout: LONG });
      await screenshot(page, "14b-request-trace");
      noProblems();
    });

    await step("the logged image request, opened in try it from Traffic, predicts the same digit as JSON rows", async () => {
      const traffic = page.locator(".card").filter({ has: page.getByRole("heading", { name: "Traffic" }) });
      const open = traffic.getByRole("button", { name: "Open in Try it" }).first();
      await open.waitFor({ timeout: LONG });
      await until("the logged request can be opened", async () => await open.isEnabled(), LONG);
      await open.click();
      const tryIt = page.locator(".card").filter({ has: page.getByRole("heading", { name: "Try it" }) });
      const editor = tryIt.getByLabel(/Request body/);
      await until("the logged inputs are in the editor", async () => (await editor.inputValue()).startsWith('{"data":'), LONG);
      await tryIt.getByRole("button", { name: "Predict", exact: true }).click();
      const top = tryIt.getByRole("list", { name: "top classes" });
      await until("the replayed request's answer", async () => {
        const label = (await top.locator(".topk-label").first().textContent())?.trim();
        return label === String(digit.label);
      }, LONG);
      await screenshot(page, "14c-traffic-replay");
      noProblems();
    });

    await step("the deployment's traffic against the training data of the run its version came from", async () => {
      // The recipe logged a sample of its training rows (run.log_reference); the version exported
      // from the run's checkpoint names the run, so its deployments can be compared with them.
      const traffic = page.locator(".card").filter({ has: page.getByRole("heading", { name: "Traffic" }) });
      await traffic.getByLabel("Against the training data").check();
      await traffic.getByText(/Reference: the training data of run/).waitFor({ timeout: LONG });
      await traffic.getByRole("table", { name: "Drift" }).getByText("input mean", { exact: true }).waitFor({ timeout: LONG });
      await screenshot(page, "14d-traffic-training-data");
      noProblems();
    });

    await step("undeploy", async () => {
      await page.getByRole("button", { name: /^Undeploy / }).first().click();
      await page.getByRole("dialog", { name: "Undeploy" }).getByRole("button", { name: "Undeploy", exact: true }).click();
      await until("no deployment left", async () => (await dash.api("GET", "/api/deployments")).deployments.length === 0, LONG);
      await page.getByText(/Not deployed/).waitFor({ timeout: LONG });
      await screenshot(page, "15-undeployed");
      noProblems();
    });

    await step("a run logged by MLflow's own client appears on the experiment page with its charts and its traced call", async () => {
      const script = `
import sys, mlflow
mlflow.set_tracking_uri(sys.argv[1])
mlflow.set_experiment(sys.argv[2])

@mlflow.trace
def answer(q):
    with mlflow.start_span(name="retrieve") as span:
        span.set_attribute("docs", 3)
    return q.upper()

with mlflow.start_run(run_name="mlflow-run") as r:
    mlflow.log_params({"optimizer": "adam", "lr": "0.01"})
    for step in range(30):
        mlflow.log_metrics({"train/loss": 1.0 / (step + 1), "val/accuracy": step / 30}, step=step)
    answer("hi")
mlflow.flush_trace_async_logging()
print(r.info.experiment_id, r.info.run_id)
`;
      const out = execFileSync(MLFLOW_PYTHON, ["-c", script, dash.url, EXPERIMENT], {
        encoding: "utf8",
        env: { ...process.env, MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT: "1", MLFLOW_HTTP_REQUEST_MAX_RETRIES: "0" },
      });
      const [expId, id] = out.trim().split("\n").pop().split(" ");
      await page.goto(dash.url + "/experiments");
      await page.getByRole("link", { name: EXPERIMENT }).first().click();
      await page.getByRole("heading", { name: EXPERIMENT, level: 1 }).waitFor();
      const runs = page.getByRole("region", { name: "Runs" });
      await runs.getByRole("link", { name: "mlflow-run" }).click();
      await page.getByRole("heading", { name: /mlflow-run/ }).waitFor();
      if (!page.url().endsWith(id)) throw new Error(`the run page ${page.url()} is not MLflow's run ${id}`);
      const chart = page.getByTestId("chart-train/loss").getByRole("img", { name: "train/loss" });
      await chart.waitFor();
      await until("all 30 train/loss points drawn", async () => (await numAttr(chart, "data-points")) === 30, LONG);
      await page.getByTestId("chart-val/accuracy").getByRole("img", { name: "val/accuracy" }).waitFor();
      await screenshot(page, "16-mlflow-run");
      await page.getByRole("tab", { name: "Params & summary" }).click();
      await page.getByRole("tabpanel").getByText("optimizer").first().waitFor();
      const run = await dash.api("GET", `/api/runs/${id}`);
      if (run.status !== "finished" || run.params.optimizer !== "adam" || run.tags["mlflow.runName"] !== "mlflow-run") {
        throw new Error(`fw's view of the MLflow run: ${JSON.stringify({ status: run.status, params: run.params, tags: run.tags })}`);
      }
      // The traced call, on the Traces tab: its row, then its spans as a waterfall.
      await page.getByRole("tab", { name: "Traces" }).click();
      await page.getByRole("tabpanel").getByRole("button", { name: "answer" }).click();
      const wf = page.getByTestId("waterfall");
      await wf.getByRole("button", { name: "retrieve" }).click();
      await wf.getByTestId("span-attributes").getByText("docs", { exact: true }).waitFor();
      await screenshot(page, "16b-mlflow-trace");
      // The "View run at" link MLflow's client prints (MLflow UI's hash route) opens fw's run page.
      await page.goto(`${dash.url}/#/experiments/${expId}/runs/${id}`);
      await page.getByRole("heading", { name: /mlflow-run/ }).waitFor();
      if (!page.url().endsWith(`/runs/${id}`)) throw new Error(`MLflow's run link led to ${page.url()}`);
      noProblems();
    });

    await step("a PyTorch model MLflow's client logs and registers is exported from its Model page and deployed", async () => {
      // mlflow.pytorch.log_model's default saves a torch.export program (data/model.pt2); fw keeps the
      // version as that program (format torch_export), which the page exports into a file it serves.
      const script = `
import json, sys
import mlflow, numpy as np, torch
mlflow.set_tracking_uri(sys.argv[1])
mlflow.set_experiment(sys.argv[2])
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3)).eval()
x = np.linspace(-1, 1, 16, dtype=np.float32).reshape(2, 8)
with mlflow.start_run(run_name="mlflow-pytorch"):
    mlflow.pytorch.log_model(model, name="model", registered_model_name="mlflow-mlp", input_example=np.random.rand(4, 8).astype(np.float32))
print(json.dumps({"x": x.tolist(), "y": model(torch.from_numpy(x)).tolist()}))
`;
      const out = execFileSync(MLFLOW_PYTHON, ["-c", script, dash.url, EXPERIMENT], {
        encoding: "utf8",
        env: { ...process.env, MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT: "1", MLFLOW_HTTP_REQUEST_MAX_RETRIES: "0" },
      });
      const want = JSON.parse(out.trim().split("\n").pop());
      await page.goto(dash.url + "/models/mlflow-mlp");
      await page.getByRole("heading", { name: "mlflow-mlp", level: 1 }).waitFor();
      await page.getByRole("button", { name: "Export v1" }).waitFor();
      if ((await page.getByRole("button", { name: "Deploy v1" }).count()) !== 0) throw new Error("a torch.export program version offers Deploy");
      await page.getByRole("button", { name: "Export v1" }).click();
      const dialog = page.getByRole("dialog", { name: "Export mlflow-mlp v1" });
      await dialog.getByText(/torch\.export program/).waitFor();
      await screenshot(page, "16c-mlflow-pytorch-export");
      await dialog.getByRole("button", { name: "Export", exact: true }).click();
      await dialog.getByText("Export finished and registered.").waitFor({ timeout: 240_000 });
      await dialog.getByText(/max abs error/i).first().waitFor();
      await dialog.getByText("Close", { exact: true }).click();
      await page.getByRole("button", { name: "Deploy v2" }).waitFor({ timeout: LONG });
      const port = await freePort();
      await page.getByRole("button", { name: "Deploy v2" }).click();
      const deploy = page.getByRole("dialog", { name: "Deploy mlflow-mlp" });
      await deploy.getByLabel("Port").fill(String(port));
      await deploy.getByRole("button", { name: "Deploy", exact: true }).click();
      await deploy.waitFor({ state: "hidden", timeout: LONG });
      const deps = page.locator(".card").filter({ has: page.getByRole("heading", { name: "Deployments" }) });
      await deps.first().locator('[data-status="ready"]').waitFor({ timeout: LONG });
      const [dep] = (await dash.api("GET", "/api/deployments")).deployments.filter((d) => d.model === "mlflow-mlp");
      if (dep?.version !== 2) throw new Error(`deployment of the exported version: ${JSON.stringify(dep)}`);
      const got = (await dash.api("POST", `/api/deployments/${dep.id}/predict`, { data: want.x })).predictions;
      const worst = Math.max(...got.flatMap((row, i) => row.map((v, j) => Math.abs(v - want.y[i][j]))));
      if (!(worst < 1e-4)) throw new Error(`the deployed export answers ${JSON.stringify(got)}, the PyTorch model ${JSON.stringify(want.y)}`);
      await screenshot(page, "16d-mlflow-pytorch-deployed");
      await page.getByRole("button", { name: /^Undeploy / }).first().click();
      await page.getByRole("dialog", { name: "Undeploy" }).getByRole("button", { name: "Undeploy", exact: true }).click();
      await until("no deployment left", async () => (await dash.api("GET", "/api/deployments")).deployments.length === 0, LONG);
      noProblems();
    });

    await step("an experiment of runs with 1,500 metric keys: the table fetches only its columns, the chooser finds any key, a run's charts and the compare page page in", async () => {
      const keys = Array.from({ length: 1500 }, (_, i) => `layer${String(i).padStart(4, "0")}/loss`);
      const events = [];
      for (let r = 0; r < 20; r++) {
        const run = `wide-${r}`;
        events.push({ type: "run_start", run_id: run, seq: 1, experiment: "wide", name: run, params: { lr: r / 100, opt: r % 2 ? "adam" : "sgd" } });
        events.push({ type: "metrics", run_id: run, seq: 2, step: 0, values: Object.fromEntries(keys.map((k, i) => [k, r + i / 10000])) });
        events.push({ type: "run_end", run_id: run, seq: 3, status: "finished" });
      }
      await dash.api("POST", "/api/ingest", events);
      const columns = [];
      const seen = (req) => {
        const u = new URL(req.url());
        if (u.pathname.endsWith("/runs") && u.pathname.startsWith("/api/experiments/")) columns.push(u.searchParams.get("columns"));
      };
      page.on("request", seen);
      await page.goto(dash.url + "/experiments/wide");
      const runs = page.getByRole("region", { name: "Runs" });
      await runs.getByRole("link", { name: "wide-19" }).waitFor();
      if (columns.length === 0 || columns[0] === null || columns[0].split(",").length > 9) {
        throw new Error(`the runs table asked for columns ${JSON.stringify(columns)}, not a projection of its shown columns`);
      }
      await runs.getByText(/^Columns \(/).click();
      await runs.getByTestId("chooser-more-metrics").waitFor();
      const boxes = await runs.locator(".column-chooser-panel input[type=checkbox]").count();
      if (boxes > 250) throw new Error(`the column chooser rendered ${boxes} checkboxes for 1,500 keys`);
      await runs.getByRole("searchbox", { name: "Find a column" }).fill("layer1499");
      await runs.getByRole("checkbox", { name: "layer1499/loss" }).check();
      await runs.getByRole("button", { name: "Sort by metric layer1499/loss" }).waitFor();
      await runs.getByText(/^19\.1[45]/).first().waitFor(); // run 19's value of layer1499/loss (19.1499)
      if (!columns[columns.length - 1].includes("layer1499/loss")) throw new Error(`after ticking: columns ${columns[columns.length - 1]}`);
      page.off("request", seen);
      await screenshot(page, "17-wide-experiment");
      // The run page of one of them: its charts page in, a page at a time,
      // each page's keys fetched once.
      const fetched = [];
      const seenMetrics = (req) => {
        const u = new URL(req.url());
        if (u.pathname === "/api/runs/wide-19/metrics") fetched.push((u.searchParams.get("keys") ?? "").split(",").length);
      };
      page.on("request", seenMetrics);
      await page.goto(dash.url + "/runs/wide-19");
      await page.getByText("24 of 1,500 charts").waitFor();
      // The counter shows before the cards are drawn: wait for the 24th, then
      // count (a loaded CI run counted too early and read fewer).
      await page.locator(".chart-card").nth(23).waitFor();
      const drawn = await page.locator(".chart-card").count();
      if (drawn !== 24) throw new Error(`the run page drew ${drawn} charts, not a page of 24`);
      await page.getByRole("button", { name: "Show 24 more" }).click();
      await page.getByText("48 of 1,500 charts").waitFor();
      await page.locator(".chart-card").nth(47).waitFor();
      page.off("request", seenMetrics);
      if (fetched.join(",") !== "24,24") throw new Error(`the run page fetched metric histories of ${JSON.stringify(fetched)} keys, want 24 then 24`);
      // The compare page of two of them: a page of 24 charts and a summary
      // column per shown key, not 1,500; more on request, each key once.
      const compared = [];
      const seenCompare = (req) => {
        const u = new URL(req.url());
        if (u.pathname === "/api/compare") compared.push(u.searchParams.get("keys") ? u.searchParams.get("keys").split(",").length : `limit ${u.searchParams.get("key_limit")}`);
      };
      page.on("request", seenCompare);
      await page.goto(dash.url + "/compare?runs=wide-18,wide-19");
      await page.getByText("24 of 1,500 charts").waitFor();
      await page.locator(".chart-card").nth(23).waitFor();
      const cmpDrawn = await page.locator(".chart-card").count();
      const cmpColumns = await page.locator("table.compare-summaries thead th").count();
      if (cmpDrawn !== 24 || cmpColumns !== 25) throw new Error(`the compare page drew ${cmpDrawn} charts and ${cmpColumns} summary columns, want 24 and 25`);
      await page.getByRole("button", { name: "Show 24 more" }).click();
      await page.getByText("48 of 1,500 charts").waitFor();
      await page.locator(".chart-card").nth(47).waitFor();
      page.off("request", seenCompare);
      if (compared.join(",") !== "limit 24,24") throw new Error(`the compare page asked for ${JSON.stringify(compared)}, want the first 24 keys then 24 more`);
      noProblems();
    });

    await step("keyboard: skip link first, then the navigation", async () => {
      await page.goto(dash.url + "/");
      await page.getByRole("navigation", { name: "Main" }).waitFor();
      await page.keyboard.press("Tab");
      const skip = page.getByRole("link", { name: "Skip to content" });
      if (!(await skip.evaluate((el) => el === document.activeElement))) throw new Error("Tab does not reach the skip link first");
      await page.keyboard.press("Tab");
      await page.keyboard.press("Tab");
      const focused = await page.evaluate(() => document.activeElement?.textContent?.trim());
      if (focused !== "Experiments") throw new Error(`the third Tab focuses ${JSON.stringify(focused)}, want the Experiments link`);
      await page.keyboard.press("Enter");
      await page.waitForURL(/\/experiments$/);
      noProblems();
    });

    await step("dark theme: Home and the compare view", async () => {
      const dark = await browser.newPage({ viewport: { width: 1440, height: 900 }, colorScheme: "dark" });
      try {
        await dark.goto(dash.url + "/");
        await dark.getByRole("navigation", { name: "Main" }).waitFor();
        const bg = await dark.evaluate(() => getComputedStyle(document.body).backgroundColor);
        if (bg !== "rgb(17, 19, 24)") throw new Error(`dark body background is ${bg}`);
        await dark.getByText(EXPERIMENT).first().waitFor({ timeout: LONG });
        // The system charts start from the samples the dashboard kept (it has
        // been up for half a minute): many points at once, not one.
        const points = Number(await dark.getByTestId("sys-cpu-chart").getAttribute("data-points"));
        if (!(points >= 10)) throw new Error(`the CPU chart starts with ${points} points; the dashboard keeps the last 5 minutes`);
        await screenshot(dark, "16-home-dark");
        await dark.goto(`${dash.url}/compare?runs=${encodeURIComponent(`${first},${second}`)}`);
        await dark.getByRole("heading", { name: /Params/ }).first().waitFor({ timeout: LONG });
        await screenshot(dark, "17-compare-dark");
      } finally {
        await dark.close();
      }
    });

    await step("a page on another origin can neither drive nor read the dashboard", async () => {
      // A tiny site on another loopback port, under a name chromium resolves
      // to loopback itself (*.localhost): what any web page the user visits could do.
      const evilPort = await freePort();
      const site = createHttpServer((_, res) => {
        res.writeHead(200, { "Content-Type": "text/html" });
        res.end("<!doctype html><title>elsewhere</title><p>another origin</p>");
      });
      await new Promise((ok) => site.listen(evilPort, "127.0.0.1", ok));
      const evil = await browser.newPage();
      try {
        const before = (await dash.api("GET", "/api/experiments")).experiments.length;
        const jobsBefore = ((await dash.api("GET", "/api/training")).jobs ?? []).length;
        await evil.goto(`http://evil.localhost:${evilPort}/`);
        const statuses = [];
        evil.on("response", (r) => {
          if (r.url().startsWith(dash.url)) statuses.push(`${r.request().method()} ${new URL(r.url()).pathname} ${r.status()}`);
        });
        // 1. fetch without a preflight (text/plain) to create an experiment and start a job, and read the list.
        const got = await evil.evaluate(async (base) => {
          const out = {};
          const post = (path, body) =>
            fetch(base + path, { method: "POST", mode: "no-cors", headers: { "Content-Type": "text/plain" }, body: JSON.stringify(body) });
          await post("/api/experiments", { name: "evil-fetch" });
          await post("/api/training/start", { recipe: "digits_mlp", experiment: "evil-job" });
          try {
            const r = await fetch(base + "/api/experiments");
            out.read = await r.text();
          } catch (e) {
            out.readError = String(e);
          }
          out.ws = await new Promise((done) => {
            const ws = new WebSocket(base.replace(/^http/, "ws") + "/api/training/stream");
            ws.onopen = () => (ws.close(), done("open"));
            ws.onerror = () => done("refused");
          });
          return out;
        }, dash.url);
        if (got.read !== undefined) throw new Error(`the page read the experiments list: ${got.read.slice(0, 200)}`);
        if (got.ws !== "refused") throw new Error("the page opened the live stream");
        // 2. A form post (text/plain encoding smuggles a JSON body).
        const formAnswer = evil.waitForResponse((r) => r.url() === dash.url + "/api/experiments" && r.request().method() === "POST");
        await evil.evaluate((base) => {
          const f = document.createElement("form");
          f.method = "POST";
          f.action = base + "/api/experiments";
          f.enctype = "text/plain";
          const i = document.createElement("input");
          i.name = '{"name":"evil-form","x":"';
          i.value = '"}';
          f.appendChild(i);
          document.body.appendChild(f);
          f.submit();
        }, dash.url);
        const fa = await formAnswer;
        if (fa.status() !== 403) throw new Error(`the form post was answered ${fa.status()}, want 403`);
        // 3. DNS rebinding: a page whose name now resolves to the dashboard
        // sends that name as Host; its same-origin requests must be refused.
        // (A page of its own: the form post above navigates the first one.)
        const rebound = `http://evil.localhost:${dash.port}`;
        const rebind = await browser.newPage();
        try {
          const nav = await rebind.goto(rebound + "/");
          if (nav.status() !== 403) throw new Error(`the dashboard served its UI to Host evil.localhost: ${nav.status()}`);
          const rb = await rebind.evaluate(async () => {
            const list = await fetch("/api/experiments");
            const create = await fetch("/api/experiments", { method: "POST", headers: { "Content-Type": "application/json" }, body: '{"name":"evil-rebind"}' });
            return { list: list.status, body: await list.text(), create: create.status };
          });
          if (rb.list !== 403 || rb.create !== 403 || rb.body.includes(EXPERIMENT)) throw new Error(`through rebinding: ${JSON.stringify(rb)}`);
        } finally {
          await rebind.close();
        }
        // Nothing was created, no job started.
        const after = (await dash.api("GET", "/api/experiments")).experiments;
        const evilNames = after.map((e) => e.name).filter((n) => n.startsWith("evil"));
        if (evilNames.length || after.length !== before) throw new Error(`experiments created from elsewhere: ${evilNames}`);
        const jobs = (await dash.api("GET", "/api/training")).jobs ?? [];
        if (jobs.length !== jobsBefore) throw new Error(`a job was started from elsewhere: ${JSON.stringify(jobs.slice(-1))}`);
        const refusedWrites = statuses.filter((s) => s.startsWith("POST") && !/ (403|415)$/.test(s));
        if (refusedWrites.length) throw new Error(`writes not refused: ${refusedWrites}`);
      } finally {
        await evil.close();
        await new Promise((ok) => site.close(ok));
      }
    });

    await step("the dashboard goes away: a banner says so and clears by itself when it is back", async () => {
      await page.goto(dash.url + "/");
      await page.getByText(EXPERIMENT).first().waitFor({ timeout: LONG });
      const { dir, port } = dash;
      await dash.stop();
      const banner = page.getByTestId("offline-banner");
      await banner.waitFor({ timeout: LONG });
      // What was shown stays on the page.
      await page.getByText(EXPERIMENT).first().waitFor();
      await screenshot(page, "18-offline-banner");
      // The failed requests are the point of this step, not problems.
      problems.length = 0;
      dash = await startDashboard({ env: { FW_PYTHON: PYTHON }, args: DASH_ARGS, dir, port });
      await banner.waitFor({ state: "hidden", timeout: LONG });
      await page.getByText(EXPERIMENT).first().waitFor();
      await screenshot(page, "19-reconnected");
      problems.length = 0; // the console logs the refused connections of the outage
    });
  } catch (e) {
    if (page) await screenshot(page, "99-failure").catch(() => {});
    if (process.env.FW_KEEP_E2E) console.error(`dashboard log: ${join(dash.dir, "dashboard.log")}`);
    else {
      try {
        console.error(readFileSync(join(dash.dir, "dashboard.log"), "utf8").split("\n").slice(-30).join("\n"));
      } catch {
        /* no log */
      }
    }
    throw e;
  } finally {
    // Deployments outlive the dashboard: never leave one behind.
    try {
      for (const d of (await dash.api("GET", "/api/deployments")).deployments ?? []) await dash.api("DELETE", `/api/deployments/${d.id}`);
    } catch {
      /* the dashboard is gone already */
    }
    await browser.close();
    await dash.stop();
    cleanup(dash.dir);
  }
});
