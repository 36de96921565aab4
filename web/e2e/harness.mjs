// Test harness for the browser tests: a real `fw dashboard` on a free
// loopback port with a temporary experiment and checkpoint directory, and
// Debian's chromium driven by playwright-core (Playwright's own browser
// download cannot work offline). Screenshots go to build/screenshots/.
import { spawn } from "node:child_process";
import { mkdtempSync, mkdirSync, rmSync, existsSync, createWriteStream } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve, dirname } from "node:path";
import { createServer } from "node:net";
import { fileURLToPath } from "node:url";
import { chromium } from "playwright-core";

export const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), "../..");
export const SCREENSHOTS = join(ROOT, "build", "screenshots");

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
  dir ??= mkdtempSync(join(tmpdir(), "fw-e2e-"));
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
  });
  child.stdout.pipe(log);
  child.stderr.pipe(log);
  let exited = null;
  child.on("exit", (code, sig) => (exited = { code, sig }));
  const url = `http://127.0.0.1:${port}`;
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
    child.kill("SIGTERM");
    await until("the dashboard to exit", () => exited, 40_000);
  }
  return { url, dir, port, api, stop, child };
}

/** Launches Debian's chromium headless (FW_CHROMIUM overrides the path). */
export async function launchBrowser() {
  const executablePath = process.env.FW_CHROMIUM ?? "/usr/bin/chromium";
  if (!existsSync(executablePath)) {
    throw new Error(`${executablePath} missing: install Debian's chromium (scripts/ci-deps.sh does, as root) or set FW_CHROMIUM`);
  }
  return chromium.launch({
    executablePath,
    headless: true,
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-dev-shm-usage"],
  });
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
    console.log(`${name}: ${steps.length} steps passed in ${((Date.now() - started) / 1000).toFixed(1)} s`);
  } catch (e) {
    console.error(`${name}: FAILED\n${e?.message ?? e}`);
    process.exitCode = 1;
  }
}
