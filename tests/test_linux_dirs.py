"""Directory listings as Linux programs see them (issue 19): ``.`` and ``..`` in every listing,
with their inode numbers, and ``telldir``/``seekdir`` walks that resume from a cookie.

Run through the real mount (``mnt``; ``TRAX_FS_TARGET=local`` runs them on the host's
filesystem, the reference). What the standard tools do with the two entries: ``ls -a`` shows
them, ``os.scandir``/``os.listdir`` hide them, ``find`` never prints them.
"""

from __future__ import annotations

import os
import subprocess

import pytest
from posix_support import getdents, write_file

from traxfs.tools.dirwalk import seekdir_walk

pytestmark = pytest.mark.timeout(300)

DOTS = {b".", b".."}


def _listing(path, bufsize: int = 4096):
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        out = []
        while batch := getdents(fd, bufsize):
            out.extend(batch)
        return out
    finally:
        os.close(fd)


def _dot_inodes(path) -> dict[bytes, int]:
    return {e.name: e.ino for e in _listing(path) if e.name in DOTS}


def test_every_directory_lists_dot_and_dotdot_with_their_inodes(mnt):
    (mnt / "a" / "b").mkdir(parents=True)
    for d, parent in ((mnt, mnt.parent), (mnt / "a", mnt), (mnt / "a" / "b", mnt / "a")):
        assert _dot_inodes(d) == {b".": os.stat(d).st_ino, b"..": os.stat(parent).st_ino}, d
    # the counts in st_nlink are the directory's own, unchanged by the listing
    assert os.stat(mnt / "a").st_nlink == 3 and os.stat(mnt / "a" / "b").st_nlink == 2


def test_the_root_and_a_subtree_list_dot_and_dotdot(fs_mount):
    if fs_mount is None:
        pytest.skip("traxfs only: the root of the mount and its /.trax subtree")
    root = fs_mount.mp
    names = [e.name for e in _listing(root)]
    assert names[:2] == [b".", b".."] and len(names) == len(set(names))
    assert _dot_inodes(root) == {b".": os.stat(root).st_ino, b"..": os.stat(root).st_ino}  # the root's .. is itself
    trax = root / ".trax"
    assert _dot_inodes(trax) == {b".": os.stat(trax).st_ino, b"..": os.stat(root).st_ino}
    assert {e.name for e in _listing(trax)} - DOTS == set(os.fsencode(n) for n in os.listdir(trax))
    snap = root / ".snapshots"
    assert {e.name for e in _listing(snap)} == DOTS


def test_a_large_listing_counts_dot_and_dotdot(mnt):
    d = mnt / "big"
    d.mkdir()
    for i in range(5000):
        os.close(os.open(d / f"f{i:05d}", os.O_WRONLY | os.O_CREAT, 0o644))
    entries = _listing(d, 32768)
    assert len(entries) == 5002 and len({e.name for e in entries}) == 5002
    assert len(os.listdir(d)) == 5000 and sum(1 for _ in os.scandir(d)) == 5000  # Python hides them
    ls = subprocess.run(["ls", "-a1f", str(d)], capture_output=True, check=True).stdout.splitlines()
    assert len(ls) == 5002 and set(ls) >= DOTS
    found = subprocess.run(["find", str(d), "-mindepth", "1"], capture_output=True, check=True).stdout.splitlines()
    assert len(found) == 5000


def test_a_cookie_resumes_after_dot_and_dotdot_too(mnt):
    d = mnt / "d"
    d.mkdir()
    for i in range(60):
        write_file(d / f"entry-{i:03d}", b"")
    full = _listing(d, 400)
    assert [e.name for e in full[:2]] == [b".", b".."]
    assert all(full[i].off < full[i + 1].off for i in range(len(full) - 1))  # cookies rise: "." and ".." below the rest
    fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for k in (0, 1, 2, 30, len(full) - 1):
            os.lseek(fd, full[k].off, os.SEEK_SET)
            rest = []
            while batch := getdents(fd, 400):
                rest.extend(batch)
            assert [e.name for e in rest] == [e.name for e in full[k + 1:]], k
    finally:
        os.close(fd)


def test_a_removed_directory_lists_nothing(mnt):
    (mnt / "gone").mkdir()
    fd = os.open(mnt / "gone", os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.rmdir(mnt / "gone")
        try:
            assert getdents(fd, 4096) == []
        except FileNotFoundError:
            pass  # Linux's own answer for a removed directory
    finally:
        os.close(fd)


def test_a_seekdir_walk_returns_every_entry_once(mnt):
    # telldir after every entry, rewinddir, seekdir back: each step resumes from a cookie
    d = mnt / "walk"
    d.mkdir()
    names = {f"n{i:05d}".encode() for i in range(10_000)}
    for n in names:
        os.close(os.open(os.fsencode(d) + b"/" + n, os.O_WRONLY | os.O_CREAT, 0o644))
    got = seekdir_walk(d)
    assert len(got) == len(set(got)) == 10_002
    assert set(got) == names | DOTS
