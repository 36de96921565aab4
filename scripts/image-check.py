"""Runs the CPU image (Dockerfile) without a container runtime and predicts through it.

podman, crun and runc cannot start containers on the machines this project is built on
(setrlimit and the cgroup layout are refused), so this does by hand what a runtime does
with the image's own files and configuration, and nothing more:

  * unpacks the image exactly as exported (an OCI layout from `buildah push`: index,
    manifest, config, layers in order, whiteouts honoured) into ROOTFS;
  * mounts what a runtime gives a container: /proc, /sys read-only, a /dev with null, zero,
    full, random, urandom and tty; and the models directory read-only at /app/models
    (`-v models:/app/models:ro`);
  * starts the config's Entrypoint with the config's Env, WorkingDir and User (10001), in a
    chroot of ROOTFS: the image's own `fw serve`, with the libraries the image carries;
  * predicts over HTTP on 127.0.0.1 and checks every answer: an ONNX model through ONNX
    Runtime (an image file, top class), a TorchScript and a quantized TorchScript model
    through libtorch's CPU libraries (the embedded test vector, within the file's
    tolerance); then SIGTERM, which must drain and exit 0.

Namespaces and cgroups (what is refused here) are not exercised; the network is the
host's, so the servers listen on 127.0.0.1 only.

    python scripts/image-check.py --oci build/image/oci --rootfs build/image/rootfs \
        --models build/models
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tarfile
import time
import urllib.error
import urllib.request
from pathlib import Path, PurePosixPath


def log(msg: str) -> None:
    print(f"image-check: {msg}", flush=True)


def blob(oci: Path, digest: str) -> Path:
    algo, _, hexd = digest.partition(":")
    path = oci / "blobs" / algo / hexd
    h = hashlib.new(algo)
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    if h.hexdigest() != hexd:
        raise SystemExit(f"image-check: blob {digest} does not match its digest")
    return path


def check_member(rootfs: Path, m: tarfile.TarInfo) -> None:
    """Refuses an entry that could write outside rootfs: an absolute or climbing name or
    link target, or a path through a symbolic link already unpacked."""
    p = PurePosixPath(m.name)
    if p.is_absolute() or ".." in p.parts:
        raise SystemExit(f"image-check: layer entry {m.name!r} escapes the root")
    if (m.issym() or m.islnk()) and (
        PurePosixPath(m.linkname).is_absolute()
        or ".." in PurePosixPath(m.linkname).parts
    ):
        raise SystemExit(
            f"image-check: link {m.name!r} -> {m.linkname!r} leaves the root (not expected in this image)"
        )
    d = rootfs
    for part in p.parts[:-1]:
        d = d / part
        if d.is_symlink():
            raise SystemExit(
                f"image-check: layer entry {m.name!r} goes through the symbolic link {d}"
            )


def unpack(oci: Path, rootfs: Path) -> dict:
    """Unpacks the OCI layout's one image into rootfs; returns its config."""
    index = json.loads((oci / "index.json").read_text())
    (desc,) = index["manifests"]
    manifest = json.loads(blob(oci, desc["digest"]).read_text())
    config = json.loads(blob(oci, manifest["config"]["digest"]).read_text())
    if rootfs.exists():
        shutil.rmtree(rootfs)
    rootfs.mkdir(parents=True)
    packed = 0
    for layer in manifest["layers"]:
        packed += layer["size"]
        with tarfile.open(blob(oci, layer["digest"]), "r:*") as tar:
            for m in tar:
                check_member(rootfs, m)
                p = PurePosixPath(m.name)
                if (
                    p.name == ".wh..wh..opq"
                ):  # opaque directory: drop what lower layers put there
                    d = rootfs / p.parent
                    for child in d.iterdir() if d.is_dir() else []:
                        shutil.rmtree(
                            child
                        ) if child.is_dir() and not child.is_symlink() else child.unlink()
                elif p.name.startswith(".wh."):
                    gone = rootfs / p.parent / p.name[len(".wh.") :]
                    if gone.is_dir() and not gone.is_symlink():
                        shutil.rmtree(gone)
                    elif gone.exists() or gone.is_symlink():
                        gone.unlink()
                else:
                    # Checked above; modes and owners stay as the image has them (/tmp is 1777).
                    tar.extract(m, rootfs, filter="fully_trusted")
    log(
        f"unpacked {len(manifest['layers'])} layer(s), {packed / 1e6:.0f} MB compressed, into {rootfs}"
    )
    return config["config"]


class Mounts:
    """What a runtime mounts into a container, undone in reverse order."""

    def __init__(self, rootfs: Path):
        self.rootfs = rootfs
        self.done: list[Path] = []

    def mount(self, *args: str, target: Path) -> None:
        target.mkdir(parents=True, exist_ok=True)
        subprocess.run(["mount", *args, str(target)], check=True)
        self.done.append(target)

    def setup(self, models: Path) -> None:
        r = self.rootfs
        self.mount("-t", "proc", "proc", target=r / "proc")
        self.mount("-t", "sysfs", "-o", "ro", "sysfs", target=r / "sys")
        self.mount("-t", "tmpfs", "-o", "mode=755,size=1m", "tmpfs", target=r / "dev")
        for name, major, minor in [
            ("null", 1, 3),
            ("zero", 1, 5),
            ("full", 1, 7),
            ("random", 1, 8),
            ("urandom", 1, 9),
            ("tty", 5, 0),
        ]:
            os.mknod(r / "dev" / name, 0o666 | 0o020000, os.makedev(major, minor))
            os.chmod(r / "dev" / name, 0o666)
        self.mount("--bind", str(models), target=r / "app" / "models")
        subprocess.run(
            ["mount", "-o", "remount,bind,ro", str(r / "app" / "models")], check=True
        )

    def undo(self) -> None:
        for target in reversed(self.done):
            subprocess.run(["umount", "-l", str(target)], check=False)
        self.done.clear()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http(
    method: str, url: str, body: bytes | None = None, ctype: str | None = None
) -> tuple[int, bytes]:
    req = urllib.request.Request(url, data=body, method=method)
    if ctype:
        req.add_header("Content-Type", ctype)
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


class Container:
    """The image's entrypoint in a chroot of its root file system, as its config says."""

    def __init__(self, rootfs: Path, config: dict, args: list[str], log) -> None:
        user = config.get("User", "0:0")
        uid, _, gid = user.partition(":")
        self.uid, self.gid = int(uid), int(gid or uid)
        self.workdir = config.get("WorkingDir") or "/"
        env = dict(e.split("=", 1) for e in config.get("Env", []))
        # make test's mark, so its leftover check would see this process.
        if "FW_TEST_SESSION" in os.environ:
            env["FW_TEST_SESSION"] = os.environ["FW_TEST_SESSION"]
        argv = list(config.get("Entrypoint") or []) + args
        # preexec_fn (chroot, then drop to the image's user) is safe here: no other threads.
        self.proc = subprocess.Popen(
            argv,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            preexec_fn=self._enter(rootfs),  # noqa: PLW1509
            start_new_session=True,
        )

    def _enter(self, rootfs: Path):
        uid, gid, workdir = self.uid, self.gid, self.workdir

        def enter() -> None:
            os.chroot(rootfs)
            os.chdir(workdir)
            os.setgroups([])
            os.setgid(gid)
            os.setuid(uid)

        return enter

    def stop(self, timeout: float = 60) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
            return -9


def wait_ready(url: str, c: Container, logfile: Path, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if c.proc.poll() is not None:
            raise SystemExit(
                f"image-check: fw serve exited {c.proc.returncode}:\n{logfile.read_text()}"
            )
        try:
            if http("GET", url + "/health/ready")[0] == 200:
                return
        except OSError:
            pass
        time.sleep(0.2)
    raise SystemExit(f"image-check: not ready after {timeout}s:\n{logfile.read_text()}")


def close(got: list, want: list, atol: float, rtol: float) -> float:
    worst = 0.0
    for g_row, w_row in zip(got, want, strict=True):
        for g, w in zip(g_row, w_row, strict=True):
            err = abs(g - w)
            if err > atol + rtol * abs(w):
                raise SystemExit(
                    f"image-check: {g} vs expected {w}: beyond atol {atol}, rtol {rtol}"
                )
            worst = max(worst, err)
    return worst


def check_test_vector(url: str, model_file: Path) -> str:
    import fw.metadata

    doc = fw.metadata.read(model_file)
    tv = doc["test_vector"]
    (x,) = tv["inputs"].values()
    (y,) = tv["outputs"].values()
    rows = fw.metadata.decode_tensor(x).tolist()
    want = fw.metadata.decode_tensor(y).tolist()
    code, body = http(
        "POST",
        url + "/predict",
        json.dumps({"data": rows}).encode(),
        "application/json",
    )
    if code != 200:
        raise SystemExit(f"image-check: /predict answered {code}: {body[:500]!r}")
    got = json.loads(body)["predictions"]
    worst = close(got, want, tv.get("atol", 1e-4), tv.get("rtol", 1e-3))
    return f"{len(rows)} rows match the file's test vector (max abs error {worst:.3g})"


def check_image(url: str, png: Path, label: str) -> str:
    code, body = http(
        "POST", url + "/predict/image?top_k=1", png.read_bytes(), "image/png"
    )
    if code != 200:
        raise SystemExit(f"image-check: /predict/image answered {code}: {body[:500]!r}")
    top = json.loads(body)["predictions"][0]["top_k"][0]
    if top["label"] != label:
        raise SystemExit(
            f"image-check: {png.name} classified as {top}, want label {label}"
        )
    return f"{png.name} -> label {top['label']} (score {top['score']:.3f})"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--oci",
        type=Path,
        required=True,
        help="OCI layout holding the image (buildah push oci:DIR)",
    )
    ap.add_argument(
        "--rootfs", type=Path, required=True, help="where to unpack it (replaced)"
    )
    ap.add_argument(
        "--models",
        type=Path,
        required=True,
        help="build/models (python -m fw.reference)",
    )
    a = ap.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("image-check: chroot and mount need root")
    t0 = time.monotonic()
    config = unpack(a.oci, a.rootfs.resolve())
    rootfs = a.rootfs.resolve()
    files = [p for p in rootfs.rglob("*") if p.is_file()]
    size = sum(p.stat().st_size for p in files)
    log(
        f"{len(files)} files, {size / 1e6:.0f} MB: {sorted(str(p.relative_to(rootfs)) for p in files)}"
    )
    for shell in ("bin/sh", "bin/bash", "usr/bin/sh", "usr/bin/apt"):
        if (rootfs / shell).exists():
            raise SystemExit(
                f"image-check: the runtime image should hold no shell or package manager: {shell}"
            )
    log(
        f"config: Entrypoint {config.get('Entrypoint')}, User {config.get('User')}, WorkingDir {config.get('WorkingDir')}"
    )
    mounts = Mounts(rootfs)
    logs = rootfs.parent / "logs"
    logs.mkdir(exist_ok=True)
    cases = [
        (
            "digits_cnn.onnx",
            lambda url: check_image(url, a.models / "samples" / "digit_0_24.png", "0"),
        ),
        (
            "digits_cnn.onnx",
            lambda url: check_test_vector(url, a.models / "digits_cnn.onnx"),
        ),
        (
            "digits_mlp.ts.pt",
            lambda url: check_test_vector(url, a.models / "digits_mlp.ts.pt"),
        ),
        (
            "digits_cnn.quant.pt",
            lambda url: check_test_vector(url, a.models / "digits_cnn.quant.pt"),
        ),
        (
            "digits_cnn.int8-static.onnx",
            lambda url: check_test_vector(
                url, a.models / "digits_cnn.int8-static.onnx"
            ),
        ),
        (
            # An AOTInductor package: its compiled library is loaded into the image's fw
            # (libtorch_cpu, libgomp) after extraction into the image's /tmp.
            "digits_mlp.pt2",
            lambda url: check_test_vector(url, a.models / "digits_mlp.pt2"),
        ),
    ]
    try:
        mounts.setup(a.models.resolve())
        by_model: dict[str, list] = {}
        for model, fn in cases:
            by_model.setdefault(model, []).append(fn)
        for model, checks in by_model.items():
            port = free_port()
            logfile = logs / f"{model}.log"
            args = [
                "--model",
                f"/app/models/{model}",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
            ]
            args += [
                "--threads",
                "1",
                "--drain-delay",
                "1s",
                "--shutdown-timeout",
                "10s",
            ]
            url = f"http://127.0.0.1:{port}"
            with open(logfile, "wb") as logf:
                c = Container(rootfs, config, args, logf)
                try:
                    wait_ready(url, c, logfile)
                    code, body = http("GET", url + "/model")
                    info = json.loads(body)
                    for fn in checks:
                        log(
                            f"{model} ({info.get('format')}, {info.get('device')}): {fn(url)}"
                        )
                    code, metrics = http("GET", url + "/metrics")
                    if code != 200 or b"fw_ready 1" not in metrics:
                        raise SystemExit(
                            f"image-check: /metrics {code} lacks fw_ready 1"
                        )
                finally:
                    rc = c.stop()
            if rc != 0:
                raise SystemExit(
                    f"image-check: fw serve exited {rc} on SIGTERM:\n{logfile.read_text()}"
                )
            log(f"{model}: SIGTERM drained and exited 0")
    finally:
        mounts.undo()
    log(f"passed in {time.monotonic() - t0:.0f}s (rootfs {rootfs})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
