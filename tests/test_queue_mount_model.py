"""A hypothesis state machine through a real mount: appends (whole and partial lines), view
create/remove, commits and seeks (good and bad), retention by count, reads of ``records`` and
remounts, against a model of the queue (a list of records, each view's head, and the oldest
retained record, which reclaim moves on by itself within what the views and the retention allow). Each example works on a fresh
queue of one mount; example counts are modest (a remount costs about a second), and a failure
is reported as found (no shrinking: it would rerun the I/O for minutes)."""

from __future__ import annotations

import errno
import itertools
import json
import os
import time

import pytest
from conftest import IO_PHASES
from fsmount import traxfs_mount
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)
from queue_paths import Stream, append, put, status

MiB = 1 << 20
VIEWS = ("a", "b", "c")
_names = itertools.count()


class QueueMachine(RuleBasedStateMachine):
    mount = None  # set by the test

    @initialize()
    def fresh_queue(self):
        self.qdir = self.mount.mp / "queues" / f"m{next(_names)}"
        os.mkdir(self.qdir)
        put(self.qdir / "config.json", '{"retain_age_seconds": null, "block_size": 16384}')
        self.records: list[bytes] = []
        self.heads: dict[str, int] = {}
        self.keep: int | None = None  # retain_count (None: no limit; the age limit is off)
        self.floor = 0  # the oldest retained record: reclaim moves it on by itself, never back
        self.allowed = 0  # ... and never past what some retention setting so far let go

    def teardown(self):
        if hasattr(self, "qdir") and self.qdir.exists():
            os.rmdir(self.qdir)

    # ----- producers ----------------------------------------------------------------------------
    @rule(sizes=st.lists(st.integers(1, 3000), min_size=1, max_size=40), cut=st.integers(0, 200))
    def append_lines(self, sizes, cut):
        """One open: whole lines in one write, then maybe a partial line ended by the close."""
        n = len(self.records)
        lines = [f"{n + i} ".encode().ljust(s, b"r") + b"\n" for i, s in enumerate(sizes)]
        fd = os.open(self.qdir / "append", os.O_WRONLY | os.O_APPEND)
        try:
            os.write(fd, b"".join(lines))
            if cut:
                os.write(fd, b"p" * cut)  # no newline: appended at the close
        finally:
            os.close(fd)
        self.records += lines + ([b"p" * cut + b"\n"] if cut else [])

    @rule(n=st.integers(50, 300))
    def append_burst(self, n):
        """Many records at once (several blocks: something for the retention to reclaim)."""
        first = len(self.records)
        lines = [f"{first + i} ".encode().ljust(999, b"b") + b"\n" for i in range(n)]
        append(self.qdir, b"".join(lines))
        self.records += lines

    @rule()
    def refused_append(self):
        try:
            append(self.qdir, b"good\n\xc3\x28\n")  # the second record is not UTF-8
        except OSError as e:
            assert e.errno == errno.EINVAL
        else:
            raise AssertionError("a non-UTF-8 record was accepted")

    # ----- views --------------------------------------------------------------------------------
    @rule(v=st.sampled_from(VIEWS))
    def create_view(self, v):
        try:
            os.mkdir(self.qdir / "views" / v)
        except FileExistsError:
            assert v in self.heads
            return
        assert v not in self.heads
        self.heads[v] = len(self.records)

    @rule(v=st.sampled_from(VIEWS))
    def remove_view(self, v):
        try:
            os.rmdir(self.qdir / "views" / v)
        except FileNotFoundError:
            assert v not in self.heads
            return
        del self.heads[v]

    @rule(keep=st.one_of(st.none(), st.integers(1, 40)))
    def retain(self, keep):
        """Retention by count: blocks whose records are all older than the last ``keep`` go
        (in the background, a block at a time) once no view needs them."""
        put(self.qdir / "config.json", json.dumps({"retain_count": keep}))
        self.keep = keep

    @rule()
    def wait(self):
        """Time for the background work (persist, seal, reclaim: every tenth of a second)."""
        time.sleep(0.25)

    def _move(self, v: str, kind: str, target: int) -> None:
        path = self.qdir / "views" / v / kind
        ok = target <= len(self.records) and (target >= self.heads[v] if kind == "commit" else target >= self.floor)
        try:
            put(path, str(target))
        except OSError as e:
            assert e.errno == errno.EINVAL, (kind, target, e)
            raced = kind == "seek" and target < status(self.qdir)["first_seq"]  # reclaimed meanwhile
            assert not ok or raced, (kind, target, e)
            return
        assert ok, f"{kind} {target} accepted (head {self.heads[v]}, end {len(self.records)})"
        self.heads[v] = target

    @precondition(lambda self: self.heads)
    @rule(data=st.data(), kind=st.sampled_from(["commit", "seek"]), over=st.integers(-3, 3))
    def move_head(self, data, kind, over):
        v = data.draw(st.sampled_from(sorted(self.heads)))
        lo = self.heads[v] if kind == "commit" else self.floor
        target = data.draw(st.integers(lo, len(self.records))) if over == 0 else max(0, lo + over if over < 0 else
                                                                                 len(self.records) + over)
        self._move(v, kind, target)

    @precondition(lambda self: self.heads)
    @rule(data=st.data())
    def read_view(self, data):
        v = data.draw(st.sampled_from(sorted(self.heads)))
        with Stream(self.qdir / "views" / v / "records") as s:
            got = s.drained()
        assert got == b"".join(self.records[self.heads[v] :]), f"view {v} from head {self.heads[v]}"

    @rule()
    def remount(self):
        self.mount.stop()
        self.mount.start()

    # ----- what always holds --------------------------------------------------------------------
    @invariant()
    def status_agrees(self):
        if not hasattr(self, "qdir"):
            return
        s = status(self.qdir)
        assert s["live_end"] == len(self.records)
        assert s["first_seq"] >= self.floor, "reclaimed records came back"
        self.floor = s["first_seq"]
        assert s["records"] == len(self.records) - self.floor
        assert not self.heads or self.floor <= min(self.heads.values()), "records a view needs were reclaimed"
        if self.keep:
            self.allowed = max(self.allowed, len(self.records) - self.keep)
        assert self.floor <= self.allowed, "retention not kept"
        assert {v: d["head"] for v, d in s["views"].items()} == self.heads
        assert sorted(os.listdir(self.qdir / "views")) == sorted(self.heads)


@pytest.mark.timeout(900)
def test_queue_state_machine_through_the_mount(tmp_path):
    with traxfs_mount(tmp_path, size=256 * MiB) as m:
        QueueMachine.mount = m
        run_state_machine_as_test(QueueMachine, settings=settings(
            max_examples=int(os.environ.get("TRAX_QUEUE_EXAMPLES", "12")), stateful_step_count=25, deadline=None,
            suppress_health_check=list(HealthCheck), phases=IO_PHASES))
