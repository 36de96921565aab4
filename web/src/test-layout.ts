// Test helper: jsdom has no layout, so virtualised lists would render no
// rows. withFakeLayout gives every element a fixed size for one test file.
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
