"""Queues through a real traxfs mount (``/queues``, ``fs/queues/subtree.py``): producers write
lines to ``append``, consumers read ``views/V/records`` and write ``commit``/``seek``, Spark's
kind of reader lists ``segments/``. One mount for the module; fsck must be clean after it."""

from __future__ import annotations

import errno
import os
import subprocess
import threading
import time

import psutil
import pytest
from fsmount import traxfs_mount
from queue_paths import Stream, append, config, lines, numbers, put, q, status
from waiting import wait_for

MiB = 1 << 20


@pytest.fixture(scope="module")
def m(tmp_path_factory):
    with traxfs_mount(tmp_path_factory.mktemp("queues"), size=256 * MiB) as mount:
        yield mount


@pytest.fixture
def qdir(m, request):
    """A fresh queue named after the test, removed afterwards."""
    path = q(m.mp, request.node.name[:60].replace("[", "_").replace("]", ""))
    os.mkdir(path)
    yield path
    if path.exists():
        for v in os.listdir(path / "views"):
            os.rmdir(path / "views" / v)
        os.rmdir(path)


@pytest.mark.timeout(60)
def test_shell_producer_and_reader(qdir, tmp_path):
    os.mkdir(qdir / "views" / "v")
    src = tmp_path / "events.jsonl"
    src.write_bytes(lines(0, 1000))
    subprocess.run(f"cat '{src}' >> '{qdir}/append'", shell=True, check=True, timeout=30)
    out = subprocess.run(["cat", str(qdir / "views" / "v" / "records")], capture_output=True, check=True, timeout=30)
    assert out.stdout == lines(0, 1000)
    st = status(qdir)
    assert (st["records"], st["first_seq"], st["last_seq"], st["views"]["v"]["lag"]) == (1000, 0, 999, 1000)
    sh = (f"echo 400 > '{qdir}/views/v/commit' && echo '{{\"retain_count\": 5000}}' > '{qdir}/config.json' && "
          f"echo @0 > '{qdir}/views/v/seek' && echo 990 > '{qdir}/views/v/commit' && tail -n 3 '{qdir}/views/v/records'")
    out = subprocess.run(sh, shell=True, capture_output=True, check=True, timeout=30)
    assert out.stdout == lines(997, 3)
    st = status(qdir)
    assert st["views"]["v"]["head"] == 990 and st["config"]["retain_count"] == 5000
    bad = subprocess.run(["bash", "-c", f"echo 2000 > '{qdir}/views/v/commit'"], capture_output=True, timeout=30)
    assert bad.returncode != 0 and b"Invalid argument" in bad.stderr


@pytest.mark.timeout(60)
def test_partial_lines_wait_in_their_open_until_the_end_or_the_close(qdir):
    os.mkdir(qdir / "views" / "v")
    with Stream(qdir / "views" / "v" / "records") as s:
        fd = os.open(qdir / "append", os.O_WRONLY | os.O_APPEND)
        os.write(fd, b'{"a": 1}\n{"b"')
        assert s.drained() == b'{"a": 1}\n'  # the partial line is no record yet
        os.write(fd, b': 2}\n{"c": 3}\n{"d')
        assert s.drained() == b'{"b": 2}\n{"c": 3}\n'
        other = os.open(qdir / "append", os.O_WRONLY)  # another producer's records go between
        os.write(other, b"x\n")
        os.close(other)
        assert s.drained() == b"x\n"
        os.close(fd)  # the close appends the rest as a record of its own
        assert s.drained() == b'{"d\n'


@pytest.mark.timeout(120)
def test_fan_out_four_views_each_see_every_record_once_in_order(qdir):
    for i in range(4):
        os.mkdir(qdir / "views" / f"v{i}")
    n, batch = 20000, 500
    got: dict[int, list[int]] = {}
    errors: list[BaseException] = []

    def consume(i: int) -> None:
        try:
            with Stream(qdir / "views" / f"v{i}" / "records") as s:
                got[i] = numbers(s.take(n, timeout=60))
        except BaseException as e:  # noqa: BLE001  (reported below)
            errors.append(e)

    threads = [threading.Thread(target=consume, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    fd = os.open(qdir / "append", os.O_WRONLY | os.O_APPEND)
    for first in range(0, n, batch):
        os.write(fd, lines(first, batch))
    os.close(fd)
    for t in threads:
        t.join(90)
    assert not errors, errors
    assert all(got[i] == list(range(n)) for i in range(4))


@pytest.mark.timeout(90)
def test_commit_then_seek_replays_then_continues_live_without_gap_or_duplicate(qdir, m):
    view = qdir / "views" / "v"
    os.mkdir(view)
    append(qdir, lines(0, 100))
    with Stream(view / "records") as s:
        assert numbers(s.take(100)) == list(range(100))
    put(view / "commit", "60\n")
    assert status(qdir)["views"]["v"]["head"] == 60
    with Stream(view / "records") as s:  # a new open reads from the committed head
        assert numbers(s.take(40)) == list(range(60, 100))
    put(view / "seek", "10")
    with Stream(view / "records") as s:
        assert numbers(s.take(90)) == list(range(10, 100))  # replay of retained history ...
        assert s.drained() == b""
        append(qdir, lines(100, 50))
        assert numbers(s.take(50)) == list(range(100, 150))  # ... then live, in the same open
        assert s.drained() == b""
    # by time: every record was appended before t0, none after (records are stamped to the
    # millisecond: those appended earlier in t0's millisecond would count as at t0)
    time.sleep(0.01)
    t0 = time.time()
    time.sleep(0.01)
    append(qdir, lines(150, 5))
    put(view / "seek", f"@{t0}")
    with Stream(view / "records") as s:
        assert numbers(s.take(5)) == list(range(150, 155))


@pytest.mark.timeout(120)
def test_committed_heads_and_inode_numbers_survive_a_remount(qdir, m):
    view = qdir / "views" / "v"
    os.mkdir(view)
    append(qdir, lines(0, 300), fsync=True)
    put(view / "commit", "123")
    inos = {p: os.stat(p).st_ino for p in (qdir, view, view / "records", qdir / "append", qdir / "status.json")}
    m.stop()
    m.start()
    assert {p: os.stat(p).st_ino for p in inos} == inos
    assert status(qdir)["views"]["v"]["head"] == 123
    with Stream(view / "records") as s:
        assert numbers(s.take(177)) == list(range(123, 300))
        assert s.drained() == b""
    append(qdir, lines(300, 1))  # a clean close leaves no gap in the numbers
    assert status(qdir)["last_seq"] == 300


@pytest.mark.timeout(120)
def test_retention_by_count_reclaims_blocks(qdir):
    config(qdir, block_size=16384, retain_count=1000, retain_age_seconds=None)
    for first in range(0, 20000, 1000):
        append(qdir, lines(first, 1000))
    # 2 MB were appended, 122 blocks' worth; the reclaim (every tenth of a second) keeps ~7
    deadline = time.monotonic() + 30
    while (st := status(qdir))["blocks"] > 12 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert st["blocks"] <= 12 and st["first_seq"] >= 20000 - 1000 - 2 * 16384 // 100, st
    assert st["records"] >= 1000 and st["last_seq"] == 19999
    # the oldest retained records are still readable by a view seeking there
    os.mkdir(qdir / "views" / "late")
    put(qdir / "views" / "late" / "seek", str(st["first_seq"]))
    with Stream(qdir / "views" / "late" / "records") as s:
        assert numbers(s.take(20000 - st["first_seq"])) == list(range(st["first_seq"], 20000))


@pytest.mark.timeout(120)
def test_retention_by_age_reclaims_blocks(qdir):
    config(qdir, block_size=16384, retain_age_seconds=0.5)
    append(qdir, lines(0, 5000))
    time.sleep(0.6)
    append(qdir, lines(5000, 10))
    deadline = time.monotonic() + 30
    while (st := status(qdir))["first_seq"] < 5000 - 16384 // 100 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert st["first_seq"] >= 5000 - 16384 // 100 and st["blocks"] <= 2, st


@pytest.mark.timeout(120)
def test_segments_appear_whole_and_match_the_records(qdir):
    config(qdir, seal_seconds=0.2, block_size=16384)
    os.mkdir(qdir / "views" / "all")
    seen: dict[str, bytes] = {}
    stop = threading.Event()
    problems: list[str] = []

    def watch() -> None:  # every segment it meets is whole: its size and bytes agree, and never change
        while not stop.is_set():
            for name in os.listdir(qdir / "segments"):
                data = (qdir / "segments" / name).read_bytes()
                if len(data) != os.stat(qdir / "segments" / name).st_size or not data.endswith(b"\n"):
                    problems.append(f"{name}: {len(data)} bytes")
                if seen.setdefault(name, data) != data:
                    problems.append(f"{name} changed")

    w = threading.Thread(target=watch)
    w.start()
    try:
        for first in range(0, 6000, 500):
            append(qdir, lines(first, 500))
            time.sleep(0.07)
            if first == 2500:  # half sealed before the rest: two segments at least
                wait_for(lambda: _covers(qdir, 3000), lambda: os.listdir(qdir / "segments"), timeout=20)
        wait_for(lambda: status(qdir)["segments"] and _covers(qdir, 6000), lambda: os.listdir(qdir / "segments"),
                 timeout=20)
    finally:
        stop.set()
        w.join(30)
    assert not problems, problems
    names = sorted(os.listdir(qdir / "segments"))
    assert len(names) >= 2
    joined = b"".join((qdir / "segments" / n).read_bytes() for n in names)
    with Stream(qdir / "views" / "all" / "records") as s:
        assert b"".join(s.take(6000)) == joined == lines(0, 6000)
    for n in names:  # named by first and last sequence number
        first, last = (int(x) for x in n.removesuffix(".jsonl").split("-"))
        assert numbers((qdir / "segments" / n).read_bytes().splitlines()) == list(range(first, last + 1))


def _covers(qdir, n: int) -> bool:
    names = sorted(os.listdir(qdir / "segments"))
    return bool(names) and int(names[-1].removesuffix(".jsonl").split("-")[1]) == n - 1


def _errno(fn) -> int:
    try:
        fn()
    except OSError as e:
        return e.errno
    return 0


@pytest.mark.timeout(120)
def test_bad_input_is_refused_with_its_errno_and_changes_nothing(qdir, m):
    config(qdir, max_record_bytes=200, seal_seconds=0.1)
    os.mkdir(qdir / "views" / "v")
    append(qdir, lines(0, 10))
    wait_for(lambda: os.listdir(qdir / "segments"), "no segment was sealed")  # the daemon's tick, late under load
    view = qdir / "views" / "v"
    seg = qdir / "segments" / sorted(os.listdir(qdir / "segments"))[0]

    def write(path, data, flags=os.O_WRONLY):
        def go():
            fd = os.open(path, flags)
            try:
                os.write(fd, data)
            finally:
                os.close(fd)
        return go

    put(view / "commit", "5")
    before = status(qdir)
    cfg = (qdir / "config.json").read_bytes()
    cases = [
        ("non-UTF-8 record", write(qdir / "append", b"ok\n\xff\xfe\n"), errno.EINVAL),
        ("record over max_record_bytes", write(qdir / "append", b"ok\n" + b"y" * 300 + b"\n"), errno.EINVAL),
        ("partial line already over the max", write(qdir / "append", b"z" * 300), errno.EINVAL),
        ("commit beyond the live end", write(view / "commit", b"11"), errno.EINVAL),
        ("commit below the head (seek moves back)", write(view / "commit", b"4"), errno.EINVAL),
        ("commit not a number", write(view / "commit", b"ten"), errno.EINVAL),
        ("commit negative", write(view / "commit", b"-1"), errno.EINVAL),
        ("seek beyond the live end", write(view / "seek", b"99"), errno.EINVAL),
        ("seek to a bad time", write(view / "seek", b"@soon"), errno.EINVAL),
        ("config out of range", write(qdir / "config.json", b'{"block_size": 1000}', os.O_WRONLY | os.O_TRUNC),
         errno.EINVAL),
        ("config unknown key", write(qdir / "config.json", b'{"colour": 1}', os.O_WRONLY | os.O_TRUNC), errno.EINVAL),
        ("config not an object", write(qdir / "config.json", b"[1]", os.O_WRONLY | os.O_TRUNC), errno.EINVAL),
        ("config not JSON (at close)", write(qdir / "config.json", b'{"seal', os.O_WRONLY | os.O_TRUNC), errno.EINVAL),
        ("write to records", write(view / "records", b"x\n"), errno.EPERM),
        ("write to status.json", write(qdir / "status.json", b"{}"), errno.EPERM),
        ("write to a segment", write(seg, b"x\n"), errno.EPERM),
        ("read append", lambda: os.open(qdir / "append", os.O_RDONLY), errno.EACCES),
        ("unlink append", lambda: os.unlink(qdir / "append"), errno.EPERM),
        ("create a file in a queue", lambda: os.open(qdir / "new", os.O_WRONLY | os.O_CREAT, 0o644), errno.EPERM),
        ("mkdir in a queue", lambda: os.mkdir(qdir / "sub"), errno.EPERM),
        ("mkdir a queue that exists", lambda: os.mkdir(qdir), errno.EEXIST),
        ("queue name too long", lambda: os.mkdir(m.mp / "queues" / ("n" * 256)), errno.ENAMETOOLONG),
        ("rmdir a queue that does not exist", lambda: os.rmdir(m.mp / "queues" / "nope"), errno.ENOENT),
        ("rmdir segments", lambda: os.rmdir(qdir / "segments"), errno.EPERM),
        ("rename a queue", lambda: os.rename(qdir, m.mp / "queues" / "other"), errno.EPERM),
        ("rename /queues", lambda: os.rename(m.mp / "queues", m.mp / "q2"), errno.EPERM),
    ]
    for what, fn, expected in cases:
        assert _errno(fn) == expected, what
        after = status(qdir)
        same = ("records", "last_seq", "live_end", "views", "config", "segments")
        assert {k: after[k] for k in same} == {k: before[k] for k in same}, what
        assert (qdir / "config.json").read_bytes() == cfg, what
    assert after["refused_writes"] == before["refused_writes"] + 3
    assert "max_record_bytes" in after["last_error"] or "config.json" in after["last_error"]
    with Stream(view / "records") as s:
        assert s.drained() == lines(5, 5)
    assert "seal" in m.log.read_text()  # the reason is in the daemon's log


@pytest.mark.timeout(120)
def test_rmdir_of_a_queue_returns_its_space(m):
    path = q(m.mp, "big")
    base = os.statvfs(m.mp).f_bfree
    os.mkdir(path)
    os.mkdir(path / "views" / "v")
    chunk = lines(0, 10000)
    for _ in range(20):  # 20 MB
        append(path, chunk)
    append(path, b"", fsync=True)
    used = base - os.statvfs(m.mp).f_bfree
    assert used * os.statvfs(m.mp).f_frsize >= 19 * MiB
    os.rmdir(path / "views" / "v")
    os.rmdir(path)
    assert not path.exists() and "big" not in os.listdir(m.mp / "queues")
    os.sync()
    deadline = time.monotonic() + 20
    while base - os.statvfs(m.mp).f_bfree > used // 10 and time.monotonic() < deadline:
        time.sleep(0.2)
        os.sync()
    assert base - os.statvfs(m.mp).f_bfree <= used // 10


def _race(fn, n: int = 8) -> list[int]:
    """``fn`` in ``n`` threads released at once; the errno of each (0: it succeeded)."""
    gate = threading.Barrier(n)
    out: list[int] = []

    def one() -> None:
        gate.wait()
        out.append(_errno(fn))

    threads = [threading.Thread(target=one) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    return sorted(out)


@pytest.mark.timeout(120)
def test_concurrent_create_and_remove_behave_as_for_directories(m):
    path = q(m.mp, "race")
    for _ in range(3):
        assert _race(lambda: os.mkdir(path)) == [0] + [errno.EEXIST] * 7
        assert _race(lambda: os.mkdir(path / "views" / "v")) == [0] + [errno.EEXIST] * 7
        assert _race(lambda: os.rmdir(path / "views" / "v")) == [0] + [errno.ENOENT] * 7
        assert _race(lambda: os.rmdir(path)) == [0] + [errno.ENOENT] * 7
        assert "race" not in os.listdir(m.mp / "queues")
    assert _errno(lambda: os.mkdir(m.mp / "queues" / "..")) == errno.EEXIST


@pytest.mark.timeout(180)
def test_a_full_volume_refuses_the_append_with_enospc_and_loses_nothing(tmp_path):
    """A producer ahead of every view fills the volume, not the daemon's memory; the append that
    finds it full is refused whole with ENOSPC."""
    with traxfs_mount(tmp_path, size=160 * MiB) as small:
        path = q(small.mp, "fill")
        os.mkdir(path)
        config(path, retain_age_seconds=None)
        os.mkdir(path / "views" / "v")  # at 0 for ever: every block is needed
        daemon = psutil.Process(small.proc.pid)
        base_rss, peak = daemon.memory_info().rss, [0]
        stop = threading.Event()

        def sample() -> None:
            while not stop.wait(0.05):
                peak[0] = max(peak[0], daemon.memory_info().rss)

        sampler = threading.Thread(target=sample)
        sampler.start()
        fd = os.open(path / "append", os.O_WRONLY)
        acked, refused = 0, None
        try:
            while acked < 500_000:
                try:
                    os.write(fd, lines(acked, 500, 1000))
                except OSError as e:
                    refused = e.errno
                    break
                acked += 500
            os.fsync(fd)
        finally:
            os.close(fd)
            stop.set()
            sampler.join(10)
        assert refused == errno.ENOSPC and acked > 100_000, (refused, acked)
        # ~130 MB appended; the daemon holds a tail block and its 32 MiB block cache, not the records
        assert peak[0] - base_rss < 64 * MiB, (base_rss, peak[0])
        print(f"daemon RSS {base_rss >> 20} MiB at the start, {peak[0] >> 20} MiB at most")
        assert status(path)["records"] == acked
        with Stream(path / "views" / "v" / "records") as s:
            got = s.drained()
        assert got == lines(0, acked, 1000)  # every acknowledged record, nothing of the refused write
        os.rmdir(path)  # the space comes back: a new queue takes records again
        os.mkdir(q(small.mp, "again"))
        append(q(small.mp, "again"), lines(0, 50000), fsync=True)
        assert status(q(small.mp, "again"))["records"] == 50000


@pytest.mark.timeout(120)
def test_a_listing_of_many_segments_returns_each_once(qdir):
    config(qdir, seal_bytes=1000)  # every append of 10 records seals a segment
    for first in range(0, 2000, 10):
        append(qdir, lines(first, 10))
    names = os.listdir(qdir / "segments")  # 200 entries: several readdir batches
    assert len(names) == len(set(names)) == 200
    assert [n.split("-")[0] for n in sorted(names)] == [f"{i:020d}" for i in range(0, 2000, 10)]
    assert len({os.stat(qdir / "segments" / n).st_ino for n in names}) == 200
