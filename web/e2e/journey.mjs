// The end-to-end journey of the web UI in a real browser against a real
// dashboard (make test-e2e). Screenshots of each page: build/screenshots/.
import { cleanup, journey, launchBrowser, screenshot, startDashboard } from "./harness.mjs";

await journey("web UI journey", async (step) => {
  const dash = await step("start the dashboard", () => startDashboard());
  const browser = await step("launch chromium", () => launchBrowser());
  try {
    const page = await browser.newPage({ viewport: { width: 1440, height: 900 } });
    const errors = [];
    page.on("pageerror", (e) => errors.push(String(e)));
    await step("open Home", async () => {
      await page.goto(dash.url + "/");
      await page.getByRole("navigation", { name: "Main" }).waitFor();
      await screenshot(page, "01-home");
    });
    if (errors.length) throw new Error(`page errors: ${errors.join("; ")}`);
  } finally {
    await browser.close();
    await dash.stop();
    cleanup(dash.dir);
  }
});
