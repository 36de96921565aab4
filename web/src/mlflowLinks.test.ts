import { describe, expect, it } from "vitest";
import { mlflowLink } from "./mlflowLinks";

describe("mlflowLink", () => {
  it("maps MLflow's run and experiment links to fw's pages", () => {
    expect(mlflowLink("#/experiments/06h1728sdkr4jshw/runs/048c81dc0199468bbafea395958756f0")).toBe("/runs/048c81dc0199468bbafea395958756f0");
    expect(mlflowLink("#/experiments/06h1728sdkr4jshw")).toBe("/experiments/06h1728sdkr4jshw");
    expect(mlflowLink("#/experiments/0")).toBe("/experiments/Default");
    expect(mlflowLink("#/experiments/0/runs/abc/")).toBe("/runs/abc");
    expect(mlflowLink("#/experiments/1?searchFilter=x")).toBe("/experiments/1");
  });
  it("leaves other hashes alone", () => {
    for (const h of ["", "#", "#main", "#/models/m", "#/experiments/", "#/experiments/1/runs/", "#/experiments/1/artifacts/x"]) {
      expect(mlflowLink(h)).toBeNull();
    }
  });
});
