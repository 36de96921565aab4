"""torchvision's image models (random weights) through fw.export.onnx's default exporter, served by ``fw``.

Not in ``make test`` (each export takes tens of seconds on 2 cores): ``make test-export-models`` runs it.
``make test`` keeps a smoke of the same path (python/tests/test_export_dynamo.py: the adaptive pooling
model exported, checked and served). Each model must export with torch's current (dynamo) exporter,
without falling back, pass fw's parity checks (batches 1 and 7 and the example), and load in ``fw serve``,
whose engine replays the file's test vector; one request's answer is compared with the eager model's.
"""

from __future__ import annotations

import json
import os
import sys
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from fwserve import FwServer  # noqa: E402

from fw import export  # noqa: E402

torchvision = pytest.importorskip("torchvision")

REPO = Path(__file__).resolve().parents[2]
FW_BIN = Path(os.environ.get("FW_BIN") or REPO / "bin" / "fw")


@pytest.mark.parametrize("arch", ["resnet18", "mobilenet_v3_large", "efficientnet_b0"])
def test_torchvision_model(tmp_path: Path, arch: str) -> None:
    torch.manual_seed(0)
    torch.set_num_threads(2)
    model = getattr(torchvision.models, arch)(weights=None).eval()
    x = torch.rand(1, 3, 224, 224)
    path = tmp_path / f"{arch}.onnx"
    start = time.monotonic()
    rep = export.onnx(model, x, path, name=arch.replace("_", "-"))
    took = time.monotonic() - start
    print(f"{arch}: exported with {rep.exporter} in {took:.1f} s, max_abs_error {rep.max_abs_error:.2e}")
    assert rep.exporter == "dynamo" and rep.fallback is None, rep.fallback
    assert rep.max_abs_error <= rep.atol + rep.rtol

    if not FW_BIN.is_file():
        pytest.skip(f"fw binary missing at {FW_BIN}: run `make build` or set FW_BIN")
    srv = FwServer(FW_BIN, path)
    try:
        srv.wait_ready()
        rows = torch.rand(2, 3, 224, 224, generator=torch.Generator().manual_seed(1))
        req = urllib.request.Request(
            f"http://{srv.url}/predict",
            data=json.dumps({"data": rows.tolist()}).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=120) as r:
            got = np.array(json.load(r)["predictions"])
        with torch.no_grad():
            want = model(rows).numpy()
        assert got.shape == want.shape and np.allclose(got, want, atol=1e-3, rtol=1e-3)
    finally:
        assert srv.stop() == 0, srv.log()
