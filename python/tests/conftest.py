from __future__ import annotations

import os

import pytest
import torch


@pytest.fixture(autouse=True, scope="session")
def _threads() -> None:
    torch.set_num_threads(2)


@pytest.fixture
def mlp():
    from fw.models import DigitsMLP

    torch.manual_seed(0)
    return DigitsMLP(hidden=16).eval()


@pytest.fixture
def digits_x() -> torch.Tensor:
    return torch.rand(6, 64, generator=torch.Generator().manual_seed(0))


# FW_REQUIRE=1 (what `make test` sets): a test that would skip because something
# it needs is missing (the fw binary, the reference models, a client library)
# fails instead, so a wrong FW_BIN or FW_MODELS_DIR cannot pass the suite by
# skipping most of it. Without it, such tests skip with the reason.
REQUIRE = os.environ.get("FW_REQUIRE") == "1"


def _require(report) -> None:
    if REQUIRE and report.skipped and not hasattr(report, "wasxfail"):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        report.outcome = "failed"
        report.longrepr = f"FW_REQUIRE=1 and this would have skipped: {reason}"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    _require(outcome.get_result())


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    outcome = yield
    _require(outcome.get_result())
