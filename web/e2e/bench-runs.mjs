// The 10,000-runs benchmark of the experiments table (make bench-ui): a real
// dashboard seeded with 10,000 runs through POST /api/ingest, the experiment
// page in Debian's chromium, and the times of what a user does: first rows,
// scrolling to the last run through the cursor pages, a filter, a sort.
// Prints a markdown table (p50 over a few repetitions) and writes it into
// docs/benchmarks.md between the bench-ui markers. A figure, not a timed
// assertion: it fails only when the page breaks (no rows, page errors, every
// row in the DOM).
import { execFileSync } from "node:child_process";
import { readFileSync, writeFileSync, existsSync } from "node:fs";
import { cpus, totalmem } from "node:os";
import { join } from "node:path";
import { ROOT, cleanup, launchBrowser, startDashboard } from "./harness.mjs";

const RUNS = Number(process.env.BENCH_RUNS ?? 10_000);
const REPS = Number(process.env.BENCH_REPS ?? 20);
const EXPERIMENT = "bench-10k";
const BEGIN = "<!-- bench-ui:begin -->";
const END = "<!-- bench-ui:end -->";

/** The loss of run i: distinct values in [1, 2), so a sort has one clear first row. */
const lossOf = (i) => 1 + ((i * 7919) % RUNS) / RUNS;
const nameOf = (i) => `run-${String(i).padStart(5, "0")}`;

/** run_start (params), one metrics event and run_end per run, 1,000 runs per request. */
async function seed(dash) {
  const t0 = Date.now();
  const start = Date.now() / 1000 - RUNS;
  const perBatch = 1000;
  for (let b = 0; b < RUNS; b += perBatch) {
    const events = [];
    for (let i = b; i < Math.min(RUNS, b + perBatch); i++) {
      const run_id = `bench-${i}`;
      const time = start + i;
      events.push({
        type: "run_start", run_id, writer: "bench", seq: 1, time, experiment: EXPERIMENT, name: nameOf(i), status: "running",
        params: { lr: [0.1, 0.01, 0.001, 0.0001][i % 4], batch_size: [32, 64, 128][i % 3], hidden: [32, 64, 128, 256][(i >> 2) % 4], optimizer: i % 2 ? "adam" : "sgd", seed: i },
        tags: { sweep: String(i % 10) },
      });
      events.push({ type: "metrics", run_id, writer: "bench", seq: 2, time: time + 0.5, step: 100, values: { loss: lossOf(i), acc: 1 - lossOf(i) / 2 } });
      events.push({ type: "run_end", run_id, writer: "bench", seq: 3, time: time + 1, status: i % 17 === 0 ? "failed" : "finished" });
    }
    const r = await dash.api("POST", "/api/ingest", events);
    if (r.errors?.length) throw new Error(`ingest refused events: ${JSON.stringify(r.errors.slice(0, 3))}`);
  }
  return (Date.now() - t0) / 1000;
}

/** The largest value: with BENCH_REPS=20 repetitions, the p95; reported as the tail. */
const worst = (xs) => Math.max(...xs);
const p50 = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
};
const ms = (x) => `${Math.round(x)} ms`;

/** Waits in the page until fn() is truthy (polled every animation frame). */
const waitIn = (page, fn, arg, timeout = 60_000) => page.waitForFunction(fn, arg, { timeout, polling: "raf" });

const rowsSel = "table.runs tbody tr[data-index]";

async function main() {
  const dash = await startDashboard();
  const browser = await launchBrowser();
  const errors = [];
  try {
    const seedS = await seed(dash);
    const exp = await dash.api("GET", `/api/experiments/${EXPERIMENT}`);
    if (exp.runs !== RUNS) throw new Error(`seeded ${exp.runs} runs, wanted ${RUNS}`);
    console.log(`seeded ${RUNS} runs in ${seedS.toFixed(1)} s`);

    const page = await browser.newPage({ viewport: { width: 1440, height: 900 } });
    page.on("pageerror", (e) => errors.push(String(e)));
    let runRequests = 0;
    page.on("request", (r) => {
      if (r.url().includes(`/runs?`) || r.url().includes(`/runs&`)) runRequests++;
    });
    const url = `${dash.url}/experiments/${exp.id}`;
    await page.goto(url); // warm-up: assets cached, as for a user coming back
    await page.waitForSelector(rowsSel);

    const first = [];
    const domRows = [];
    for (let i = 0; i < REPS; i++) {
      const t0 = Date.now();
      await page.goto(url);
      await page.waitForSelector(rowsSel);
      first.push(Date.now() - t0);
      domRows.push(await page.locator(rowsSel).count());
    }

    const scroll = [];
    const pages = [];
    for (let i = 0; i < REPS; i++) {
      await page.goto(url);
      await page.waitForSelector(rowsSel);
      runRequests = 0;
      const t0 = Date.now();
      // Scroll to the bottom each frame until the last run is rendered.
      await waitIn(page, (last) => {
        const box = document.querySelector("[data-testid=runs-scroll]");
        if (!box) return false;
        box.scrollTop = box.scrollHeight;
        return document.querySelector(`table.runs tbody tr[data-index="${last}"]`) !== null;
      }, RUNS - 1, 120_000);
      scroll.push(Date.now() - t0);
      pages.push(runRequests + 1); // + the first page, loaded before the timer
      domRows.push(await page.locator(rowsSel).count());
    }
    const lastName = await page.locator(`${rowsSel}[data-index="${RUNS - 1}"] a`).first().textContent();
    if (lastName !== nameOf(0)) throw new Error(`the last row is ${lastName}, wanted ${nameOf(0)} (sorted by created, newest first)`);

    // Filter: alternate two filters with known counts, wait for the count to show.
    const filter = [];
    await page.goto(url);
    await page.waitForSelector(rowsSel);
    const filterBox = page.getByRole("textbox", { name: "Filter" });
    for (let i = 0; i < REPS; i++) {
      const n = i % 2 ? 70 : 50;
      await filterBox.fill(`params.seed < ${n}`);
      const t0 = Date.now();
      await filterBox.press("Enter");
      await waitIn(page, (want) => {
        const c = document.querySelector("[data-testid=runs-count]")?.textContent ?? "";
        return c.startsWith(want) && document.querySelectorAll("table.runs tbody tr[data-index]").length > 0;
      }, `${n} runs`);
      filter.push(Date.now() - t0);
    }

    // Sort by the loss column: alternate descending and ascending, wait for the expected first row.
    const sort = [];
    await page.goto(url);
    await page.waitForSelector(rowsSel);
    let hi = 0;
    let lo = 0;
    for (let i = 0; i < RUNS; i++) {
      if (lossOf(i) > lossOf(hi)) hi = i;
      if (lossOf(i) < lossOf(lo)) lo = i;
    }
    const header = page.getByRole("button", { name: "Sort by metric loss" });
    for (let i = 0; i < REPS; i++) {
      const want = i % 2 ? nameOf(lo) : nameOf(hi);
      const t0 = Date.now();
      await header.click();
      await waitIn(page, (name) => document.querySelector('table.runs tbody tr[data-index="0"] a')?.textContent === name, want);
      sort.push(Date.now() - t0);
    }
    if (errors.length) throw new Error(`page errors: ${errors.join("; ")}`);
    const maxRows = Math.max(...domRows);
    if (maxRows === 0 || maxRows > 500) throw new Error(`${maxRows} rows in the DOM: the table is not virtualised`);

    const table = [
      "| step | p50 | max | runs | notes |",
      "|---|---|---|---|---|",
      `| first rows rendered (page load to first row) | ${ms(p50(first))} | ${ms(worst(first))} | ${RUNS.toLocaleString("en")} | first page of 100 runs |`,
      `| rows in the DOM | ${p50(domRows)} | ${maxRows} | ${RUNS.toLocaleString("en")} | virtualised: only the visible rows plus overscan |`,
      `| scroll to the last run through the pages | ${ms(p50(scroll))} | ${ms(worst(scroll))} | ${RUNS.toLocaleString("en")} | ${p50(pages)} pages fetched by cursor (100, then 500 each) |`,
      `| filter answered (Enter to rows shown) | ${ms(p50(filter))} | ${ms(worst(filter))} | 50 / 70 of ${RUNS.toLocaleString("en")} | \`params.seed < N\` |`,
      `| sort by a metric column (click to first row) | ${ms(p50(sort))} | ${ms(worst(sort))} | ${RUNS.toLocaleString("en")} | \`metrics.loss\`, descending then ascending |`,
    ].join("\n");
    const cpu = cpus();
    const facts = `${cpu.length} cores (${cpu[0]?.model ?? "unknown CPU"}), ${(totalmem() / 2 ** 30).toFixed(0)} GiB memory, chromium ${browser.version()} headless, SQLite store; seeding ${RUNS.toLocaleString("en")} runs through POST /api/ingest took ${seedS.toFixed(1)} s; p50 and max of ${REPS} repetitions.`;
    const section = `${BEGIN}\nMeasured by \`make bench-ui\` (\`node web/e2e/bench-runs.mjs\`) on ${commitStamp()}, ${new Date().toISOString().slice(0, 10)}: ${facts}\n\n${table}\n${END}`;
    console.log("\n" + table + "\n\n" + facts);
    if (!process.env.BENCH_NO_WRITE) writeDoc(section);
  } finally {
    await browser.close();
    await dash.stop();
    cleanup(dash.dir);
  }
}

/** "commit abc1234", with ", dirty" when tracked files have uncommitted changes (as internal/benchdoc.Commit). */
function commitStamp() {
  try {
    const head = execFileSync("git", ["rev-parse", "--short=7", "HEAD"], { cwd: ROOT }).toString().trim();
    const dirty = execFileSync("git", ["status", "--porcelain", "--untracked-files=no", "--", ".", ":(exclude)docs"], { cwd: ROOT }).toString().trim();
    return `commit ${head}${dirty ? ", dirty" : ""}`;
  } catch {
    return "an unknown commit";
  }
}

/** Replaces the text between the markers in docs/benchmarks.md (adds the section at the end when missing). */
function writeDoc(section) {
  const path = join(ROOT, "docs", "benchmarks.md");
  let doc = existsSync(path) ? readFileSync(path, "utf8") : "# Benchmarks\n";
  const a = doc.indexOf(BEGIN);
  const b = doc.indexOf(END);
  if (a >= 0 && b > a) doc = doc.slice(0, a) + section + doc.slice(b + END.length);
  else doc = doc.replace(/\s*$/, "\n\n") + `## Web UI: experiments table with 10,000 runs\n\n${section}\n`;
  writeFileSync(path, doc);
  console.log(`wrote ${path}`);
}

main().catch((e) => {
  console.error(`bench-ui: FAILED\n${e?.stack ?? e}`);
  process.exitCode = 1;
});
