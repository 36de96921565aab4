"""Captured stdout/stderr of a tracked run: long lines, progress-bar redraws, bounded memory.

These drive fw.track's capture stream directly; test_track.py runs a real child that
prints what tqdm prints against the real dashboard.
"""

from __future__ import annotations

import collections
import io
import threading

from fw.track import MAX_LOG_LINE, _Tee


class _FakeRun:
    """What _Tee uses of a Run: its queue and its sender thread."""

    def __init__(self) -> None:
        self._q: collections.deque = collections.deque()
        self._thread = None

    def lines(self) -> list[str]:
        return [line for kind, _, lines, _ in self._q if kind == "log" for line in lines]


def _tee() -> tuple[_Tee, _FakeRun, io.StringIO]:
    run, real = _FakeRun(), io.StringIO()
    return _Tee(run, "stdout", real), run, real


def test_lines_and_crlf_split_across_writes():
    tee, run, real = _tee()
    for piece in ["a", "b\nc", "d\r", "\ne\n", "tail"]:
        tee.write(piece)
    assert run.lines() == ["ab", "cd", "e"]
    tee.drain()
    assert run.lines() == ["ab", "cd", "e", "tail"]
    assert real.getvalue() == "ab\ncd\r\ne\ntail"  # written through unchanged


def test_redraws_keep_the_last_state():
    tee, run, _ = _tee()
    for i in range(1, 101):
        tee.write(f"\r{i:3d}%|{'#' * (i // 10):<10}| {i}/100")
    tee.write("\n")
    tee.write("done\n")
    assert run.lines() == ["100%|##########| 100/100", "done"]


def test_long_line_is_cut_with_a_marker_and_memory_stays_bounded():
    tee, run, _ = _tee()
    for _ in range(3000):  # 3 MB, no newline
        tee.write("é" * 1000)
        assert tee._size <= MAX_LOG_LINE
    tee.write("\nnext\n")
    long, nxt = run.lines()
    assert nxt == "next"
    b = long.encode()
    assert len(b) <= MAX_LOG_LINE
    kept = long[: long.index("… [truncated ")]
    assert set(kept) == {"é"}
    assert long.endswith(f"… [truncated {6_000_000 - len(kept.encode())} bytes]")


def test_writes_from_the_sender_thread_are_not_captured():
    tee, run, _ = _tee()
    run._thread = threading.current_thread()
    tee.write("from the sender\n")
    assert run.lines() == []
