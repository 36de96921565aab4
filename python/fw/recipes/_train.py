"""The training loop shared by the built-in recipes: minibatch SGD (Adam) with per-step and per-epoch
metrics, progress with totals, a checkpoint each epoch, a final checkpoint on SIGTERM, and resume/fork
from a checkpoint (weights and step; the optimizer starts fresh)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any

COMMON_PARAMS: list[dict[str, Any]] = [
    {
        "name": "epochs",
        "type": "int",
        "default": 5,
        "min": 1,
        "max": 200,
        "description": "passes over the training set",
    },
    {
        "name": "batch_size",
        "type": "int",
        "default": 64,
        "min": 1,
        "max": 1024,
        "description": "examples per step",
    },
    {
        "name": "lr",
        "type": "float",
        "default": 0.001,
        "min": 1e-6,
        "max": 1.0,
        "description": "Adam learning rate",
    },
    {
        "name": "seed",
        "type": "int",
        "default": 0,
        "min": 0,
        "max": 2**31 - 1,
        "description": "random seed (split and init)",
    },
    {
        "name": "step_delay",
        "type": "float",
        "default": 0.0,
        "min": 0.0,
        "max": 5.0,
        "description": "seconds to sleep after each step (to watch a short run; 0 for full speed)",
    },
]


def train(
    name: str,
    args: argparse.Namespace,
    data: Callable[[int], tuple[Any, Any, Any, Any]],
    build: Callable[[dict[str, Any]], Any],
    task: str,
    meta: dict[str, Any] | None = None,
) -> int:
    """Run a recipe: ``data(seed)`` -> (x_train, y_train, x_val, y_val) tensors, ``build(params)`` -> model;
    ``task`` is "classify" (cross-entropy, accuracy) or "regress" (MSE); ``meta`` (labels,
    preprocessing, ...) is saved in every checkpoint for the exporter."""
    import time

    import torch

    from fw import checkpoint as ckpt
    from fw.export import DEFAULT_CALIBRATION_ROWS
    from fw.recipes import start_run

    p = args.params
    torch.manual_seed(p["seed"])
    torch.set_num_threads(max(1, min(2, torch.get_num_threads())))
    xtr, ytr, xva, yva = data(p["seed"])
    model = build(p)
    start_step = 0
    if args.resume_from:
        c = ckpt.load(args.resume_from)
        if type(c.model) is not type(model):
            print(
                f"{name}: {args.resume_from} holds a {c.model_class}, not this recipe's model",
                file=sys.stderr,
            )
            return 2
        model = c.model
        start_step = int(c.meta.get("step") or 0)
    model.train()
    opt = torch.optim.Adam(model.parameters(), lr=p["lr"])
    loss_fn = torch.nn.CrossEntropyLoss() if task == "classify" else torch.nn.MSELoss()
    bs = p["batch_size"]
    per_epoch = (len(xtr) + bs - 1) // bs
    total = per_epoch * p["epochs"]
    example = xtr[:1].clone()
    # Training rows kept in every checkpoint, so the dashboard can export int8 ONNX with static
    # quantization calibrated on the recipe's own data.
    calibration = xtr[:DEFAULT_CALIBRATION_ROWS].clone()
    state = {"step": start_step}

    with start_run(args, name) as run:
        print(
            f"{name}: run {run.id}, {len(xtr)} train / {len(xva)} val examples, {total} steps, from step {start_step}"
        )
        # A sample of the training rows: the drift reference of this run's deployments (the model
        # page's Traffic, "Against the training data"), named as the exported model names its input.
        run.log_reference(xtr, name=(getattr(model, "fw_input_names", None) or ("input",))[0])

        @run.on_stop
        def _final() -> None:
            path = run.checkpoint(
                model,
                state["step"],
                epoch=state["step"] / per_epoch,
                example_input=example,
                meta=meta,
                calibration_input=calibration,
            )
            print(f"{name}: stopped at step {state['step']}; final checkpoint {path.name}")

        gen = torch.Generator().manual_seed(p["seed"] + start_step)
        run.progress(start_step, total, epoch=start_step / per_epoch, epochs=p["epochs"])
        while state["step"] < total:
            epoch = state["step"] // per_epoch
            perm = torch.randperm(len(xtr), generator=gen)
            for b in range(state["step"] - epoch * per_epoch, per_epoch):
                idx = perm[b * bs : (b + 1) * bs]
                opt.zero_grad()
                loss = loss_fn(model(xtr[idx]), ytr[idx])
                loss.backward()
                opt.step()
                state["step"] += 1
                run.log({"train/loss": loss.item()}, step=state["step"])
                run.progress(state["step"], total, epoch=state["step"] / per_epoch, epochs=p["epochs"])
                if p["step_delay"]:
                    time.sleep(p["step_delay"])
            model.eval()
            with torch.no_grad():
                out = model(xva)
                metrics = {"val/loss": loss_fn(out, yva).item()}
                if task == "classify":
                    metrics["val/accuracy"] = (out.argmax(1) == yva).float().mean().item()
            model.train()
            run.log(metrics, step=state["step"])
            run.checkpoint(
                model,
                state["step"],
                metrics=metrics,
                epoch=epoch + 1,
                example_input=example,
                meta=meta,
                calibration_input=calibration,
            )
            print(
                f"{name}: epoch {epoch + 1}/{p['epochs']} "
                + " ".join(f"{k}={v:.4f}" for k, v in metrics.items())
            )
    return 0
