// URL state: two updates in a row, the second through a setter captured
// before the first re-rendered (a debounce timer, an effect), keep both.
import { act, render } from "@testing-library/react";
import { BrowserRouter } from "react-router-dom";
import { describe, expect, it } from "vitest";
import { useQueryParam, useSetQueryParams } from "./hooks";

describe("useSetQueryParams", () => {
  it("starts from the URL as it is now, not as it was rendered", () => {
    window.history.replaceState(null, "", "/runs?cols=a");
    const setters: ((u: Record<string, string | null>) => void)[] = [];
    let sel = "";
    function Probe() {
      setters.push(useSetQueryParams());
      sel = useQueryParam("sel")[0];
      return null;
    }
    render(
      <BrowserRouter>
        <Probe />
      </BrowserRouter>,
    );
    const stale = setters[0];
    act(() => stale({ sel: "r1,r2" }));
    act(() => stale({ q: "resnet" })); // captured before the first update rendered
    const q = new URLSearchParams(window.location.search);
    expect(q.get("sel")).toBe("r1,r2");
    expect(q.get("q")).toBe("resnet");
    expect(q.get("cols")).toBe("a");
    expect(sel).toBe("r1,r2");
    act(() => stale({ sel: null }));
    expect(new URLSearchParams(window.location.search).has("sel")).toBe(false);
  });
});
