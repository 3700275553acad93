"""/tables through a real FUSE mount: creating tables by writing a schema, ingest of CSV and
JSON-lines files (closed in ingest/ or renamed into it as Spark's committer does), rejected
files, views and projections with exact sizes, versions kept by open readers, remount, a
SIGKILL of the daemon in the middle of an ingest (all or nothing, a retry lands it once), rmdir."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from fsmount import traxfs_mount
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from table_data import columns_of, rows, schemas

from traxfs.fs.tables.ingest import parse_csv, parse_jsonl
from traxfs.fs.tables.schema import parse_schema
from traxfs.fs.tables.values import csv_printer

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def m(tmp_path_factory):
    with traxfs_mount(tmp_path_factory.mktemp("tables")) as mount:
        yield mount


_names = iter(range(1 << 30))


def new_table(m, schema: str) -> Path:
    t = m.mp / "tables" / f"t{next(_names)}"
    t.mkdir()
    (t / "schema").write_text(schema + "\n")
    return t


def csv_text(schema, table_rows, names=None) -> bytes:
    """A CSV file of ``table_rows`` as a user (or Spark, with ``escape='"'``) would write it."""
    shows = [csv_printer(c.type) for c in schema.columns]
    out = [",".join(names or schema.names)]
    for r in table_rows:
        out.append(",".join("" if v is None else show(v) for show, v in zip(shows, r, strict=True)))
    return ("\n".join(out) + "\n").encode()


def ingest(t: Path, name: str, data: bytes) -> None:
    with open(t / "ingest" / name, "wb") as f:
        f.write(data)


def status(t: Path) -> dict:
    return json.loads((t / "status.json").read_bytes())


def test_create_by_schema_list_and_read_back(m):
    t = m.mp / "tables" / "people"
    t.mkdir()
    assert sorted(os.listdir(t)) == ["schema", "status.json"]
    assert status(t)["state"] == "waiting for a schema"
    (t / "schema").write_text("id int64 not null, name string, born date\n")
    assert sorted(os.listdir(t)) == ["columns", "ingest", "rows.csv", "rows.jsonl", "schema", "status.json"]
    assert (t / "schema").read_text() == "id int64 not null, name string, born date\n"
    assert sorted(os.listdir(t / "columns")) == ["born.csv", "born.jsonl", "id.csv", "id.jsonl", "name.csv",
                                                 "name.jsonl"]
    assert (t / "rows.csv").read_bytes() == b"id,name,born\n" and (t / "rows.csv").stat().st_size == 13
    assert (t / "rows.jsonl").read_bytes() == b""
    assert "people" in os.listdir(m.mp / "tables")
    with pytest.raises(PermissionError):
        (t / "schema").write_text("x int64\n")
    with pytest.raises(FileExistsError):
        (m.mp / "tables" / "people").mkdir()


def test_bad_schema_is_einval_and_creates_nothing(m):
    t = m.mp / "tables" / "bad"
    t.mkdir()
    fd = os.open(t / "schema", os.O_WRONLY)
    with pytest.raises(OSError) as ex:
        os.write(fd, b"a int64, b nosuchtype\n")
    os.close(fd)
    assert ex.value.errno == errno.EINVAL
    st_ = status(t)
    assert st_["state"] == "waiting for a schema" and "unknown type 'nosuchtype'" in st_["schema_error"]
    assert sorted(os.listdir(t)) == ["schema", "status.json"]
    with pytest.raises(OSError) as ex:  # a schema without a final newline: refused at close
        with open(t / "schema", "w") as f:
            f.write("a decimal(40,2)")
    assert ex.value.errno == errno.EINVAL and "1 <= p <= 18" in status(t)["schema_error"]
    (t / "schema").write_text("a int64")  # and a good one still creates it
    assert status(t)["state"] == "ready"
    os.rmdir(t)


def test_ingest_csv_and_jsonl_then_views(m):
    t = new_table(m, "id int64 not null, name string, price decimal(8,2), ok bool")
    ingest(t, "a.csv", b'id,name,ok,price\n1,"Smith, J",true,3.50\n2,,false,\n3,"say ""hi""\nthere",,-0.25\n')
    assert os.listdir(t / "ingest") == [".rejected"]
    ingest(t, "b.jsonl", b'{"id": 4, "name": "\xc3\xbc", "price": 10}\n{"id": 5, "ok": true}\n')
    rows_csv = (t / "rows.csv").read_bytes()
    assert rows_csv == (b'id,name,price,ok\n1,"Smith, J",3.50,true\n2,,,false\n3,"say ""hi""\nthere",-0.25,\n'
                        b'4,\xc3\xbc,10.00,\n5,,,true\n')
    assert (t / "rows.csv").stat().st_size == len(rows_csv)
    jl = (t / "rows.jsonl").read_bytes()
    assert (t / "rows.jsonl").stat().st_size == len(jl)
    assert [json.loads(x) for x in jl.splitlines()][3] == {"id": 4, "name": "ü", "price": 10.0, "ok": None}
    proj = (t / "columns" / "ok,id.csv").read_bytes()
    assert proj == b"ok,id\ntrue,1\nfalse,2\n,3\n,4\ntrue,5\n" and (t / "columns" / "ok,id.csv").stat().st_size == len(proj)
    assert (t / "columns" / "id.jsonl").read_bytes() == b"".join(b'{"id": %d}\n' % i for i in range(1, 6))
    for bad in ("nope.csv", "id,id.csv", "id.txt", "id,nope.jsonl"):
        assert not (t / "columns" / bad).exists()
    s = status(t)
    assert (s["rows"], s["version"], [i["file"] for i in s["ingests"]]) == (5, 2, ["a.csv", "b.jsonl"])


def test_a_malformed_file_is_rejected_whole(m):
    t = new_table(m, "id int64 not null, v float64")
    ingest(t, "good.csv", b"id,v\n1,1.5\n")
    ingest(t, "bad.csv", b"id,v\n2,2.5\n3,x\n4,4\n")
    ingest(t, "bad2.jsonl", b'{"id": 5}\n{"id": null}\n')
    assert sorted(os.listdir(t / "ingest" / ".rejected")) == ["bad.csv", "bad.csv.error", "bad2.jsonl",
                                                              "bad2.jsonl.error"]
    err = (t / "ingest" / ".rejected" / "bad.csv.error").read_text()
    assert err.startswith("bad.csv: line 3, column 2 (v): could not convert string to float"), err
    assert (t / "ingest" / ".rejected" / "bad.csv").read_bytes() == b"id,v\n2,2.5\n3,x\n4,4\n"
    assert "line 2, column 1 (id): NULL" in (t / "ingest" / ".rejected" / "bad2.jsonl.error").read_text()
    assert (t / "rows.csv").read_bytes() == b"id,v\n1,1.5\n"
    assert [r["file"] for r in status(t)["rejected"]] == ["bad.csv", "bad2.jsonl"]
    os.unlink(t / "ingest" / ".rejected" / "bad.csv")  # the user cleans up
    assert "bad.csv" not in os.listdir(t / "ingest" / ".rejected")


def test_rejected_files_survive_a_remount(m):
    """Rejected files and their .error files are kept by the table store: there after a remount,
    byte for byte, until the user removes them (each part on its own); a second rejection of a
    name replaces the first; they cannot be renamed out or changed. (The module's fsck at the
    end finds the pages of the ones left owned and verified, and nothing leaked.)"""
    t = new_table(m, "id int64 not null")
    rej = t / "ingest" / ".rejected"
    ingest(t, "bad.csv", b"id\n1\nfirst\n")
    ingest(t, "bad.csv", b"id\n1\nx\n")  # the same name again: replaces it
    ingest(t, "other.jsonl", b'{"id": "z"}\n')
    errors = {n: (rej / n).read_text() for n in ("bad.csv.error", "other.jsonl.error")}
    assert errors["bad.csv.error"].startswith("bad.csv: line 3, column 1 (id): invalid literal")
    os.unlink(rej / "other.jsonl")  # the user keeps only the reason
    with pytest.raises(OSError) as ex:
        os.rename(rej / "bad.csv", t / "ingest" / "again.csv")
    assert ex.value.errno == errno.EPERM
    with pytest.raises(OSError) as ex:
        os.truncate(rej / "bad.csv", 0)
    assert ex.value.errno == errno.EPERM
    m.stop()
    m.start()
    assert sorted(os.listdir(rej)) == ["bad.csv", "bad.csv.error", "other.jsonl.error"]
    assert (rej / "bad.csv").read_bytes() == b"id\n1\nx\n" and (rej / "bad.csv").stat().st_size == 7
    assert {n: (rej / n).read_text() for n in errors} == errors
    assert sorted(r["file"] for r in status(t)["rejected"]) == ["bad.csv", "other.jsonl"]
    assert status(t)["rows"] == 0
    for n in ("bad.csv.error", "other.jsonl.error"):
        os.unlink(rej / n)
    m.stop()
    m.start()
    assert os.listdir(rej) == ["bad.csv"] and (rej / "bad.csv").read_bytes() == b"id\n1\nx\n"
    os.unlink(rej / "bad.csv")
    ingest(t, "left.csv", b"id\n\n")  # one left for the fsck at the end (a NULL: rejected)
    gone = new_table(m, "a int32")
    ingest(gone, "bad.csv", b"a\nnope\n")
    os.rmdir(gone)  # its rejected file's pages go with it
    m.stop()
    m.start()
    assert os.listdir(rej) == ["left.csv", "left.csv.error"]


def test_the_committer_dance(m):
    """What Hadoop's FileOutputCommitter does: a tree under _temporary, files renamed into
    ingest/, _SUCCESS, the tree removed. Every file's rows land once, nothing before its rename."""
    t = new_table(m, "k int64, s string")
    ing = t / "ingest"
    attempt = ing / "_temporary" / "0" / "_temporary" / "attempt_0"
    attempt.mkdir(parents=True)
    (attempt / "part-0.csv").write_bytes(b"k,s\n1,a\n2,b\n")
    (attempt / ".part-0.csv.crc").write_bytes(b"crc!")
    os.chmod(attempt / "part-0.csv", 0o644)
    assert (t / "rows.csv").read_bytes() == b"k,s\n"  # not yet
    task = ing / "_temporary" / "0" / "task_0"
    os.rename(attempt, task)  # task commit: the attempt folder renamed
    assert sorted(os.listdir(task)) == [".part-0.csv.crc", "part-0.csv"]
    os.rename(task / "part-0.csv", ing / "part-0.csv")  # job commit: files renamed up
    os.rename(task / ".part-0.csv.crc", ing / ".part-0.csv.crc")
    (ing / "_SUCCESS").write_bytes(b"")
    for d in (task, ing / "_temporary" / "0" / "_temporary", ing / "_temporary" / "0", ing / "_temporary"):
        os.rmdir(d)
    deadline = time.monotonic() + 10  # _SUCCESS goes at its release, which close(2) does not wait for
    while os.listdir(ing) != [".rejected"] and time.monotonic() < deadline:
        time.sleep(0.05)
    assert os.listdir(ing) == [".rejected"]
    assert (t / "rows.csv").read_bytes() == b"k,s\n1,a\n2,b\n"
    # the same file again (a retry whose answer was lost) is recognised; other contents are not
    ingest(t, "part-0.csv", b"k,s\n1,a\n2,b\n")
    ingest(t, "part-1.csv", b"k,s\n1,a\n2,b\n")
    assert (t / "rows.csv").read_bytes() == b"k,s\n1,a\n2,b\n1,a\n2,b\n"
    assert [i["duplicate"] for i in status(t)["ingests"]] == [False, True, False]


def test_a_marker_outlives_a_childs_close(m):
    """Hadoop's create of _SUCCESS: the JVM keeps its descriptor open while a child it forked
    closes the inherited copy (a flush of the same open) and chmods the file by name. The
    marker must still be there for the chmod; it goes at the release."""
    t = new_table(m, "k int64")
    marker = t / "ingest" / "_SUCCESS"
    fd = os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        closes_then_chmods = "import os, sys; os.close(int(sys.argv[1])); os.execvp('chmod', ['chmod', '644', sys.argv[2]])"
        child = subprocess.run([sys.executable, "-c", closes_then_chmods, str(fd), str(marker)],
                               pass_fds=(fd,), capture_output=True, text=True, timeout=30)
        assert child.returncode == 0, child.stderr
        assert os.stat(marker).st_mode & 0o777 == 0o644
    finally:
        os.close(fd)
    deadline = time.monotonic() + 10  # gone at its release, which close(2) does not wait for
    while marker.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not marker.exists()


def test_an_open_reader_keeps_its_version(m):
    t = new_table(m, "n int32")
    ingest(t, "1.csv", b"n\n1\n2\n")
    with open(t / "rows.csv", "rb") as f:
        size = os.fstat(f.fileno()).st_size
        ingest(t, "2.csv", b"n\n3\n")
        assert (t / "rows.csv").stat().st_size == size + 2
        assert f.read() == b"n\n1\n2\n"
        with pytest.raises(OSError) as ex:
            os.rmdir(t)  # a view is open
        assert ex.value.errno == errno.EBUSY
    assert (t / "rows.csv").read_bytes() == b"n\n1\n2\n3\n"


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(st.data())
def test_projections_equal_columns_of_rows_csv(m, data):
    schema = data.draw(schemas(max_columns=5))
    t = new_table(m, schema.text())
    batches = data.draw(st.lists(rows(schema, max_rows=25), min_size=1, max_size=3))
    for k, b in enumerate(batches):
        ingest(t, f"b{k}.csv", csv_text(schema, b))
    assert os.listdir(t / "ingest") == [".rejected"], (t / "ingest" / ".rejected").iterdir()
    everything = columns_of(schema, [r for b in batches for r in b])
    whole = (t / "rows.csv").read_bytes()
    assert len(whole) == (t / "rows.csv").stat().st_size
    assert parse_csv(schema, whole) == everything
    jl = (t / "rows.jsonl").read_bytes()
    assert len(jl) == (t / "rows.jsonl").stat().st_size and parse_jsonl(schema, jl) == everything
    proj = data.draw(st.permutations(range(len(schema.columns))).map(lambda p: p[: max(1, len(p) // 2 + 1)]))
    name = ",".join(schema.columns[c].name for c in proj)
    sub = parse_schema(", ".join(schema.columns[c].text() for c in proj))
    for fmt, parse in (("csv", parse_csv), ("jsonl", parse_jsonl)):
        path = t / "columns" / f"{name}.{fmt}"
        got = path.read_bytes()
        assert len(got) == path.stat().st_size
        assert parse(sub, got) == [everything[c] for c in proj]


def test_remount_keeps_everything_and_rmdir_gives_space_back(m):
    t = new_table(m, "a int64, b string")
    ingest(t, "x.csv", b"a,b\n" + b"".join(b"%d,row %d\n" % (i, i) for i in range(20000)))
    before = (t / "rows.csv").read_bytes()
    free = os.statvfs(m.mp).f_bfree
    m.stop()
    m.start()
    assert (t / "rows.csv").read_bytes() == before and (t / "schema").read_text() == "a int64, b string\n"
    assert status(t)["rows"] == 20000
    os.rmdir(t)
    assert not t.exists()
    assert os.statvfs(m.mp).f_bfree > free


def _written_bytes(pid: int) -> int:
    """Bytes the process has handed to write calls (``/proc/PID/io``: wchar)."""
    with open(f"/proc/{pid}/io") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("wchar:"))


def test_sigkill_in_the_middle_of_an_ingest_is_all_or_nothing(tmp_path):
    n = 1_000_000
    body = b"a,b\n" + b"".join(b"%d,value %d\n" % (i, i) for i in range(n))
    with traxfs_mount(tmp_path) as mount:
        for _ in range(3):  # a loaded machine may run the close to its end before the kill
            t = new_table(mount, "a int64, b string")
            written = threading.Event()
            outcome: list = []

            def write(t=t, written=written, outcome=outcome):
                try:
                    with open(t / "ingest" / "big.csv", "wb") as f:
                        f.write(body)
                        written.set()
                    outcome.append("closed")  # the close (parse, append, commit) answered
                except OSError as ex:
                    outcome.append(ex.errno)

            w = threading.Thread(target=write)
            w.start()
            assert written.wait(60)
            base = _written_bytes(mount.proc.pid)  # the file is written: the close parses, then appends
            deadline = time.monotonic() + 30
            while _written_bytes(mount.proc.pid) < base + (1 << 20) and time.monotonic() < deadline:
                time.sleep(0.002)  # the append writes PAX pages before it commits: kill it then
            mount.kill()
            w.join(60)
            mount.start()
            rows_now = status(t)["rows"]
            assert outcome, "the writer never returned"
            if outcome[0] == "closed":  # the close answered before the kill: every row is there
                assert rows_now == n, (outcome, rows_now)
                continue
            assert rows_now in (0, n), rows_now
            ingest(t, "big.csv", body)  # the writer retries: lands once either way
            s = status(t)
            assert s["rows"] == n and (t / "rows.csv").stat().st_size == len(body), (outcome, rows_now, s)
            return
        pytest.fail("in three attempts the kill never came before the close returned")


def test_trax_table_commands(m):
    from fsmount import trax

    path = str(m.mp / "tables" / "cli")
    r = trax("table", "create", path, "--schema", "a int64 not null, b string", home=m.home)
    assert r.returncode == 0 and "table cli created: a int64 not null, b string" in r.stdout
    r = trax("--json", "table", "create", str(m.mp / "tables" / "cli2"), "--schema", "a int99", home=m.home,
             check=False)
    assert r.returncode == 1 and "unknown type 'int99'" in json.loads(r.stdout)["error"]
    assert not (m.mp / "tables" / "cli2").exists()  # nothing created
    ingest(m.mp / "tables" / "cli", "x.csv", b"a,b\n1,x\n2,y\n")
    r = trax("--json", "table", "list", str(m.mp), home=m.home)
    assert {d["table"]: d["rows"] for d in json.loads(r.stdout) if d["table"] == "cli"} == {"cli": 2}
    r = trax("table", "show", path, home=m.home)
    assert "rows      2" in r.stdout and "schema    a int64 not null, b string" in r.stdout
    assert trax("table", "remove", path, home=m.home).returncode == 0
    assert trax("table", "show", path, home=m.home, check=False).returncode == 1
    r = trax("table", "create", str(m.mp / "nottables" / "x"), "--schema", "a int64", home=m.home, check=False)
    assert r.returncode == 2 and "MOUNT/tables/NAME" in r.stderr


def test_concurrent_ingests_land_every_row_once(m):
    t = new_table(m, "w int32 not null, i int64 not null")
    errors: list = []

    def writer(w: int) -> None:
        try:
            for k in range(5):
                ingest(t, f"w{w}-{k}.csv", b"w,i\n" + b"".join(b"%d,%d\n" % (w, k * 1000 + i) for i in range(1000)))
        except OSError as ex:
            errors.append(ex)

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(120)
    assert not errors
    cols = parse_csv(parse_schema("w int32 not null, i int64 not null"), (t / "rows.csv").read_bytes())
    assert sorted(zip(*cols, strict=True)) == [(w, i) for w in range(4) for i in range(5000)]
    assert status(t)["version"] == 20


def test_lookup_by_key(m):
    t = new_table(m, "order int64 not null, line int32 not null, note string, key(order,line)")
    assert "key" in os.listdir(t) and os.listdir(t / "key") == []
    ingest(t, "a.csv", b'order,line,note\n1,1,"a, b"\n1,2,\n2,1,x\n')
    assert (t / "key" / "1,2").read_bytes() == b"order,line,note\n1,2,\n"
    assert (t / "key" / "1,1").read_bytes() == b'order,line,note\n1,1,"a, b"\n'
    assert (t / "key" / "2,1").stat().st_size == len(b"order,line,note\n2,1,x\n")
    for missing in ("3,1", "1", "x,1", "1,2,3"):
        assert not (t / "key" / missing).exists()
    ingest(t, "b.csv", b"order,line,note\n5,5,new\n2,1,again\n")  # a key already in the table
    err = (t / "ingest" / ".rejected" / "b.csv.error").read_text()
    assert "row 2 (not counting the header): key (order,line) = (2,1) is already in the table" in err, err
    assert status(t)["rows"] == 3 and not (t / "key" / "5,5").exists()
    nokey = new_table(m, "a int64")
    assert "key" not in os.listdir(nokey) and not (nokey / "key").exists()


def test_trax_table_create_with_a_key(m):
    from fsmount import trax

    path = m.mp / "tables" / "keyed"
    trax("table", "create", str(path), "--schema", "a int64 not null, b string", "--key", "a", home=m.home)
    assert (path / "schema").read_text() == "a int64 not null, b string, key(a)\n"
    r = trax("table", "create", str(m.mp / "tables" / "bad"), "--schema", "a int64", "--key", "a", home=m.home,
             check=False)
    assert r.returncode == 1 and "must be declared not null" in r.stderr
