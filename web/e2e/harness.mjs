// Test harness for the browser tests: a real `fw dashboard` on a free
// loopback port with a temporary experiment and checkpoint directory, and
// Debian's chromium driven by playwright-core (Playwright's own browser
// download cannot work offline). Screenshots go to build/screenshots/.
//
// Nothing outlives the harness: every process it starts (the dashboard in its
// own process group, chromium, and what they start: training jobs, fw serve
// deployments, which run in their own sessions) inherits FW_E2E_RUN, and on
// every way out (normal exit, SIGINT/SIGTERM/SIGHUP, an uncaught exception or
// unhandled rejection) the harness deletes the dashboards' deployments, stops
// the dashboards' process groups and then kills whatever still carries
// FW_E2E_RUN. FW_E2E_FAIL_AFTER_MS=<n> throws from a timer after n ms, to check
// that.
import { spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdtempSync, mkdirSync, rmSync, existsSync, createWriteStream, readdirSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve, dirname } from "node:path";
import { createServer } from "node:net";
import { fileURLToPath } from "node:url";
import { chromium } from "playwright-core";

export const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), "../..");
export const SCREENSHOTS = join(ROOT, "build", "screenshots");

/** Marks every process this run starts (inherited through the environment). */
const RUN_MARK = `FW_E2E_RUN=${process.pid}.${randomBytes(6).toString("hex")}`;
process.env.FW_E2E_RUN = RUN_MARK.slice("FW_E2E_RUN=".length);

/** What is alive: dashboards ({child, url}), browsers, temporary directories. */
const live = { dashboards: new Set(), browsers: new Set(), dirs: new Set() };

/** The PIDs (not this process) whose environment carries RUN_MARK; none off Linux. */
function markedPids() {
  let entries;
  try {
    entries = readdirSync("/proc");
  } catch {
    return [];
  }
  const out = [];
  for (const e of entries) {
    const pid = Number(e);
    if (!Number.isInteger(pid) || pid === process.pid) continue;
    try {
      if (readFileSync(`/proc/${pid}/environ`, "latin1").split("\0").includes(RUN_MARK)) out.push(pid);
    } catch {
      /* ended meanwhile, or not ours */
    }
  }
  return out;
}

function signalAll(pids, sig) {
  for (const pid of pids) {
    try {
      process.kill(pid, sig);
    } catch {
      /* already gone */
    }
  }
}

/** Synchronous last resort (process "exit"): SIGKILL everything this run started. */
function killAllNow() {
  for (const d of live.dashboards) {
    try {
      process.kill(-d.child.pid, "SIGKILL");
    } catch {
      /* gone */
    }
  }
  signalAll(markedPids(), "SIGKILL");
  if (!process.env.FW_KEEP_E2E) for (const dir of live.dirs) rmSync(dir, { recursive: true, force: true });
}

let stopping = null;
/**
 * Stops everything this run started, gracefully where it can: deletes each
 * live dashboard's deployments, closes the browsers, SIGTERMs the dashboards'
 * process groups (their training jobs stop with them), then SIGKILLs whatever
 * still carries RUN_MARK. Bounded: about 20 s at most.
 */
export function stopEverything() {
  stopping ??= (async () => {
    const within = (ms, p) => Promise.race([p.catch(() => {}), new Promise((r) => setTimeout(r, ms))]);
    await within(
      5_000,
      Promise.all(
        [...live.dashboards].map(async (d) => {
          const r = await fetch(`${d.url}/api/deployments`, { signal: AbortSignal.timeout(2_000) });
          for (const dep of (await r.json()).deployments ?? []) {
            await fetch(`${d.url}/api/deployments/${encodeURIComponent(dep.id)}`, { method: "DELETE", signal: AbortSignal.timeout(2_000) });
          }
        }),
      ),
    );
    await within(5_000, Promise.all([...live.browsers].map((b) => b.close())));
    const exits = [...live.dashboards].map((d) => {
      try {
        process.kill(-d.child.pid, "SIGTERM");
      } catch {
        /* gone */
      }
      return d.exited;
    });
    await within(10_000, Promise.all(exits));
    killAllNow();
  })();
  return stopping;
}

process.on("exit", killAllNow);
for (const [sig, code] of [["SIGINT", 130], ["SIGTERM", 143], ["SIGHUP", 129]]) {
  process.once(sig, () => {
    console.error(`\n${sig}: stopping the dashboards, deployments and browsers this run started`);
    stopEverything().finally(() => process.exit(code));
  });
}
for (const ev of ["uncaughtException", "unhandledRejection"]) {
  process.on(ev, (e) => {
    console.error(`${ev}: ${e?.stack ?? e}`);
    stopEverything().finally(() => process.exit(1));
  });
}
if (process.env.FW_E2E_FAIL_AFTER_MS) {
  setTimeout(() => {
    throw new Error(`FW_E2E_FAIL_AFTER_MS=${process.env.FW_E2E_FAIL_AFTER_MS}: a simulated failure`);
  }, Number(process.env.FW_E2E_FAIL_AFTER_MS)).unref();
}

/** A free TCP port on 127.0.0.1. */
export function freePort() {
  return new Promise((ok, fail) => {
    const s = createServer();
    s.on("error", fail);
    s.listen(0, "127.0.0.1", () => {
      const { port } = s.address();
      s.close(() => ok(port));
    });
  });
}

/** Polls fn until it returns a truthy value or timeoutMs passes. */
export async function until(what, fn, timeoutMs = 60_000, everyMs = 200) {
  const end = Date.now() + timeoutMs;
  let last;
  while (Date.now() < end) {
    try {
      const v = await fn();
      if (v) return v;
    } catch (e) {
      last = e;
    }
    await new Promise((r) => setTimeout(r, everyMs));
  }
  throw new Error(`timed out waiting for ${what}${last ? `: ${last.message}` : ""}`);
}

/**
 * Starts bin/fw dashboard (FW_BIN) on a temporary directory (or dir, to
 * restart on the same data; port to keep the URL). Returns {url, dir, port,
 * api(method, path, body), stop()}. Extra env and args may be given; the
 * dashboard's output is appended to <dir>/dashboard.log.
 */
export async function startDashboard({ env = {}, args = [], dir, port } = {}) {
  const bin = process.env.FW_BIN ?? join(ROOT, "bin", "fw");
  if (!existsSync(bin)) throw new Error(`${bin} missing: run make build`);
  if (!dir) {
    dir = mkdtempSync(join(tmpdir(), "fw-e2e-"));
    live.dirs.add(dir);
  }
  port ??= await freePort();
  const log = createWriteStream(join(dir, "dashboard.log"), { flags: "a" });
  const child = spawn(bin, ["dashboard", "--host", "127.0.0.1", "--port", String(port), ...args], {
    env: {
      ...process.env,
      FW_EXPERIMENT_DIR: join(dir, "experiments"),
      FW_CHECKPOINT_DIR: join(dir, "checkpoints"),
      FW_DASHBOARD_STOP_GRACE: "5s",
      ...env,
    },
    stdio: ["ignore", "pipe", "pipe"],
    cwd: ROOT,
    detached: true, // its own process group: stop() and the exit paths signal the group
  });
  child.stdout.pipe(log);
  child.stderr.pipe(log);
  let exited = null;
  const url = `http://127.0.0.1:${port}`;
  const entry = { child, url };
  entry.exited = new Promise((ok) =>
    child.on("exit", (code, sig) => {
      exited = { code, sig };
      live.dashboards.delete(entry);
      ok();
    }),
  );
  live.dashboards.add(entry);
  await until("the dashboard's /health", async () => {
    if (exited) throw new Error(`dashboard exited ${JSON.stringify(exited)}; see ${join(dir, "dashboard.log")}`);
    const r = await fetch(`${url}/health`);
    return r.ok;
  });
  async function api(method, path, body) {
    const r = await fetch(url + path, {
      method,
      headers: body === undefined ? {} : { "Content-Type": "application/json" },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const text = await r.text();
    const json = text ? JSON.parse(text) : null;
    if (!r.ok) throw new Error(`${method} ${path}: ${r.status} ${text}`);
    return json;
  }
  async function stop() {
    if (exited) return;
    try {
      process.kill(-child.pid, "SIGTERM");
    } catch {
      /* exited meanwhile */
    }
    await until("the dashboard to exit", () => exited, 40_000);
  }
  return { url, dir, port, api, stop, child };
}

/** Launches Debian's chromium headless (FW_CHROMIUM overrides the path). */
export async function launchBrowser() {
  const executablePath = process.env.FW_CHROMIUM ?? "/usr/bin/chromium";
  if (!existsSync(executablePath)) {
    throw new Error(`${executablePath} missing: install Debian's chromium (\`make sysdeps\` does, as root) or set FW_CHROMIUM`);
  }
  // The harness's own signal handlers close it (after the deployments are
  // deleted); Playwright's would exit first.
  const browser = await chromium.launch({
    executablePath,
    headless: true,
    handleSIGINT: false,
    handleSIGTERM: false,
    handleSIGHUP: false,
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-dev-shm-usage"],
  });
  live.browsers.add(browser);
  browser.on("disconnected", () => live.browsers.delete(browser));
  return browser;
}

/** Saves a full-page screenshot as build/screenshots/<name>.png. */
export async function screenshot(page, name) {
  mkdirSync(SCREENSHOTS, { recursive: true });
  const path = join(SCREENSHOTS, `${name}.png`);
  await page.screenshot({ path, fullPage: true });
  return path;
}

/** Removes a temporary directory unless FW_KEEP_E2E is set. */
export function cleanup(dir) {
  live.dirs.delete(dir);
  if (!process.env.FW_KEEP_E2E) rmSync(dir, { recursive: true, force: true });
}

/** A tiny test runner: named steps, a clear failure, exit code. */
export async function journey(name, fn) {
  const started = Date.now();
  const steps = [];
  const step = async (title, f) => {
    const t0 = Date.now();
    process.stdout.write(`    ${title} ... `);
    try {
      const v = await f();
      const ms = Date.now() - t0;
      steps.push({ title, ms });
      process.stdout.write(`ok (${ms} ms)\n`);
      return v;
    } catch (e) {
      process.stdout.write("FAILED\n");
      throw new Error(`${title}: ${e?.stack ?? e}`);
    }
  };
  try {
    await fn(step);
    // What the journey started it must also have stopped (deployments deleted,
    // dashboards and browsers closed); give exiting processes a moment.
    const left = await until("nothing started by the journey to be left running", () => markedPids().length === 0, 10_000).catch(() =>
      markedPids().map((pid) => `${pid} ${readProc(pid, "cmdline").replaceAll("\0", " ")}`),
    );
    if (Array.isArray(left)) throw new Error(`left running after the journey:\n  ${left.join("\n  ")}`);
    console.log(`${name}: ${steps.length} steps passed in ${((Date.now() - started) / 1000).toFixed(1)} s`);
  } catch (e) {
    console.error(`${name}: FAILED\n${e?.message ?? e}`);
    process.exitCode = 1;
  } finally {
    // A step that failed before the journey's own finally (say, chromium
    // missing right after the dashboard started) leaves them to us.
    await stopEverything();
  }
}

function readProc(pid, file) {
  try {
    return readFileSync(`/proc/${pid}/${file}`, "latin1");
  } catch {
    return "";
  }
}
