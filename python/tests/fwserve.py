"""A real ``fw serve`` subprocess for the tests: started on free ports, stopped with SIGTERM."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

_SLOW_IDENTITY = """
import time
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        time.sleep({seconds})
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy())])
                for r in requests]
"""


def slow_identity_repo(root: Path, dtype: str, dims: list[int], seconds: float, instances: int = 1) -> Path:
    """A model repository in ``root`` of one Python model, ``slow``, without a batch axis: OUTPUT0 is
    INPUT0 (``dtype``, e.g. ``TYPE_FP32``, of ``dims``), answered ``seconds`` after each execute
    begins, on ``instances`` instances. Serve it with ``--python sys.executable``."""
    (root / "slow" / "1").mkdir(parents=True)
    (root / "slow" / "1" / "model.py").write_text(_SLOW_IDENTITY.format(seconds=seconds))
    (root / "slow" / "config.pbtxt").write_text(
        'backend: "python"\nmax_batch_size: 0\n'
        f'input [{{ name: "INPUT0" data_type: {dtype} dims: {dims} }}]\n'
        f'output [{{ name: "OUTPUT0" data_type: {dtype} dims: {dims} }}]\n'
        f"instance_group [{{ kind: KIND_CPU count: {instances} }}]\n"
    )
    return root


def free_port() -> int:
    """A port free on 127.0.0.1 now (the server binds it right after)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class FwServer:
    """One ``fw serve`` subprocess on a free port."""

    def __init__(
        self,
        fw_bin: Path,
        model: Path | None,
        *extra: str,
        grpc: bool = False,
        env: dict[str, str] | None = None,
    ) -> None:
        """Serve ``model`` (a file), or with ``model=None`` what ``extra`` says (``--model-repository DIR``).

        ``env`` is added to this process's environment for the server.
        """
        self.port = free_port()
        self.url = f"127.0.0.1:{self.port}"
        self.grpc_url = f"127.0.0.1:{free_port()}" if grpc else ""
        args = [
            str(fw_bin),
            "serve",
            *(["--model", str(model)] if model is not None else []),
            "--port",
            str(self.port),
            "--host",
            "127.0.0.1",
            *extra,
        ]
        if grpc:
            args += ["--grpc-port", self.grpc_url.rsplit(":", 1)[1]]
        self._log = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(
            args,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env={**os.environ, **env} if env else None,
        )

    def log(self) -> str:
        self._log.seek(0)
        return self._log.read().decode(errors="replace")

    def wait_ready(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                pytest.fail(f"fw serve exited with {self.proc.returncode}:\n{self.log()}")
            try:
                with urllib.request.urlopen(f"http://{self.url}/health", timeout=2) as r:
                    if r.status == 200:
                        return
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            time.sleep(0.1)
        self.proc.kill()
        pytest.fail(f"fw serve was not healthy within {timeout}s:\n{self.log()}")

    def stop(self, timeout: float = 30.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                pytest.fail(f"fw serve did not stop within {timeout}s of SIGTERM:\n{self.log()}")
        return self.proc.returncode
