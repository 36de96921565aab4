import { defineConfig } from "vitest/config";
import react from "@vitejs/plugin-react";

// The build goes into the Go package that embeds it (dashboard/webui/dist);
// the Makefile clears the old build first (dist/README.md is committed).
// `npm run dev` proxies the API to a dashboard on 127.0.0.1:8080.
const dashboard = process.env.FW_DASHBOARD_URL ?? "http://127.0.0.1:8080";

export default defineConfig({
  plugins: [react()],
  build: {
    outDir: "../dashboard/webui/dist",
    emptyOutDir: false,
    sourcemap: false,
    chunkSizeWarningLimit: 1024,
  },
  server: {
    host: "127.0.0.1",
    proxy: {
      "/api/training/stream": { target: dashboard.replace(/^http/, "ws"), ws: true },
      "/api": dashboard,
      "/health": dashboard,
      "/openapi.json": dashboard,
      "/docs": dashboard,
    },
  },
  test: {
    environment: "jsdom",
    include: ["src/**/*.test.{ts,tsx}"],
    setupFiles: ["src/test-setup.ts"],
  },
});
