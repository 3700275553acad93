"""Tables and queues in snapshots, through a real FUSE mount: ``/.snapshots/NAME/tables/T/`` shows the rows
of the version the snapshot froze (all rows, a projection, a single column, status.json), also
after more ingests and a remount; everything there is read-only (EROFS); ``rmdir`` of a table a
snapshot holds is EBUSY and changes nothing, until the snapshot is deleted; fsck stays clean."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import pytest
from fsmount import traxfs_mount
from waiting import wait_for

MiB = 1 << 20
SCHEMA = "id int64 not null, name string, n int32"


@pytest.fixture
def m(tmp_path):
    with traxfs_mount(tmp_path, size=256 * MiB) as mount:
        yield mount


def rows(lo: int, hi: int) -> list[tuple[int, str, int]]:
    return [(i, f"name {i}", i * 7 % 100) for i in range(lo, hi)]


def csv(rs, cols=(0, 1, 2)) -> bytes:
    names = ("id", "name", "n")
    return ((",".join(names[c] for c in cols) + "\n") +
            "".join(",".join(str(r[c]) for c in cols) + "\n" for r in rs)).encode()


def ingest(t: Path, name: str, rs) -> None:
    with open(t / "ingest" / name, "wb") as f:
        f.write(csv(rs))


def new_table(mp: Path, name: str) -> Path:
    t = mp / "tables" / name
    t.mkdir()
    (t / "schema").write_text(SCHEMA + "\n")
    return t


def expect_errno(code: int, fn, *args) -> None:
    with pytest.raises(OSError) as ei:
        fn(*args)
    assert ei.value.errno == code, ei.value


def test_table_frozen_in_snapshot_across_ingests_remount_and_delete(m):
    mp = m.mp
    t = new_table(mp, "sales")
    ingest(t, "a.csv", rows(0, 50))
    ingest(t, "b.csv", rows(50, 120))
    (mp / ".snapshots" / "s1").mkdir()
    ingest(t, "c.csv", rows(120, 300))
    new_table(mp, "later")  # made after the snapshot: not in it
    st = mp / ".snapshots" / "s1" / "tables" / "sales"

    def check_frozen() -> None:
        assert (st / "rows.csv").read_bytes() == csv(rows(0, 120))
        assert os.stat(st / "rows.csv").st_size == len(csv(rows(0, 120)))
        assert (st / "columns" / "n,id.csv").read_bytes() == csv(rows(0, 120), (2, 0))
        assert (st / "columns" / "name.csv").read_bytes() == csv(rows(0, 120), (1,))
        lines = (st / "rows.jsonl").read_text().splitlines()
        assert [json.loads(x)["id"] for x in lines] == list(range(120))
        doc = json.loads((st / "status.json").read_bytes())
        assert (doc["rows"], doc["state"]) == (120, "frozen")
        assert (st / "schema").read_text() == (t / "schema").read_text()
        assert sorted(os.listdir(mp / ".snapshots" / "s1" / "tables")) == ["sales"]
        assert sorted(os.listdir(st)) == ["columns", "rows.csv", "rows.jsonl", "schema", "status.json"]
        assert "tables" in os.listdir(mp / ".snapshots" / "s1")
        assert (t / "rows.csv").read_bytes() == csv(rows(0, 300))  # the live table has every row

    check_frozen()
    inos = {p: os.stat(st / p).st_ino for p in ("", "rows.csv", "columns/n,id.csv", "status.json")}
    assert len(set(inos.values())) == len(inos)
    m.stop()
    r = m.fsck()  # the frozen records: no leak, no problem
    assert r.returncode == 0, r.stdout + r.stderr
    m.start()
    check_frozen()
    assert {p: os.stat(st / p).st_ino for p in inos} == inos  # stable across remounts

    # read-only: EROFS for every change; the held table cannot be removed
    expect_errno(errno.EROFS, os.open, st / "rows.csv", os.O_WRONLY)
    expect_errno(errno.EROFS, os.open, st / "new.csv", os.O_WRONLY | os.O_CREAT, 0o644)
    expect_errno(errno.EROFS, os.mkdir, st / "ingest")
    expect_errno(errno.EROFS, os.unlink, st / "rows.csv")
    expect_errno(errno.EROFS, os.rmdir, st)
    expect_errno(errno.EBUSY, os.rmdir, t)
    assert (t / "rows.csv").read_bytes() == csv(rows(0, 300))  # nothing changed
    check_frozen()

    (mp / ".snapshots" / "s1").rmdir()
    os.rmdir(t)  # released with the snapshot
    assert sorted(os.listdir(mp / "tables")) == ["later"]
    m.stop()
    r = m.fsck()
    assert r.returncode == 0, r.stdout + r.stderr
    m.start()


def test_two_snapshots_each_see_their_version_and_both_hold(m):
    mp = m.mp
    t = new_table(mp, "t")
    (mp / ".snapshots" / "empty").mkdir()
    ingest(t, "a.csv", rows(0, 10))
    (mp / ".snapshots" / "ten").mkdir()
    ingest(t, "b.csv", rows(10, 20))
    assert (mp / ".snapshots" / "empty" / "tables" / "t" / "rows.csv").read_bytes() == csv([])
    assert (mp / ".snapshots" / "ten" / "tables" / "t" / "rows.csv").read_bytes() == csv(rows(0, 10))
    (mp / ".snapshots" / "ten").rmdir()
    with pytest.raises(OSError) as ei:
        os.rmdir(t)
    assert ei.value.errno == errno.EBUSY
    (mp / ".snapshots" / "empty").rmdir()
    os.rmdir(t)


# ----- queues -------------------------------------------------------------------------------------
QCONFIG = {"block_size": 16384, "seal_bytes": 2000, "retain_count": None, "retain_age_seconds": None}


def retain_50(q: Path) -> None:
    """From now on retention keeps only the last 50 records (reclaim runs in the background)."""
    (q / "config.json").write_text(json.dumps({"retain_count": 50}))


def new_queue(mp: Path, name: str) -> Path:
    q = mp / "queues" / name
    q.mkdir()
    (q / "config.json").write_text(json.dumps(QCONFIG))
    return q


def append(q: Path, lo: int, hi: int) -> None:
    fd = os.open(q / "append", os.O_WRONLY)
    try:
        for start in range(lo, hi, 10):
            os.write(fd, b"".join(b'{"n": %d, "pad": "%s"}\n' % (i, b"x" * 80) for i in range(start, min(hi, start + 10))))
        os.fsync(fd)
    finally:
        os.close(fd)


def segments(d: Path) -> dict[str, bytes]:
    return {n: (d / "segments" / n).read_bytes() for n in sorted(os.listdir(d / "segments"))}


def qstatus(d: Path) -> dict:
    return json.loads((d / "status.json").read_bytes())


def test_queue_frozen_in_snapshot_pins_its_records_and_holds_it(m):
    mp = m.mp
    q = new_queue(mp, "events")
    append(q, 0, 200)
    before = segments(q)
    assert len(before) >= 5
    st_before = qstatus(q)
    (mp / ".snapshots" / "s").mkdir()
    sq = mp / ".snapshots" / "s" / "queues" / "events"
    retain_50(q)
    append(q, 200, 600)
    wait_for(lambda: len(segments(q)) > len(before), "more segments sealed", timeout=60)

    def check_frozen() -> None:
        assert sorted(os.listdir(mp / ".snapshots" / "s" / "queues")) == ["events"]
        assert sorted(os.listdir(sq)) == ["segments", "status.json"]
        assert segments(sq) == before
        doc = qstatus(sq)
        assert (doc["first_seq"], doc["live_end"], doc["segments"]) == (st_before["first_seq"],
                                                                       st_before["live_end"], len(before))

    check_frozen()
    # retention runs (a queue made after the snapshot loses its oldest records) but the frozen
    # queue keeps every record the snapshot shows
    control = new_queue(mp, "control")
    retain_50(control)
    append(control, 0, 600)
    wait_for(lambda: qstatus(control)["first_seq"] > 0, "retention reclaims the control queue", timeout=60)
    assert qstatus(q)["first_seq"] == 0
    check_frozen()
    inos = {p: os.stat(sq / p).st_ino for p in ("", "status.json", "segments", "segments/" + min(before))}
    m.stop()
    r = m.fsck()  # the frozen records: no leak, no problem
    assert r.returncode == 0, r.stdout + r.stderr
    m.start()
    check_frozen()
    assert {p: os.stat(sq / p).st_ino for p in inos} == inos

    expect_errno(errno.EROFS, os.open, sq / "status.json", os.O_WRONLY)
    expect_errno(errno.EROFS, os.open, sq / "append", os.O_WRONLY | os.O_CREAT, 0o644)
    expect_errno(errno.EROFS, os.mkdir, sq / "views")
    expect_errno(errno.EROFS, os.unlink, sq / "segments" / min(before))
    expect_errno(errno.EBUSY, os.rmdir, q)
    assert qstatus(q)["live_end"] == 600  # nothing changed

    (mp / ".snapshots" / "s").rmdir()
    wait_for(lambda: qstatus(q)["first_seq"] > 0, "retention goes on once the snapshot is gone", timeout=60)
    os.rmdir(q)
    os.rmdir(control)
    m.stop()
    r = m.fsck()
    assert r.returncode == 0, r.stdout + r.stderr
    m.start()


def test_frozen_tables_and_queues_survive_sigkill_and_a_delete_interrupted(m):
    """A snapshot whose create was acknowledged keeps its frozen table and queue through a
    SIGKILL of the daemon (the records are durable with it); one deleted before the SIGKILL
    stays deleted and holds nothing."""
    mp = m.mp
    t = new_table(mp, "t")
    ingest(t, "a.csv", rows(0, 30))
    q = new_queue(mp, "q")
    append(q, 0, 100)
    segs = segments(q)
    (mp / ".snapshots" / "kept").mkdir()
    (mp / ".snapshots" / "gone").mkdir()
    ingest(t, "b.csv", rows(30, 60))
    append(q, 100, 200)
    (mp / ".snapshots" / "gone").rmdir()
    m.kill()
    m.start()
    s = mp / ".snapshots" / "kept"
    assert sorted(os.listdir(mp / ".snapshots")) == ["kept"]
    assert (s / "tables" / "t" / "rows.csv").read_bytes() == csv(rows(0, 30))
    assert segments(s / "queues" / "q") == segs
    expect_errno(errno.EBUSY, os.rmdir, q)
    expect_errno(errno.EBUSY, os.rmdir, t)
    s.rmdir()
    os.rmdir(q)
    os.rmdir(t)
    m.stop()
    r = m.fsck()
    assert r.returncode == 0, r.stdout + r.stderr
    m.start()
