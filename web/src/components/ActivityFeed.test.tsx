// The activity feed lists the API's events with links to runs and models.
import { afterEach, describe, expect, it, vi } from "vitest";
import { cleanup, render, screen } from "@testing-library/react";
import { MemoryRouter } from "react-router-dom";
import { ActivityFeed } from "./ActivityFeed";

afterEach(() => {
  cleanup();
  vi.unstubAllGlobals();
});

describe("ActivityFeed", () => {
  it("links run events to the run and model events to the model", async () => {
    const now = new Date().toISOString();
    vi.stubGlobal(
      "fetch",
      vi.fn(async () =>
        new Response(
          JSON.stringify({
            events: [
              { time: now, kind: "deployed", message: "Deployed digits_cnn version 2 at http://127.0.0.1:8000", model: "digits_cnn", version: 2 },
              { time: now, kind: "run_failed", message: "Run r1 failed", run_id: "r1", experiment: "digits" },
            ],
          }),
          { status: 200 },
        ),
      ),
    );
    render(
      <MemoryRouter>
        <ActivityFeed />
      </MemoryRouter>,
    );
    const dep = await screen.findByRole("link", { name: /Deployed digits_cnn/ });
    expect(dep.getAttribute("href")).toBe("/models/digits_cnn");
    expect(screen.getByRole("link", { name: "Run r1 failed" }).getAttribute("href")).toBe("/runs/r1");
    expect(screen.getAllByRole("listitem")).toHaveLength(2);
  });

  it("says what to do when there is nothing yet", async () => {
    vi.stubGlobal("fetch", vi.fn(async () => new Response(JSON.stringify({ events: null }), { status: 200 })));
    render(
      <MemoryRouter>
        <ActivityFeed />
      </MemoryRouter>,
    );
    expect(await screen.findByText(/Nothing yet/)).toBeTruthy();
  });
});
