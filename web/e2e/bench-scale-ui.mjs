// The experiment page at issue #22's size (make bench-scale-ui): a real
// dashboard opened on a store that bench/expbench filled (BENCH_DIR, e.g.
// `go run ./bench/expbench -runs 1000000 -reps 0 -dir DIR`: one experiment,
// "sweep", of finished runs with params lr and optimizer, tag team and
// metrics m00..m19), the experiment page in Debian's chromium, and the times
// of what a user does: the first rows (a fresh browser, then with its cache),
// a sort by a metric column, a filter, a link to a name search; and the
// dashboard's resident memory. Prints a markdown table (p50 and max over a
// few repetitions). A figure, not a timed assertion: it fails only when the
// page breaks (no rows, page errors, a wrong row).
import { readFileSync, existsSync } from "node:fs";
import { cpus, totalmem } from "node:os";
import { join } from "node:path";
import { cleanup, launchBrowser, startDashboard } from "./harness.mjs";

const DIR = process.env.BENCH_DIR;
const REPS = Number(process.env.BENCH_REPS ?? 10);
const EXPERIMENT = process.env.BENCH_EXPERIMENT ?? "sweep";

const rowsSel = "table.runs tbody tr[data-index]";
const firstName = 'table.runs tbody tr[data-index="0"] a';
const p50 = (xs) => [...xs].sort((a, b) => a - b)[Math.floor((xs.length - 1) / 2)];
const worst = (xs) => Math.max(...xs);
const waitIn = (page, fn, arg, timeout = 120_000) => page.waitForFunction(fn, arg, { timeout, polling: "raf" });

/** The dashboard process's current and peak resident memory, MiB (Linux /proc). */
function memory(pid) {
  const status = readFileSync(`/proc/${pid}/status`, "utf8");
  const kb = (k) => Number((status.match(new RegExp(`^${k}:\\s+(\\d+)`, "m")) ?? [])[1] ?? NaN);
  return { rss: kb("VmRSS") / 1024, peak: kb("VmHWM") / 1024 };
}

async function main() {
  if (!DIR || !existsSync(join(DIR, "experiments.db"))) {
    throw new Error("set BENCH_DIR to a directory bench/expbench filled: go run ./bench/expbench -runs 1000000 -reps 0 -dir DIR");
  }
  // The store is the bench's directory; the harness's own directory keeps
  // the log and the checkpoints.
  const dash = await startDashboard({ env: { FW_EXPERIMENT_DIR: DIR } });
  const browser = await launchBrowser();
  const errors = [];
  const rows = [];
  try {
    const exp = await dash.api("GET", `/api/experiments/${EXPERIMENT}`);
    const url = `${dash.url}/experiments/${exp.id}`;
    console.log(`experiment ${exp.id}: ${exp.runs.toLocaleString("en")} runs`);
    const watch = (page) => page.on("pageerror", (e) => errors.push(String(e)));

    // First rows in a fresh browser context (nothing cached: the page's
    // scripts are fetched too), the first time right after the dashboard
    // started.
    const cold = [];
    for (let i = 0; i < Math.max(3, Math.ceil(REPS / 2)); i++) {
      const ctx = await browser.newContext({ viewport: { width: 1440, height: 900 } });
      const page = await ctx.newPage();
      watch(page);
      const t0 = Date.now();
      await page.goto(url);
      await page.waitForSelector(rowsSel, { timeout: 120_000 });
      cold.push(Date.now() - t0);
      await ctx.close();
    }
    rows.push(["first rows, a fresh browser (no cache; the first after the dashboard started included)", cold]);

    const ctx = await browser.newContext({ viewport: { width: 1440, height: 900 } });
    const page = await ctx.newPage();
    watch(page);
    await page.goto(url);
    await page.waitForSelector(rowsSel);
    const warm = [];
    for (let i = 0; i < REPS; i++) {
      const t0 = Date.now();
      await page.goto(url);
      await page.waitForSelector(rowsSel);
      warm.push(Date.now() - t0);
    }
    rows.push(["first rows, the browser's cache warm", warm]);

    // Sort by the first metric column shown: descending, then ascending;
    // each click answered when the first row is another run.
    const header = page.getByRole("button", { name: /^Sort by metric / }).first();
    const label = await header.getAttribute("aria-label");
    const sort = [];
    for (let i = 0; i < REPS; i++) {
      const before = await page.locator(firstName).first().textContent();
      const t0 = Date.now();
      await header.click();
      await waitIn(page, ([sel, prev]) => {
        const a = document.querySelector(sel);
        return a !== null && a.textContent !== prev;
      }, [firstName, before]);
      sort.push(Date.now() - t0);
    }
    rows.push([`${label.replace("Sort by ", "sort by a ")} column (click to the new first row)`, sort]);

    // A filter: two that alternate, answered when the first row changes.
    await page.goto(url);
    await page.waitForSelector(rowsSel);
    const box = page.getByRole("textbox", { name: "Filter", exact: true });
    const filter = [];
    for (let i = 0; i < REPS; i++) {
      const team = i % 2 ? "nlp" : "vision";
      const before = await page.locator(firstName).first().textContent();
      await box.fill(`params.lr > 0.05 and tags.team = '${team}'`);
      const t0 = Date.now();
      await box.press("Enter");
      await waitIn(page, ([sel, prev]) => {
        const a = document.querySelector(sel);
        return a !== null && a.textContent !== prev;
      }, [firstName, before]);
      filter.push(Date.now() - t0);
    }
    rows.push(["filter `params.lr > 0.05 and tags.team = '...'` (Enter to the new first row)", filter]);

    // A name search opened as a link: the oldest run, last in the default
    // order, found among them all.
    // (Generated names repeat at this size: the runs of that name, as the
    // API lists them.)
    const oldest = await dash.api("GET", `/api/runs/run0000000`);
    const same = await dash.api("GET", `/api/experiments/${exp.id}/runs?limit=1000&filter=${encodeURIComponent(`name ~ '${oldest.name}'`)}`);
    const want = same.runs.length;
    if (!same.runs.some((r) => r.id === "run0000000")) throw new Error(`the search for ${oldest.name} misses run0000000`);
    const search = [];
    for (let i = 0; i < REPS; i++) {
      const t0 = Date.now();
      await page.goto(`${url}?q=${encodeURIComponent(oldest.name)}`);
      await waitIn(page, ([sel, name, n]) => {
        const all = [...document.querySelectorAll(sel)];
        return all.length === n && all.every((tr) => tr.querySelector("a")?.textContent === name);
      }, [rowsSel, oldest.name, want]);
      search.push(Date.now() - t0);
    }
    rows.push([`a link to a name search matching ${want} run${want === 1 ? "" : "s"}, the oldest among them (page load to the rows)`, search]);

    if (errors.length) throw new Error(`page errors: ${errors.join("; ")}`);
    const mem = memory(dash.child.pid);
    const table = [
      "| step | p50 | max | repetitions |",
      "|---|---:|---:|---:|",
      ...rows.map(([what, xs]) => `| ${what} | ${Math.round(p50(xs))} ms | ${Math.round(worst(xs))} ms | ${xs.length} |`),
    ].join("\n");
    const cpu = cpus();
    console.log(`\n${table}\n\nexperiment of ${exp.runs.toLocaleString("en")} runs; the dashboard's RSS at the end ${mem.rss.toFixed(0)} MiB, peak ${mem.peak.toFixed(0)} MiB; ${cpu.length} cores (${cpu[0]?.model ?? "unknown CPU"}), ${(totalmem() / 2 ** 30).toFixed(0)} GiB memory, chromium ${browser.version()} headless, SQLite store`);
  } finally {
    await browser.close();
    await dash.stop();
    cleanup(dash.dir);
  }
}

main().catch((e) => {
  console.error(`bench-scale-ui: FAILED\n${e?.stack ?? e}`);
  process.exitCode = 1;
});
