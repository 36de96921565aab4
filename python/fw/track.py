"""Experiment tracking from training code: ``with fw.track.run(...) as run: run.log(...)``.

Every call appends to an in-memory queue and returns at once; a background thread serialises the
events and sends them in large batches to the dashboard (``FW_TRACKING_URI``, default
``http://127.0.0.1:8080``, ``POST /api/ingest``, token from ``FW_DASHBOARD_TOKEN``). When the dashboard
cannot be reached (or answers with an error status), nothing is lost: the events go to an append-only
spool file ``$FW_EXPERIMENT_DIR/spool/<run id>-<writer>.jsonl`` (same format as the HTTP body, one
event per line), and that run's later events follow them there so they stay in seq order. The
dashboard imports spool files on start and every few seconds. See docs/tracking.md.

With ``FW_UPLOAD_FILES=1`` (the dashboard sets it for its jobs when it keeps files in object storage;
set it yourself for a run on a machine whose disk the dashboard does not see), the files of
:meth:`Run.checkpoint` and :meth:`Run.artifact` are also uploaded (``PUT /api/runs/{id}/files``) by
another background thread, so that every dashboard replica can serve them; the events still name the
paths, and the files stay on local disk.

Only the standard library is imported here; torch is imported by :meth:`Run.checkpoint` alone.
"""

from __future__ import annotations

import atexit
import collections
import http.client
import io
import json
import logging
import math
import os
import queue
import random
import re
import secrets
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import traceback
import urllib.parse
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

__all__ = ["Run", "run", "new_id"]

log = logging.getLogger("fw.track")

# The store's batch limits (dashboard/store: MaxBatchEvents, MaxBatchValues), with headroom.
MAX_BATCH_EVENTS = 10000
MAX_BATCH_VALUES = 190000
_CROCKFORD = "0123456789abcdefghjkmnpqrstvwxyz"
_STOP_EXIT_CODE = 128 + signal.SIGTERM


def new_id() -> str:
    """A 16-character ID: 48 bits of Unix milliseconds, then 32 random bits, lower-case Crockford base32."""
    n = (int(time.time() * 1000) & ((1 << 48) - 1)) << 32 | secrets.randbits(32)
    return "".join(_CROCKFORD[(n >> (5 * i)) & 31] for i in range(15, -1, -1))


def _git_commit() -> str | None:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=2, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


# What the dashboard reads of a reference is 64 MiB; the SDK stops writing rows a little before.
_REFERENCE_BYTES = 60 << 20


def _flatten(x: Any, out: list[float]) -> list[int]:
    """Appends the numbers of ``x`` (nested lists or tuples, arrays, tensors) to ``out`` and returns its shape."""
    if hasattr(x, "detach"):  # a torch tensor
        x = x.detach().cpu()
    if hasattr(x, "tolist"):  # numpy arrays and scalars, torch tensors
        x = x.tolist()
    if isinstance(x, (list, tuple)):
        shape: list[int] = []
        for el in x:
            shape = _flatten(el, out)
        return [len(x), *shape]
    out.append(float(x))
    return []


def _reference_tensor(name: str, row: Any) -> dict[str, Any]:
    """One row of an input as a payload record's tensor: its values, or beyond 4,096 their summary."""
    values: list[float] = []
    shape = [1, *_flatten(row, values)]
    finite = [v for v in values if math.isfinite(v)]
    t: dict[str, Any] = {"name": name, "datatype": "FP32", "shape": shape}
    if len(values) - len(finite):
        t["nonfinite"] = len(values) - len(finite)
    if len(values) <= 4096:
        t["data"] = [v if math.isfinite(v) else 0.0 for v in values]
    elif finite:
        mean = sum(finite) / len(finite)
        std = math.sqrt(sum((v - mean) ** 2 for v in finite) / len(finite))
        t["summary"] = {"n": len(finite), "mean": mean, "std": std, "min": min(finite), "max": max(finite)}
    return t


def _num(v: Any) -> Any:
    """A metric value as JSON: floats, with NaN and infinities as the strings the store accepts."""
    if not isinstance(v, (int, float)) or isinstance(v, bool):
        v = float(v.item() if hasattr(v, "item") else v)
    if isinstance(v, float) and not math.isfinite(v):
        return "NaN" if v != v else ("Infinity" if v > 0 else "-Infinity")
    return v


def _plain(v: Any) -> Any:
    """A param value as plain JSON (tensors and numpy scalars become numbers, paths strings)."""
    if v is None or isinstance(v, (str, bool, int)):
        return v
    if isinstance(v, float):
        return _num(v)
    if isinstance(v, Mapping):
        return {str(k): _plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    if hasattr(v, "item"):
        try:
            return _plain(v.item())
        except (ValueError, RuntimeError):
            pass
    return str(v)


# The longest log line the dashboard keeps, in UTF-8 bytes (store.MaxLogLine):
# a longer captured line is cut to it, ending with a marker saying how much went.
MAX_LOG_LINE = 16384
_LINE_BREAK = re.compile(r"[\r\n]")


def _truncated(n: int) -> str:
    return f"… [truncated {n} bytes]"


class _Tee(io.TextIOBase):
    """Writes through to the real stream and queues complete lines as log events.

    Like the dashboard's reader of a job's output: "\n" (or "\r\n") ends a line; a
    "\r" not followed by "\n" is a terminal redraw (tqdm's progress bar), so the text
    after it replaces the line and a redrawn line is kept in its last state; a line
    longer than MAX_LOG_LINE bytes is cut with a marker. Memory stays bounded and the
    work linear in what is written, whatever the program prints.
    """

    def __init__(self, run: Run, stream: str, real: Any) -> None:
        self._run, self._stream, self._real = run, stream, real
        self._parts: list[str] = []  # the current line's pieces, at most MAX_LOG_LINE characters
        self._size = 0  # characters in _parts
        self._dropped = 0  # UTF-8 bytes of the current line beyond _parts
        self._cr = False  # the last character written was a "\r": a redraw unless "\n" follows

    def write(self, s: str) -> int:
        n = self._real.write(s)
        if threading.current_thread() is not self._run._thread:
            lines = self._feed(s)
            if lines:
                self._run._q.append(("log", self._stream, lines, time.time()))
        return n if n is not None else len(s)

    def _feed(self, s: str) -> list[str]:
        """Adds s to the current line and returns the lines it completed."""
        out: list[str] = []
        pos, end = 0, len(s)
        while pos < end:
            if self._cr:
                self._cr = False
                if s[pos] == "\n":
                    out.append(self._take())
                    pos += 1
                    continue
                self._clear()  # a redraw: what follows replaces the line
            m = _LINE_BREAK.search(s, pos)
            stop = m.start() if m else end
            if stop > pos:
                self._add(s[pos:stop])
            if m is None:
                break
            if m.group() == "\n":
                out.append(self._take())
            else:
                self._cr = True
            pos = stop + 1
        return out

    def _add(self, piece: str) -> None:
        room = MAX_LOG_LINE - self._size
        if len(piece) > room:
            self._dropped += len(piece[room:].encode("utf-8", "replace"))
            piece = piece[:room]
        if piece:
            self._parts.append(piece)
            self._size += len(piece)

    def _clear(self) -> None:
        self._parts, self._size, self._dropped = [], 0, 0

    def _take(self) -> str:
        """The current line, cut to MAX_LOG_LINE bytes with the marker; starts the next."""
        line, dropped = "".join(self._parts), self._dropped
        self._clear()
        b = line.encode("utf-8", "replace")
        if not dropped and len(b) <= MAX_LOG_LINE:
            return line
        total = len(b) + dropped
        keep = b[: MAX_LOG_LINE - len(_truncated(total).encode())].decode("utf-8", "ignore")
        return keep + _truncated(total - len(keep.encode("utf-8", "replace")))

    def drain(self) -> None:
        if self._parts or self._dropped:
            self._run._q.append(("log", self._stream, [self._take()], time.time()))
        self._cr = False

    def flush(self) -> None:
        self._real.flush()

    def isatty(self) -> bool:
        return self._real.isatty()

    def fileno(self) -> int:
        return self._real.fileno()

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return getattr(self._real, "encoding", "utf-8")


def _env_flag(name: str) -> bool:
    """Whether the environment variable ``name`` is set to a true value (1, true, yes, on)."""
    return (os.environ.get(name) or "").strip().lower() in ("1", "true", "yes", "on")


class _Uploader:
    """Uploads a run's checkpoint and artifact files to the dashboard from one background thread.

    ``offer`` never blocks: beyond ``queue_size`` waiting files a file is not uploaded (warned; it
    stays on local disk). A failed upload (no connection, a 5xx, 408 or 429) is tried ``attempts``
    times with growing pauses, then logged; another refusal (400, 401, 404, 413) is logged at once.
    ``close`` waits at most its timeout for what is queued.
    """

    def __init__(
        self,
        uri: str,
        token: str | None,
        run_id: str,
        *,
        queue_size: int = 64,
        attempts: int = 4,
        backoff: float = 1.0,
        timeout: float = 60.0,
    ) -> None:
        self.uri, self.token, self.run_id = uri, token, run_id
        self.attempts, self.backoff, self.timeout = attempts, backoff, timeout
        self.uploaded: list[tuple[str, str]] = []  # (kind, path) stored by the dashboard
        self.failed: list[tuple[str, str, str]] = []  # (kind, path, why) given up
        self._q: queue.Queue = queue.Queue(maxsize=queue_size)
        self._stop = threading.Event()  # give up: the run ended and close timed out
        self._closing = threading.Event()  # end once the queue is empty
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def offer(self, kind: str, rel: str, path: Path, after: threading.Event | None = None) -> None:
        """Queue ``path`` as the run's ``kind`` (checkpoint, artifact) file ``rel``; with ``after``, its
        upload waits (at most the upload timeout) until that is set: the file's event was delivered, so
        the dashboard knows the run."""
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._loop, name=f"fw-upload-{self.run_id}", daemon=True
                )
                self._thread.start()
        try:
            self._q.put_nowait((kind, rel, Path(path), after))
        except queue.Full:
            log.warning(
                "fw.track: %d files wait to be uploaded; %s %s of run %s stays on this machine only (%s)",
                self._q.maxsize,
                kind,
                rel,
                self.run_id,
                path,
            )
            self.failed.append((kind, rel, "the upload queue is full"))

    def close(self, timeout: float) -> bool:
        """Wait at most ``timeout`` seconds for the queued uploads; True when none is left."""
        self._closing.set()
        if self._thread is None:
            return True
        self._thread.join(timeout)
        if not self._thread.is_alive():
            return True
        self._stop.set()  # a retry pause ends; an upload in flight ends at its socket timeout
        log.warning(
            "fw.track: uploads of run %s did not finish within %.0fs; %d more files stay on this machine only",
            self.run_id,
            timeout,
            self._q.qsize() + 1,
        )
        return False

    def _loop(self) -> None:
        while True:
            try:
                kind, rel, path, after = self._q.get(timeout=0.1)
            except queue.Empty:
                if self._closing.is_set():
                    return
                continue
            if after is not None:
                deadline = time.monotonic() + self.timeout
                while not after.wait(0.05) and not self._stop.is_set() and time.monotonic() < deadline:
                    pass
            if self._stop.is_set():
                self.failed.append((kind, rel, "the run ended first"))
                continue
            try:
                why = self._upload_retrying(kind, rel, path)
            except Exception as e:  # never let an upload kill training
                why = f"{type(e).__name__}: {e}"
            if why is None:
                self.uploaded.append((kind, rel))
            else:
                self.failed.append((kind, rel, why))
                log.warning(
                    "fw.track: uploading %s %s of run %s failed (%s); the file stays at %s",
                    kind,
                    rel,
                    self.run_id,
                    why,
                    path,
                )

    def _upload_retrying(self, kind: str, rel: str, path: Path) -> str | None:
        why = ""
        for attempt in range(self.attempts):
            if attempt and self._stop.wait(self.backoff * 2 ** (attempt - 1)):
                return why + " (the run ended before the next try)"
            status, why = self._upload(kind, rel, path)
            if status == 200:
                return None
            if status and status not in (408, 429) and status < 500:
                return why  # the request's fault: trying again changes nothing
        return why

    def _upload(self, kind: str, rel: str, path: Path) -> tuple[int, str]:
        u = urllib.parse.urlsplit(self.uri)
        query = urllib.parse.urlencode({"kind": kind, "path": rel})
        target = f"{u.path or ''}/api/runs/{urllib.parse.quote(self.run_id, safe='')}/files?{query}"
        cls = http.client.HTTPSConnection if u.scheme == "https" else http.client.HTTPConnection
        conn = cls(u.hostname or "127.0.0.1", u.port, timeout=self.timeout)
        try:
            with open(path, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                headers = {"Content-Type": "application/octet-stream", "Content-Length": str(size)}
                if self.token:
                    headers["Authorization"] = "Bearer " + self.token
                conn.request("PUT", target, body=f, headers=headers)
                resp = conn.getresponse()
                data = resp.read()
            if resp.status == 200:
                return 200, ""
            try:
                msg = json.loads(data)["error"]["message"]
            except (ValueError, KeyError, TypeError):
                msg = data[:200].decode("utf-8", "replace")
            return resp.status, f"HTTP {resp.status}: {msg}"
        except (OSError, http.client.HTTPException) as e:
            return 0, f"{type(e).__name__}: {e}"
        finally:
            conn.close()


class Run:
    """A tracked run. Create it with :func:`run` and use it as a context manager."""

    def __init__(
        self,
        experiment: str,
        params: Mapping[str, Any] | None = None,
        name: str | None = None,
        tags: Mapping[str, str] | None = None,
        *,
        run_id: str | None = None,
        uri: str | None = None,
        token: str | None = None,
        capture_output: bool | None = None,
        handle_sigterm: bool = True,
        flush_timeout: float = 30.0,
        system_interval: float | None = None,
        resume: bool = False,
        upload_files: bool | None = None,
        upload_timeout: float = 120.0,
    ) -> None:
        self.id = run_id or new_id()
        # A fresh writer per Run object (so per process): the dashboard's exactly-once mark is per
        # (run, writer, seq), and a second process continuing this run starts again at seq 1.
        self.writer = "w" + new_id()[8:]
        self._resume = resume
        self.experiment = experiment
        self.name = name
        self.uri = (uri or os.environ.get("FW_TRACKING_URI") or "http://127.0.0.1:8080").rstrip("/")
        self.token = token if token is not None else os.environ.get("FW_DASHBOARD_TOKEN")
        exp_dir = Path(os.environ.get("FW_EXPERIMENT_DIR") or "experiments")
        self.spool_path = exp_dir / "spool" / f"{self.id}-{self.writer}.jsonl"
        self.checkpoint_dir = Path(os.environ.get("FW_CHECKPOINT_DIR") or "checkpoints") / self.id
        self.artifact_dir = Path(os.environ.get("FW_ARTIFACT_DIR") or exp_dir / "artifacts") / self.id
        self.errors: list[dict[str, Any]] = []  # per-event errors the dashboard reported
        self.spooled = 0  # events written to the spool file
        self.sent = 0  # events acknowledged over HTTP
        self._params = dict(params or {})
        self._tags = dict(tags or {})
        if capture_output is None:
            # The dashboard started this process for this run (FW_JOB_RUN_ID) and captures its
            # output itself, from the pipes or from Ray's job log: a tee would log each line twice.
            capture_output = not (run_id is not None and os.environ.get("FW_JOB_RUN_ID") == run_id)
        self._capture = capture_output
        self._handle_sigterm = handle_sigterm
        self._flush_timeout = flush_timeout
        self._q: collections.deque = collections.deque()
        self._seq = 0
        self._batch_waiters: list[threading.Event] = []  # the sender's: set after the batch _take made
        self._on_stop: list[Callable[[], Any]] = []
        self._stopping = False
        self._closed = False
        self._done = threading.Event()
        self._idle = threading.Condition()
        self._pending = 0  # items taken from the queue, not yet sent or spooled
        self._thread: threading.Thread | None = None
        self._conn: http.client.HTTPConnection | None = None
        self._spool: Any = None
        self._tees: list[tuple[str, Any]] = []
        self._old_sigterm: Any = None
        self._warned_offline = False
        self._force_spool = False
        # System metrics of this process (CPU, memory, threads, CUDA memory) every
        # system_interval seconds; FW_SYSTEM_INTERVAL sets the default (10 s); 0 turns it off.
        if system_interval is None:
            system_interval = float(os.environ.get("FW_SYSTEM_INTERVAL") or 10.0)
        self._system_interval = system_interval
        self._next_system = 0.0
        self._last_cpu: tuple[float, float] | None = None
        # Checkpoint and artifact files go to the dashboard too (PUT /api/runs/{id}/files) when
        # upload_files, by default FW_UPLOAD_FILES; end() waits at most upload_timeout for them.
        if upload_files is None:
            upload_files = _env_flag("FW_UPLOAD_FILES")
        self.uploads: _Uploader | None = _Uploader(self.uri, self.token, self.id) if upload_files else None
        self._upload_timeout = upload_timeout

    # -- public API: all of these only append to the queue ---------------------------------------

    def log(self, values: Mapping[str, Any], step: int) -> None:
        """Log metric values at ``step`` (one point per key)."""
        self._q.append(("metrics", int(step), dict(values), time.time()))

    def progress(
        self, step: int, total: int | None = None, *, epoch: float | None = None, epochs: float | None = None
    ) -> None:
        """Report how far training has come (drives the dashboard's progress bar and ETA)."""
        ev: dict[str, Any] = {"type": "progress", "step": int(step)}
        if total is not None:
            ev["total_steps"] = int(total)
        if epoch is not None:
            ev["epoch"] = float(epoch)
        if epochs is not None:
            ev["total_epochs"] = float(epochs)
        self._event(ev)

    def param(self, key: str, value: Any) -> None:
        """Record a param. Params are write-once: another value is refused by the dashboard (warned)."""
        self._event({"type": "param", "params": {key: _plain(value)}})

    def tag(self, key: str, value: str) -> None:
        """Set a tag (tags can change)."""
        self._event({"type": "tag", "tags": {key: str(value)}})

    def checkpoint(
        self,
        model: Any,
        step: int,
        metrics: Mapping[str, float] | None = None,
        epoch: float | None = None,
        example_input: Any = None,
        meta: Mapping[str, Any] | None = None,
        calibration_input: Any = None,
    ) -> Path:
        """Save ``model`` with :func:`fw.checkpoint.save` to ``$FW_CHECKPOINT_DIR/<run id>/step-<step>.ckpt.pt``.

        The checkpoint event carries the path relative to the run's checkpoint directory
        (``step-<step>.ckpt.pt``), as the store records it. ``meta`` (``labels``, ``preprocessing``,
        ``task``, ``description``...) goes into the checkpoint, where ``python -m fw.export`` takes it
        as the exported file's metadata, so a model exported from the dashboard names its classes and
        accepts images. ``calibration_input`` (a few hundred training input rows) lets the
        dashboard export int8 ONNX with static quantization. Returns the file's path.
        """
        from fw import checkpoint as ckpt

        rel = f"step-{int(step)}.ckpt.pt"
        meta = {**(meta or {}), "run_id": self.id, "step": int(step)}
        if metrics:
            meta["metrics"] = {str(k): float(v) for k, v in metrics.items()}
        path = ckpt.save(
            model, self.checkpoint_dir / rel, example_input, calibration_input=calibration_input, **meta
        )
        ev: dict[str, Any] = {"type": "checkpoint", "path": rel, "step": int(step)}
        if epoch is not None:
            ev["epoch"] = float(epoch)
        if metrics:
            ev["values"] = {k: _num(v) for k, v in metrics.items()}
        delivered = threading.Event() if self.uploads is not None else None
        self._event(ev, delivered)
        if self.uploads is not None:
            self.uploads.offer("checkpoint", rel, Path(path), after=delivered)
        return path

    def artifact(self, path: str | os.PathLike) -> Path:
        """Record a file the run produced; files outside ``$FW_ARTIFACT_DIR/<run id>`` are copied there."""
        src = Path(path).resolve()
        root = self.artifact_dir.resolve()
        if root in src.parents:
            dst = src
        else:
            root.mkdir(parents=True, exist_ok=True)
            dst = root / src.name
            shutil.copy2(src, dst)
        rel = dst.relative_to(root).as_posix()
        delivered = threading.Event() if self.uploads is not None else None
        self._event({"type": "artifact", "path": rel, "size": dst.stat().st_size}, delivered)
        if self.uploads is not None:
            self.uploads.offer("artifact", rel, dst, after=delivered)
        return dst

    def log_reference(self, data: Any, *, name: str = "input", max_rows: int = 1000, seed: int = 0) -> Path:
        """Log a sample of the data the model learns from as the drift reference of its deployments.

        ``data`` is the model's input, rows along the first axis: a numpy array, a torch tensor, a
        pandas DataFrame or nested lists for a model of one input (named ``name``, fw.export's default ``"input"``), or a
        dict of input name -> rows for several. Up to ``max_rows`` rows (a uniform sample, seeded by
        ``seed``) are written as the artifact ``fw-reference.jsonl``, one payload record per row, as
        fw serve's ``--log-payloads`` writes a request (a row of more than 4,096 values as its
        summary). The model page's Traffic view, or ``GET /api/payloads/drift?reference_run=<run
        id>``, then compares a deployment's logged requests with it (PSI per feature).
        """
        inputs = dict(data) if isinstance(data, Mapping) else {name: data}
        if not inputs or max_rows < 1:
            raise ValueError("log_reference needs at least one input and max_rows >= 1")
        columns: dict[str, Any] = {}
        for key, value in inputs.items():
            if hasattr(value, "detach"):  # a torch tensor (its sampled rows are copied to the CPU one by one)
                value = value.detach()
            elif hasattr(value, "to_numpy"):  # a pandas DataFrame or Series: its rows, not its column names
                value = value.to_numpy()
            elif not hasattr(value, "__getitem__"):  # an iterable of rows
                value = list(value)
            if not hasattr(value, "__len__") or not len(value):
                raise ValueError(
                    f"input {key!r}: give its rows along the first axis (got {type(value).__name__})"
                )
            columns[key] = value
        sizes = {k: len(v) for k, v in columns.items()}
        n = next(iter(sizes.values()))
        if any(m != n for m in sizes.values()):
            raise ValueError(f"every input needs the same number of rows: {sizes}")
        # Only the sampled rows become Python numbers: a large training set is not copied whole.
        picked = sorted(random.Random(seed).sample(range(n), min(n, max_rows)))
        self.artifact_dir.mkdir(parents=True, exist_ok=True)
        path = self.artifact_dir / "fw-reference.jsonl"
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        written = 0
        with open(path, "w", encoding="utf-8") as f:
            for k, i in enumerate(picked):
                tensors = [_reference_tensor(key, col[i]) for key, col in columns.items()]
                rec = {
                    "id": secrets.token_hex(16),
                    "time": stamp,
                    "model": "",
                    "version": "",
                    "latency_ms": 0,
                    "inputs": tensors,
                    "outputs": [],
                }
                line = json.dumps(rec, allow_nan=False, separators=(",", ":")) + "\n"
                if written + len(line) > _REFERENCE_BYTES:
                    log.warning(
                        "log_reference: stopped at %d of %d rows, the %d MiB the dashboard reads of a reference",
                        k,
                        len(picked),
                        _REFERENCE_BYTES >> 20,
                    )
                    break
                f.write(line)
                written += len(line)
        return self.artifact(path)

    def on_stop(self, fn: Callable[[], Any]) -> Callable[[], Any]:
        """Register ``fn`` to run on SIGTERM before the run is marked stopped (e.g. save a final checkpoint)."""
        self._on_stop.append(fn)
        return fn

    @property
    def stop_requested(self) -> bool:
        """True once SIGTERM arrived (for loops that prefer to stop on their own)."""
        return self._stopping

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until everything logged so far is acknowledged by the dashboard or spooled."""
        deadline = time.monotonic() + (self._flush_timeout if timeout is None else timeout)
        with self._idle:
            while self._q or self._pending:
                left = deadline - time.monotonic()
                if left <= 0 or self._thread is None or not self._thread.is_alive():
                    return False
                self._idle.notify_all()
                self._idle.wait(min(left, 0.05))
        return True

    # -- lifecycle --------------------------------------------------------------------------------

    def __enter__(self) -> Run:
        self.start()
        return self

    def start(self) -> None:
        argv = list(sys.argv)
        source: dict[str, Any] = {
            "command": shlex.join(argv) if argv else "",
            "args": argv[1:],
            "host": socket.gethostname(),
            "pid": os.getpid(),
        }
        commit = _git_commit()
        if commit:
            source["git_commit"] = commit
        if self._resume:
            # The only way out of finished/failed/stopped: the same run continues (docs/tracking.md).
            self._event({"type": "run_resume", "status": "running", "source": dict(source)})
        ev: dict[str, Any] = {
            "type": "run_start",
            "experiment": self.experiment,
            "status": "running",
            "source": source,
        }
        if self.name:
            ev["name"] = self.name
        if self._params:
            ev["params"] = _plain(self._params)
        if self._tags:
            ev["tags"] = {str(k): str(v) for k, v in self._tags.items()}
        self._event(ev)
        self._thread = threading.Thread(target=self._sender, name=f"fw-track-{self.id}", daemon=True)
        self._thread.start()
        if self._capture:
            for stream in ("stdout", "stderr"):
                real = getattr(sys, stream)
                self._tees.append((stream, real))
                setattr(sys, stream, _Tee(self, stream, real))
        if self._handle_sigterm and threading.current_thread() is threading.main_thread():
            self._old_sigterm = signal.signal(signal.SIGTERM, self._sigterm)
        atexit.register(self._atexit)

    def _sigterm(self, signum: int, frame: Any) -> None:
        if self._stopping:
            return
        self._stopping = True
        for fn in self._on_stop:
            try:
                fn()
            except Exception:
                log.exception("fw.track: an on_stop callback failed")
        raise SystemExit(_STOP_EXIT_CODE)

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        if exc_type is None:
            self.end("finished")
        elif self._stopping or exc_type is KeyboardInterrupt:
            self.end(
                "stopped", error="stopped by SIGTERM" if self._stopping else "interrupted (KeyboardInterrupt)"
            )
        elif exc_type is SystemExit and exc is not None and exc.code in (None, 0):
            self.end("finished")
        else:
            text = "".join(traceback.format_exception(exc_type, exc, tb))
            self.end("failed", error=f"{exc_type.__name__}: {exc}", traceback=text, exit_code=1)

    def end(self, status: str = "finished", **fields: Any) -> None:
        """End the run (the context manager calls this) and flush with a bounded timeout."""
        if self._closed:
            return
        self._restore_streams()
        ev: dict[str, Any] = {"type": "run_end", "status": status}
        ev.update({k: v for k, v in fields.items() if v is not None})
        self._event(ev)
        self._close()

    def _restore_streams(self) -> None:
        for stream, real in reversed(self._tees):
            tee = getattr(sys, stream)
            if isinstance(tee, _Tee):
                tee.drain()
                if tee._real is real:
                    setattr(sys, stream, real)
        self._tees.clear()
        if self._old_sigterm is not None and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, self._old_sigterm)
            self._old_sigterm = None

    def _close(self) -> None:
        self._closed = True
        ok = self.flush(self._flush_timeout)
        if not ok:
            self._force_spool = True  # the sender spools what is left (in order) instead of sending
        self._done.set()
        if not ok:
            log.warning(
                "fw.track: the dashboard did not take all events within %.0fs; the rest go to %s",
                self._flush_timeout,
                self.spool_path,
            )
        if self._thread is not None:
            self._thread.join(timeout=self._flush_timeout + 15)
        if self.uploads is not None:
            self.uploads.close(self._upload_timeout)
        try:
            atexit.unregister(self._atexit)
        except Exception:
            pass

    def _atexit(self) -> None:
        if not self._closed:
            self.end("failed", error="the process exited without ending the run", exit_code=1)

    # -- the sender thread ------------------------------------------------------------------------

    def _event(self, ev: dict[str, Any], delivered: threading.Event | None = None) -> None:
        """Queue one event; ``delivered``, when given, is set once the sender has handed it on
        (acknowledged by the dashboard, or spooled)."""
        ev["time"] = time.time()
        self._q.append(("event", ev, delivered) if delivered is not None else ("event", ev))

    def _take(self) -> list[dict[str, Any]]:
        """Pop up to a batch of queue items and turn them into events with seq numbers."""
        q, out, values = self._q, [], 0
        base = {"run_id": self.id, "writer": self.writer}
        while q and len(out) < MAX_BATCH_EVENTS and values < MAX_BATCH_VALUES:
            item = q.popleft()
            self._seq += 1
            kind = item[0]
            if kind == "metrics":
                ev = {"type": "metrics", "step": item[1], "values": item[2], "time": item[3]}
                values += len(item[2])
            elif kind == "log":
                lines = list(item[2])
                # merge consecutive lines of the same stream into one event
                while q and q[0][0] == "log" and q[0][1] == item[1] and len(lines) < 1000:
                    lines.extend(q.popleft()[2])
                ev = {"type": "log", "stream": item[1], "lines": lines, "time": item[3]}
                values += len(lines)
            else:
                ev = item[1]
                if len(item) > 2:
                    self._batch_waiters.append(item[2])
                values += len(ev.get("params") or ()) + len(ev.get("values") or ())
            ev.update(base)
            ev["seq"] = self._seq
            out.append(ev)
        return out

    def _system_sample(self) -> dict[str, float]:
        """CPU percent (of one core), resident memory, threads and CUDA memory of this process.

        Read from /proc (Linux) without extra dependencies; CUDA figures only when the training
        code has already initialised CUDA through torch (never imported or initialised here).
        """
        values: dict[str, float] = {}
        try:
            with open("/proc/self/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            cpu = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
            now = time.monotonic()
            if self._last_cpu is not None and now > self._last_cpu[1]:
                values["cpu_percent"] = round(
                    100.0 * (cpu - self._last_cpu[0]) / (now - self._last_cpu[1]), 2
                )
            self._last_cpu = (cpu, now)
            values["threads"] = float(fields[17])
            with open("/proc/self/statm") as f:
                values["rss_mb"] = round(int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20, 2)
        except (OSError, ValueError, IndexError):
            pass
        torch = sys.modules.get("torch")
        try:
            if torch is not None and torch.cuda.is_initialized():
                for i in range(torch.cuda.device_count()):
                    values[f"gpu{i}.mem_allocated_gb"] = round(torch.cuda.memory_allocated(i) / 1e9, 3)
                    values[f"gpu{i}.mem_reserved_gb"] = round(torch.cuda.memory_reserved(i) / 1e9, 3)
        except Exception:  # a broken CUDA state must not stop tracking
            pass
        return values

    def _maybe_sample_system(self) -> None:
        if self._system_interval <= 0:
            return
        now = time.monotonic()
        if now >= self._next_system:
            self._next_system = now + self._system_interval
            values = self._system_sample()
            if values:
                self._event({"type": "system", "values": values})

    def _sender(self) -> None:
        while True:
            self._maybe_sample_system()
            with self._idle:
                if not self._q:
                    self._pending = 0
                    self._idle.notify_all()
                    if self._done.is_set():
                        break
                    self._idle.wait(0.05)
                    continue
                self._pending = 1  # before popping, so flush() never sees an empty queue and nothing pending
            batch = self._take()
            try:
                self._deliver(batch)
            except Exception:  # never let tracking kill training; spool what we hold
                log.exception("fw.track: sending events failed; spooling them")
                self._to_spool(batch)
            for w in self._batch_waiters:
                w.set()
            self._batch_waiters.clear()
            with self._idle:
                self._pending = 0
                self._idle.notify_all()
        self._finish()

    def _finish(self) -> None:
        if self._conn is not None:
            self._conn.close()
        if self._spool is not None:
            self._spool.flush()
            os.fsync(self._spool.fileno())
            self._spool.close()  # releases the flock: the dashboard may now import and delete it
            self._spool = None

    @staticmethod
    def _encode(batch: list[dict[str, Any]]) -> list[str]:
        lines = []
        for ev in batch:
            try:
                lines.append(json.dumps(ev, allow_nan=False, separators=(",", ":")))
            except (TypeError, ValueError):
                if "values" in ev:
                    ev["values"] = {str(k): _num(v) for k, v in ev["values"].items()}
                lines.append(json.dumps(_plain(ev), allow_nan=False, separators=(",", ":")))
        return lines

    def _deliver(self, batch: list[dict[str, Any]]) -> None:
        lines = self._encode(batch)
        if self._spool is None and not self._force_spool:
            body = ("[" + ",".join(lines) + "]").encode()
            status, reply = self._post(body)
            if status == 200:
                self.sent += len(batch)
                self._report(reply, batch)
                return
            if not self._warned_offline:
                self._warned_offline = True
                log.warning(
                    "fw.track: the dashboard at %s is not taking events (%s); spooling to %s, "
                    "which the dashboard imports when it runs",
                    self.uri,
                    reply or status,
                    self.spool_path,
                )
        self._to_spool(batch, lines)

    def _report(self, reply: Any, batch: list[dict[str, Any]]) -> None:
        errs = (reply or {}).get("errors") or []
        for e in errs:
            self.errors.append(e)
            ev = batch[e.get("index", 0)] if 0 <= e.get("index", 0) < len(batch) else {}
            log.warning(
                "fw.track: the dashboard refused a %s event of run %s: %s: %s",
                ev.get("type", "?"),
                self.id,
                e.get("code"),
                e.get("message"),
            )

    def _post(self, body: bytes) -> tuple[int, Any]:
        u = urllib.parse.urlsplit(self.uri)
        headers = {"Content-Type": "application/json"}
        if self.token:
            headers["Authorization"] = "Bearer " + self.token
        for attempt in range(2):  # a kept-alive connection may have been closed: retry once
            try:
                if self._conn is None:
                    cls = http.client.HTTPSConnection if u.scheme == "https" else http.client.HTTPConnection
                    self._conn = cls(u.hostname or "127.0.0.1", u.port, timeout=10)
                self._conn.request("POST", (u.path or "") + "/api/ingest", body=body, headers=headers)
                resp = self._conn.getresponse()
                data = resp.read()
                try:
                    reply = json.loads(data) if data else None
                except ValueError:
                    reply = None
                if resp.status != 200 and isinstance(reply, dict) and "error" in reply:
                    reply = f"HTTP {resp.status}: {reply['error'].get('message')}"
                return resp.status, reply
            except (OSError, http.client.HTTPException) as e:
                if self._conn is not None:
                    self._conn.close()
                    self._conn = None
                if attempt == 1:
                    return 0, f"{type(e).__name__}: {e}"
        return 0, None

    def _open_spool(self) -> Any:
        import fcntl

        self.spool_path.parent.mkdir(parents=True, exist_ok=True)
        while True:
            f = open(self.spool_path, "a", encoding="utf-8")
            fcntl.flock(f.fileno(), fcntl.LOCK_EX)
            try:  # the dashboard may have deleted the name between open and lock: reopen
                if os.fstat(f.fileno()).st_ino == os.stat(self.spool_path).st_ino:
                    return f
            except FileNotFoundError:
                pass
            f.close()

    def _to_spool(self, batch: list[dict[str, Any]], lines: list[str] | None = None) -> None:
        if self._spool is None:
            self._spool = self._open_spool()
        if lines is None:
            lines = self._encode(batch)
        self._spool.write("\n".join(lines) + "\n")
        self._spool.flush()
        self.spooled += len(lines)


def run(
    experiment: str,
    params: Mapping[str, Any] | None = None,
    name: str | None = None,
    tags: Mapping[str, str] | None = None,
    **options: Any,
) -> Run:
    """Start a tracked run: ``with fw.track.run(experiment="digits", params={...}) as run: ...``.

    Options: ``run_id`` (client-chosen, default :func:`new_id`), ``uri`` (default ``FW_TRACKING_URI``),
    ``token`` (default ``FW_DASHBOARD_TOKEN``), ``capture_output`` (tee stdout/stderr into the run's
    logs; default True, except in a training job the dashboard started for this very run, whose output
    it captures itself: ``FW_JOB_RUN_ID`` equal to ``run_id``), ``handle_sigterm`` (default True; main thread only), ``flush_timeout`` (s),
    ``resume`` (with ``run_id`` of a finished, failed or stopped run: reopen that run and continue it;
    its params, metrics, logs and checkpoints are kept), ``upload_files`` (default ``FW_UPLOAD_FILES``:
    also upload checkpoint and artifact files to the dashboard, in the background) and
    ``upload_timeout`` (s, how long ending the run waits for those uploads; default 120). Every Run writes with its own writer ID, so
    any number of processes may write to one run one after another without their events colliding.
    """
    return Run(experiment, params, name, tags, **options)
