from __future__ import annotations

import json
import subprocess
import sys

import pytest

from fw import checkpoint
from fw.recipes import RecipeError, load_registry, validate


def test_registry_lists_builtins_with_schema() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "fw.recipes", "--list"], capture_output=True, text=True, check=True
    )
    reg = {r["name"]: r for r in json.loads(out.stdout)["recipes"]}
    assert {"digits_mlp", "digits_cnn", "diabetes_mlp"} <= set(reg)
    epochs = next(p for p in reg["digits_mlp"]["params"] if p["name"] == "epochs")
    assert epochs == {**epochs, "type": "int", "default": 5, "min": 1}
    assert reg["digits_mlp"]["module"] == "fw.recipes.digits_mlp"


def test_user_recipes_file(tmp_path) -> None:
    f = tmp_path / "recipes.toml"
    f.write_text(
        '[recipes.mine]\nmodule = "mypkg.train"\ndescription = "d"\n'
        '[[recipes.mine.params]]\nname = "opt"\ntype = "str"\ndefault = "adam"\nchoices = ["adam", "sgd"]\n'
    )
    reg = load_registry(f)
    assert reg["mine"]["params"][0]["choices"] == ["adam", "sgd"]
    f.write_text('[recipes.digits_mlp]\nmodule = "x"\n')
    with pytest.raises(RecipeError, match="built-in"):
        load_registry(f)
    f.write_text('[recipes.bad]\nmodule = "x; rm -rf /"\n')
    with pytest.raises(RecipeError, match="module"):
        load_registry(f)


def test_user_recipes_yaml(tmp_path) -> None:
    f = tmp_path / "recipes.yaml"
    f.write_text(
        "recipes:\n"
        "  mine:\n"
        "    module: mypkg.train\n"
        "    description: d\n"
        "    params:\n"
        "      - {name: epochs, type: int, default: 5, min: 1, max: 100, description: passes}\n"
    )
    reg = load_registry(f)
    assert reg["mine"]["module"] == "mypkg.train" and reg["mine"]["params"][0]["max"] == 100
    # safe_load: no Python objects from a recipes file
    f.write_text("recipes: !!python/object/apply:os.system ['true']\n")
    with pytest.raises(RecipeError, match="recipes file"):
        load_registry(f)
    f.write_text("- just\n- a list\n")
    with pytest.raises(RecipeError, match="top-level 'recipes'"):
        load_registry(f)


def test_validate() -> None:
    schema = load_registry()["digits_mlp"]["params"]
    got = validate(schema, {"epochs": 2, "lr": 1})
    assert got["epochs"] == 2 and got["lr"] == 1.0 and got["hidden"] == 128
    for bad, msg in [
        ({"epochs": 0}, "minimum"),
        ({"epochs": 1.5}, "integer"),
        ({"lr": "x"}, "number"),
        ({"nope": 1}, "unknown"),
    ]:
        with pytest.raises(RecipeError, match=msg):
            validate(schema, bad)


@pytest.mark.parametrize("name", ["digits_mlp", "digits_cnn", "diabetes_mlp"])
def test_recipe_runs_offline_and_checkpoints(name, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("FW_TRACKING_URI", "http://127.0.0.1:9")  # nothing listens: events are spooled
    monkeypatch.setenv("FW_EXPERIMENT_DIR", str(tmp_path / "exp"))
    monkeypatch.setenv("FW_CHECKPOINT_DIR", str(tmp_path / "ckpt"))
    monkeypatch.setenv("FW_SYSTEM_INTERVAL", "0")
    params = json.dumps({"epochs": 1, "batch_size": 128})
    cmd = [
        sys.executable,
        "-m",
        f"fw.recipes.{name}",
        "--run-id",
        "r1",
        "--experiment",
        "t",
        "--params",
        params,
    ]
    subprocess.run(cmd, check=True, capture_output=True, timeout=120)
    (ck,) = sorted((tmp_path / "ckpt" / "r1").glob("step-*.ckpt.pt"))
    c = checkpoint.load(ck)
    assert c.meta["run_id"] == "r1" and c.meta["step"] > 0
    if name.startswith("digits"):
        # what the exporter embeds: the classes and how an uploaded image becomes the input
        assert c.meta["labels"] == [str(i) for i in range(10)]
        assert c.meta["preprocessing"]["image"]["height"] == 8
        assert c.meta["task"] == "classification"
    spooled = [
        json.loads(x)
        for f in (tmp_path / "exp" / "spool").glob("r1-*.jsonl")
        for x in f.read_text().splitlines()
    ]
    types = {e["type"] for e in spooled}
    assert {"run_start", "metrics", "progress", "checkpoint", "run_end"} <= types
    assert spooled[-1]["status"] == "finished"
    # a sample of the training rows, the drift reference of the run's deployments
    assert any(e["type"] == "artifact" and e["path"] == "fw-reference.jsonl" for e in spooled)
    ref = (tmp_path / "exp" / "artifacts" / "r1" / "fw-reference.jsonl").read_text().splitlines()
    assert 0 < len(ref) <= 1000 and json.loads(ref[0])["inputs"][0]["name"] == "input"
    # resume: continues from the checkpoint's step
    step = c.meta["step"]
    params = json.dumps({"epochs": 2, "batch_size": 128})
    cmd = [
        sys.executable,
        "-m",
        f"fw.recipes.{name}",
        "--run-id",
        "r2",
        "--experiment",
        "t",
        "--params",
        params,
    ]
    subprocess.run([*cmd, "--resume-from", str(ck)], check=True, capture_output=True, timeout=120)
    (ck2,) = sorted((tmp_path / "ckpt" / "r2").glob("step-*.ckpt.pt"))
    assert checkpoint.load(ck2).meta["step"] == 2 * step


def test_sigterm_saves_final_checkpoint(tmp_path, monkeypatch) -> None:
    import signal
    import time

    monkeypatch.setenv("FW_TRACKING_URI", "http://127.0.0.1:9")
    monkeypatch.setenv("FW_EXPERIMENT_DIR", str(tmp_path / "exp"))
    monkeypatch.setenv("FW_CHECKPOINT_DIR", str(tmp_path / "ckpt"))
    params = json.dumps({"epochs": 100, "batch_size": 256, "hidden": 8, "step_delay": 0.05})
    p = subprocess.Popen(
        [sys.executable, "-m", "fw.recipes.digits_mlp", "--run-id", "r3", "--params", params],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert "train /" in p.stdout.readline()
    time.sleep(0.5)
    p.send_signal(signal.SIGTERM)
    out, _ = p.communicate(timeout=60)
    assert p.returncode == 128 + signal.SIGTERM and "final checkpoint" in out
    ends = [
        json.loads(x)
        for f in (tmp_path / "exp" / "spool").glob("r3-*.jsonl")
        for x in f.read_text().splitlines()
        if '"run_end"' in x
    ]
    assert ends[-1]["status"] == "stopped"
    assert list((tmp_path / "ckpt" / "r3").glob("step-*.ckpt.pt"))
