// ParamsForm: inputs from a schema, validation messages, typed values.
import { afterEach, describe, expect, it, vi } from "vitest";
import { cleanup, fireEvent, render, screen } from "@testing-library/react";
import { useState } from "react";
import { ParamsForm, paramDefaults, validateParams } from "./ParamsForm";
import type { RecipeParam } from "../api/types";

const schema: RecipeParam[] = [
  { name: "epochs", type: "int", default: 5, min: 1, max: 200, description: "passes over the training set" },
  { name: "lr", type: "float", default: 0.001, min: 1e-6, max: 1, description: "Adam learning rate" },
  { name: "optimizer", type: "str", default: "adam", choices: ["adam", "sgd"], description: "the optimizer" },
  { name: "augment", type: "bool", default: false, description: "random shifts" },
  { name: "tag", type: "str", default: "", description: "free text" },
];

/** ParamsForm with its values in state, reporting every change. */
function Harness({ onValues }: { onValues: (v: Record<string, unknown>) => void }) {
  const [values, setValues] = useState(paramDefaults(schema));
  return (
    <ParamsForm
      params={schema}
      values={values}
      onChange={(v) => {
        setValues(v);
        onValues(v);
      }}
    />
  );
}

afterEach(cleanup);

describe("ParamsForm", () => {
  it("renders one labelled input per parameter with its kind and hint", () => {
    render(<ParamsForm params={schema} values={paramDefaults(schema)} onChange={() => {}} />);
    const epochs = screen.getByLabelText(/epochs/) as HTMLInputElement;
    expect(epochs.type).toBe("number");
    expect(epochs.min).toBe("1");
    expect(epochs.max).toBe("200");
    expect(epochs.step).toBe("1");
    expect(epochs.value).toBe("5");
    expect((screen.getByLabelText(/^lr/) as HTMLInputElement).step).toBe("any");
    expect(screen.getByLabelText(/optimizer/).tagName).toBe("SELECT");
    expect((screen.getByLabelText(/augment/) as HTMLInputElement).type).toBe("checkbox");
    expect((screen.getByLabelText(/tag/) as HTMLInputElement).type).toBe("text");
    expect(screen.getByText(/passes over the training set/)).toBeTruthy();
    expect(screen.getByLabelText(/epochs/).getAttribute("aria-describedby")).toBeTruthy();
  });

  it("sends numbers as numbers, booleans as booleans and choices as their values", () => {
    const onValues = vi.fn();
    render(<Harness onValues={onValues} />);
    fireEvent.change(screen.getByLabelText(/epochs/), { target: { value: "12" } });
    expect(onValues).toHaveBeenLastCalledWith(expect.objectContaining({ epochs: 12 }));
    expect(typeof onValues.mock.lastCall![0].epochs).toBe("number");
    fireEvent.change(screen.getByLabelText(/^lr/), { target: { value: "0.05" } });
    expect(onValues.mock.lastCall![0].lr).toBe(0.05);
    fireEvent.click(screen.getByLabelText(/augment/));
    expect(onValues.mock.lastCall![0].augment).toBe(true);
    fireEvent.change(screen.getByLabelText(/optimizer/), { target: { value: "1" } });
    expect(onValues.mock.lastCall![0].optimizer).toBe("sgd");
    fireEvent.change(screen.getByLabelText(/tag/), { target: { value: "x" } });
    expect(onValues.mock.lastCall![0]).toEqual({ epochs: 12, lr: 0.05, optimizer: "sgd", augment: true, tag: "x" });
  });

  it("shows validation messages next to the field", () => {
    render(<Harness onValues={() => {}} />);
    fireEvent.change(screen.getByLabelText(/epochs/), { target: { value: "500" } });
    expect(screen.getByRole("alert").textContent).toMatch(/above the maximum 200/i);
    fireEvent.change(screen.getByLabelText(/epochs/), { target: { value: "2.5" } });
    expect(screen.getByRole("alert").textContent).toMatch(/not an integer/i);
    fireEvent.change(screen.getByLabelText(/epochs/), { target: { value: "0" } });
    expect(screen.getByRole("alert").textContent).toMatch(/below the minimum 1/i);
    expect(screen.getByLabelText(/epochs/).getAttribute("aria-invalid")).toBe("true");
    fireEvent.change(screen.getByLabelText(/epochs/), { target: { value: "3" } });
    expect(screen.queryByRole("alert")).toBeNull();
  });
});

describe("validateParams", () => {
  it("returns one error per bad field", () => {
    const errors = validateParams(schema, { epochs: 1.5, lr: 2, optimizer: "rmsprop", augment: "yes", tag: 3 });
    expect(Object.keys(errors).sort()).toEqual(["augment", "epochs", "lr", "optimizer", "tag"]);
    expect(errors.epochs).toMatch(/integer/);
    expect(errors.lr).toMatch(/maximum 1/);
    expect(errors.optimizer).toMatch(/adam, sgd/);
    expect(validateParams(schema, paramDefaults(schema))).toEqual({});
    expect(validateParams(schema, { epochs: "" }).epochs).toMatch(/Required/);
    expect(validateParams(schema, {})).toEqual({});
  });
});
