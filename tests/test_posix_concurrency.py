"""POSIX behaviour of the filesystem under test: concurrent access from threads.

O_APPEND positions each write at the end of file with no intervening modification (POSIX
``write``), writes to a regular file are atomic with respect to each other (POSIX 2.9.7), and
each directory operation is atomic. Checked here with threads of one process: pwrite of
disjoint, page-straddling ranges of one file (one shared fd, or one fd each); O_APPEND writers
(every record intact, each writer's records in order); many threads creating (and unlinking)
files and directories in one directory; O_CREAT|O_EXCL, mkdir, symlink, link and rename races
(exactly one winner per name); link/unlink keeping st_nlink exact. And readdir while another
thread creates and deletes other entries: every entry that stays is returned exactly once, no
name twice, also after seeking back to a saved ``d_off`` cookie, and (SPEC §4's stable cookies,
beyond POSIX) when a scan resumes from a cookie on a freshly opened descriptor.
Reads racing a write are not checked: POSIX 2.9.7 asks for that atomicity too, but Linux
filesystems do not provide it (buffered reads take no lock against writers). pjdfstest has no
concurrency tests; see test_posix.py for the map of the whole suite.
"""

from __future__ import annotations

import os
import random
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from posix_support import getdents, pread_all, pwrite_all, read_file, write_file

pytestmark = pytest.mark.timeout(60)


def run_threads(n: int, fn) -> list:
    """Run ``fn(i)`` for i in range(n) on n threads started together; return the results (the
    first exception is raised)."""
    barrier = threading.Barrier(n)

    def go(i):
        barrier.wait()
        return fn(i)

    with ThreadPoolExecutor(n) as ex:
        return list(ex.map(go, range(n)))


def record(i: int, size: int) -> bytes:
    head = f"<record {i:06d}>".encode()
    return (head * (size // len(head) + 1))[:size]


# ----- one file ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("fds", ["shared_fd", "fd_per_thread"])
def test_concurrent_pwrite_of_disjoint_ranges(mnt, fds):
    threads, count, size = 8, 256, 4099  # records straddle page boundaries, neighbours share pages
    p = mnt / "f"
    shared = os.open(p, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        def writer(t):
            fd = shared if fds == "shared_fd" else os.open(p, os.O_WRONLY)
            try:
                order = [i for i in range(count) if i % threads == t]
                random.Random(t).shuffle(order)
                for i in order:
                    pwrite_all(fd, record(i, size), i * size)
            finally:
                if fd != shared:
                    os.close(fd)

        run_threads(threads, writer)
        assert os.fstat(shared).st_size == count * size
        data = pread_all(shared, count * size, 0)
    finally:
        os.close(shared)
    for i in range(count):
        assert data[i * size:(i + 1) * size] == record(i, size), f"record {i} damaged"


def test_concurrent_append_writers_keep_every_record_whole(mnt):
    threads, count, size = 4, 300, 100
    p = mnt / "log"
    write_file(p, b"")

    def appender(t):
        fd = os.open(p, os.O_WRONLY | os.O_APPEND)
        try:
            for i in range(count):
                rec = f"writer {t} record {i:05d} ".encode().ljust(size - 1, b".") + b"\n"
                assert os.write(fd, rec) == size
        finally:
            os.close(fd)

    run_threads(threads, appender)
    data = read_file(p)
    assert len(data) == threads * count * size
    seen = {t: [] for t in range(threads)}
    for k in range(0, len(data), size):
        rec = data[k:k + size]
        assert rec.endswith(b"\n") and rec.startswith(b"writer "), f"torn record at {k}: {rec!r}"
        words = rec.split()
        seen[int(words[1])].append(int(words[3]))
    for t in range(threads):
        assert seen[t] == list(range(count)), f"writer {t}'s records lost, doubled or reordered"


# ----- one directory ---------------------------------------------------------------------------------


def test_concurrent_creates_in_one_directory(mnt):
    threads, per = 8, 100
    d = mnt / "d"
    d.mkdir()

    def creator(t):
        for i in range(per):
            write_file(d / f"t{t}-f{i}", f"{t}/{i}".encode())
        for i in range(per // 10):
            os.mkdir(d / f"t{t}-d{i}")

    run_threads(threads, creator)
    names = os.listdir(d)
    assert len(names) == len(set(names)) == threads * (per + per // 10)
    for t in range(threads):
        for i in range(per):
            assert read_file(d / f"t{t}-f{i}") == f"{t}/{i}".encode()
    assert os.stat(d).st_nlink == 2 + threads * (per // 10)


def test_concurrent_creates_and_unlinks_in_one_directory(mnt):
    threads, per = 6, 150
    d = mnt / "d"
    d.mkdir()

    def churn(t):
        for i in range(per):
            write_file(d / f"t{t}-{i}", b"x")
            if i % 3 == 0:
                os.unlink(d / f"t{t}-{i}")

    run_threads(threads, churn)
    expect = {f"t{t}-{i}" for t in range(threads) for i in range(per) if i % 3}
    assert set(os.listdir(d)) == expect
    assert os.stat(d).st_nlink == 2


@pytest.mark.parametrize("op", ["open_excl", "mkdir", "symlink", "link"])
def test_concurrent_exclusive_creation_has_exactly_one_winner(mnt, op):
    threads, names = 6, 40
    d = mnt / "d"
    d.mkdir()
    write_file(mnt / "src", b"src")

    def make(t, path):
        if op == "open_excl":
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            try:
                os.write(fd, str(t).encode())
            finally:
                os.close(fd)
        elif op == "mkdir":
            os.mkdir(path)
            os.mkdir(os.path.join(path, f"by{t}"))
        elif op == "symlink":
            os.symlink(f"by{t}", path)
        else:
            os.link(mnt / "src", path)

    def racer(t):
        won = []
        order = list(range(names))
        random.Random(t).shuffle(order)
        for n in order:
            try:
                make(t, d / f"n{n}")
                won.append(n)
            except FileExistsError:
                pass
        return won

    results = run_threads(threads, racer)
    winners = {}
    for t, won in enumerate(results):
        for n in won:
            assert n not in winners, f"n{n} created by threads {winners[n]} and {t}"
            winners[n] = t
    assert sorted(winners) == list(range(names))
    for n, t in winners.items():
        p = d / f"n{n}"
        if op == "open_excl":
            assert read_file(p) == str(t).encode()
        elif op == "mkdir":
            assert os.listdir(p) == [f"by{t}"]
        elif op == "symlink":
            assert os.readlink(p) == f"by{t}"
    if op == "link":
        assert os.stat(mnt / "src").st_nlink == 1 + names
    if op == "mkdir":
        assert os.stat(d).st_nlink == 2 + names


def test_concurrent_renames_of_one_source_have_exactly_one_winner(mnt):
    threads, sources = 6, 40
    d = mnt / "d"
    d.mkdir()
    for s in range(sources):
        write_file(d / f"src{s}", f"{s}".encode())

    def racer(t):
        won = []
        for s in range(sources):
            try:
                os.rename(d / f"src{s}", d / f"dst{s}-by{t}")
                won.append(s)
            except FileNotFoundError:
                pass
        return won

    results = run_threads(threads, racer)
    all_won = sorted(s for won in results for s in won)
    assert all_won == list(range(sources)), "a source was renamed twice or not at all"
    names = os.listdir(d)
    assert len(names) == sources and not any(n.startswith("src") for n in names)
    for t, won in enumerate(results):
        for s in won:
            assert read_file(d / f"dst{s}-by{t}") == f"{s}".encode()


def test_concurrent_link_and_unlink_keep_nlink_exact(mnt):
    threads, per = 4, 120
    (mnt / "links").mkdir()
    write_file(mnt / "f", b"one inode")

    def linker(t):
        for i in range(per):
            os.link(mnt / "f", mnt / "links" / f"{t}-{i}")
            if i % 2:
                os.unlink(mnt / "links" / f"{t}-{i - 1}")

    run_threads(threads, linker)
    remaining = os.listdir(mnt / "links")
    assert len(remaining) == threads * per // 2
    assert os.stat(mnt / "f").st_nlink == 1 + len(remaining)


# ----- readdir while the directory changes ------------------------------------------------------------


class Churn:
    """A thread that keeps creating and deleting uniquely named entries (never reusing a name)
    in a directory until stopped. :meth:`advance` waits until it has made a few more changes, so
    that a scan on a fast filesystem still sees changes between any two of its reads."""

    def __init__(self, d, live: int = 40):
        self.d, self.live = d, live
        self.stop = threading.Event()
        self.created = 0
        self.progress = threading.Condition()
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run)

    def advance(self, steps: int = 2) -> None:
        with self.progress:
            target = self.created + steps
            if not self.progress.wait_for(lambda: self.created >= target or self.error, timeout=10):
                raise TimeoutError("the churn thread stopped making progress")

    def _run(self):
        try:
            n = 0
            while not self.stop.is_set():
                name = os.path.join(self.d, f"churn-{n:07d}-{'c' * (n % 50)}")
                if n % 4 == 3:
                    os.mkdir(name)
                else:
                    os.close(os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
                if n >= self.live:
                    old = os.path.join(self.d, f"churn-{n - self.live:07d}-{'c' * ((n - self.live) % 50)}")
                    if (n - self.live) % 4 == 3:
                        os.rmdir(old)
                    else:
                        os.unlink(old)
                n += 1
                with self.progress:
                    self.created = n
                    self.progress.notify_all()
        except BaseException as e:  # surfaced by the test
            with self.progress:
                self.error = e
                self.progress.notify_all()

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join()
        if self.error:
            raise self.error


def _keep_names(d, n: int) -> set[bytes]:
    names = set()
    for i in range(n):
        name = f"keep-{i:04d}-{'k' * (i % 90)}".encode()
        write_file(os.fsencode(d) + b"/" + name, b"")
        names.add(name)
    return names


def _check_scan(names: list[bytes], keep: set[bytes]) -> None:
    dups = {n for n in names if names.count(n) > 1} if len(names) != len(set(names)) else set()
    assert not dups, f"returned more than once: {sorted(dups)[:5]}"
    missing = keep - set(names)
    assert not missing, f"{len(missing)} untouched entries never returned, e.g. {sorted(missing)[:3]}"


def test_readdir_returns_untouched_entries_exactly_once_while_others_change(mnt):
    d = mnt / "d"
    d.mkdir()
    keep = _keep_names(d, 400)
    with Churn(d) as churn:
        for bufsize in (512, 1024, 4096, 32768):
            for _ in range(3):
                fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
                try:
                    names = []
                    while batch := getdents(fd, bufsize):
                        names.extend(e.name for e in batch)
                        churn.advance()
                finally:
                    os.close(fd)
                _check_scan(names, keep)
            listed = os.listdir(d)  # libc's readdir with its own buffer size
            assert keep <= {os.fsencode(n) for n in listed}
            assert len(listed) == len(set(listed))
    assert churn.created > 40, "the churn thread hardly ran"


def test_readdir_seek_to_saved_cookie_while_others_change(mnt):
    # telldir/seekdir on one stream: a position saved before changes is still good after them
    d = mnt / "d"
    d.mkdir()
    keep = _keep_names(d, 300)
    with Churn(d) as churn:
        fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
        try:
            for _ in range(3):
                os.lseek(fd, 0, os.SEEK_SET)
                names, saved = [], []
                while batch := getdents(fd, 700):
                    names.extend(e.name for e in batch)
                    saved.append((len(names), batch[-1].off))
                    churn.advance()
                _check_scan(names, keep)
                for upto, cookie in saved[:: max(1, len(saved) // 6)]:
                    churn.advance(5)
                    os.lseek(fd, cookie, os.SEEK_SET)
                    rest = []
                    while batch := getdents(fd, 700):
                        rest.extend(e.name for e in batch)
                    # untouched entries after the cookie come again, exactly once each
                    _check_scan(names[:upto] + rest, keep)
        finally:
            os.close(fd)
    assert churn.created > 40, "the churn thread hardly ran"


def test_readdir_cookie_resumes_on_new_descriptor_while_others_change(mnt):
    # SPEC §4 "readdir with stable cookies": a d_off stays meaningful for any open of the
    # directory (what telldir/seekdir across reopens and NFS export need), beyond POSIX, which
    # only asks it of the stream that produced it
    d = mnt / "d"
    d.mkdir()
    keep = _keep_names(d, 300)
    with Churn(d) as churn:
        for _ in range(3):
            names, cookie = [], 0
            while True:
                # every few entries: a fresh open, a seek to the last cookie, one small read
                fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
                try:
                    if cookie:
                        os.lseek(fd, cookie, os.SEEK_SET)
                    batch = getdents(fd, 700)
                finally:
                    os.close(fd)
                if not batch:
                    break
                names.extend(e.name for e in batch)
                cookie = batch[-1].off
                churn.advance()
            _check_scan(names, keep)
    assert churn.created > 40, "the churn thread hardly ran"


def test_readdir_of_one_directory_from_many_threads(mnt):
    d = mnt / "d"
    d.mkdir()
    keep = _keep_names(d, 300)

    def scanner(t):
        for _ in range(5):
            fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
            try:
                names = []
                while batch := getdents(fd, 600 + 100 * t):
                    names.extend(e.name for e in batch)
            finally:
                os.close(fd)
            _check_scan(names, keep)
            assert len([n for n in names if n not in (b".", b"..")]) == len(keep)

    run_threads(4, scanner)


def test_unlink_of_entries_during_scan_by_another_thread(mnt):
    d = mnt / "d"
    d.mkdir()
    keep = _keep_names(d, 200)
    doomed = [f"doomed-{i:04d}".encode() for i in range(200)]
    for n in doomed:
        write_file(os.fsencode(d) + b"/" + n, b"")
    go = threading.Event()
    errors = []

    def deleter():
        go.wait()
        for n in doomed:
            try:
                os.unlink(os.fsencode(d) + b"/" + n)
            except OSError as e:
                errors.append(e)

    th = threading.Thread(target=deleter)
    th.start()
    try:
        fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
        try:
            names = []
            go.set()
            while batch := getdents(fd, 512):
                names.extend(e.name for e in batch)
        finally:
            os.close(fd)
    finally:
        go.set()
        th.join()
    assert not errors, errors[:3]
    _check_scan(names, keep)
    assert set(os.listdir(d)) == {n.decode() for n in keep}
