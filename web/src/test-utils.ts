// Helpers shared by the Vitest files: a fake layout for virtualised lists
// (jsdom has none), JSON answers for a mocked fetch, and a run fixture.
import { afterAll, beforeAll } from "vitest";

const SIZES = { offsetHeight: 600, offsetWidth: 1200, clientHeight: 600, clientWidth: 1200 };

/** Call at the top level of a test file whose components measure themselves. */
export function withFakeLayout(sizes: Record<string, number> = SIZES): void {
  const saved: Record<string, PropertyDescriptor | undefined> = {};
  beforeAll(() => {
    for (const [k, v] of Object.entries(sizes)) {
      saved[k] = Object.getOwnPropertyDescriptor(HTMLElement.prototype, k);
      Object.defineProperty(HTMLElement.prototype, k, { configurable: true, get: () => v });
    }
  });
  afterAll(() => {
    for (const [k, d] of Object.entries(saved)) if (d) Object.defineProperty(HTMLElement.prototype, k, d);
  });
}

/** A JSON answer for a mocked fetch. */
export const json = (body: unknown, status = 200) => new Response(JSON.stringify(body), { status });

/** A finished run as the API lists it; params, and the loss summary's fields, can be overridden. */
export function testRun(i: number, over: { params?: Record<string, unknown>; loss?: Record<string, unknown> } = {}) {
  return {
    id: `r${i}`,
    experiment_id: "e1",
    experiment: "digits",
    name: `run-${i}`,
    status: "finished",
    created: "2026-11-22T07:00:00Z",
    updated: "2026-11-22T07:01:00Z",
    started: "2026-11-22T07:00:00Z",
    ended: "2026-11-22T07:01:00Z",
    params: { lr: 0.001 * i, optimizer: "adam", ...over.params },
    metrics: { loss: { last: 1 / i, last_step: 10, min: 0.1, max: 2, count: 10, ...over.loss } },
  };
}
