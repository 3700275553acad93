"""POSIX behaviour of the filesystem under test: symbolic links and names.

pjdfstest's ``symlink`` directory (create, readlink, targets up to PATH_MAX - 1 = 4095 bytes,
EEXIST, ENOENT, ENOTDIR), the ELOOP cases of ``open``/``stat`` (symlink loops, O_NOFOLLOW,
SYMLOOP_MAX) and the ENAMETOOLONG cases of every directory-entry operation: a 255-byte name
(NAME_MAX) works, 256 bytes fail, counted in bytes, not characters; names are arbitrary bytes
except ``/`` and NUL; paths over PATH_MAX fail, while a tree deeper than PATH_MAX is reachable
through directory fds. See test_posix.py for the map of the whole suite.
"""

from __future__ import annotations

import os
import stat

import pytest
from posix_support import (
    assert_newer,
    errno_of,
    read_file,
    tick,
    times_ns,
    touch,
    write_file,
)

pytestmark = pytest.mark.timeout(60)


# ----- symlink / readlink -----------------------------------------------------------------------


@pytest.mark.parametrize("target", ["target", "../up/and/over", "/absolute/elsewhere", "with space",
                                    "trailing/", "a//b/./c/..", "é€😀"])
def test_symlink_stores_target_verbatim(mnt, target):
    os.symlink(target, mnt / "l")
    assert os.readlink(mnt / "l") == target
    st = os.lstat(mnt / "l")
    assert stat.S_ISLNK(st.st_mode)
    assert st.st_size == len(os.fsencode(target))  # POSIX: the length of the contents


def _long_target(n: int) -> bytes:
    """A relative path of exactly ``n`` bytes made of components of at most 100 bytes."""
    parts, left = [], n
    while left > 0:
        take = min(100, left)
        if left - take == 1:  # never leave a lone "/" at the end
            take -= 1
        parts.append(b"c" * take)
        left -= take + 1
    out = b"/".join(parts)
    assert len(out) == n, (len(out), n)
    return out


@pytest.mark.parametrize("length", [1, 100, 255, 256, 1023, 1024, 2048, 4094, 4095])
def test_symlink_target_lengths_up_to_4095_bytes(mnt, length):
    target = _long_target(length)
    os.symlink(target, os.fsencode(mnt / "l"))
    assert os.readlink(os.fsencode(mnt / "l")) == target
    assert os.lstat(mnt / "l").st_size == length


def test_symlink_target_of_one_4095_byte_component(mnt):
    target = b"x" * 4095
    os.symlink(target, os.fsencode(mnt / "l"))
    assert os.readlink(os.fsencode(mnt / "l")) == target


def test_symlink_target_of_4096_bytes_enametoolong(mnt):
    assert errno_of(lambda: os.symlink(_long_target(4096), os.fsencode(mnt / "l"))) == "ENAMETOOLONG"
    assert not os.path.lexists(mnt / "l")


def test_symlink_is_followed_by_stat_and_open_but_not_lstat(mnt):
    write_file(mnt / "t", b"target data")
    os.symlink("t", mnt / "l")
    assert os.stat(mnt / "l").st_ino == os.stat(mnt / "t").st_ino
    assert os.lstat(mnt / "l").st_ino != os.stat(mnt / "t").st_ino
    assert read_file(mnt / "l") == b"target data"
    write_file(mnt / "l", b"written via link")
    assert read_file(mnt / "t") == b"written via link"
    assert os.readlink(mnt / "l") == "t"


def test_symlink_to_directory_is_traversed(mnt):
    (mnt / "d" / "sub").mkdir(parents=True)
    write_file(mnt / "d" / "sub" / "f", b"deep")
    os.symlink("d", mnt / "ld")
    assert sorted(os.listdir(mnt / "ld")) == ["sub"]
    assert read_file(mnt / "ld" / "sub" / "f") == b"deep"
    assert os.path.isdir(mnt / "ld")
    assert stat.S_ISLNK(os.lstat(mnt / "ld").st_mode)


def test_symlink_relative_target_resolves_from_the_links_directory(mnt):
    (mnt / "a" / "b").mkdir(parents=True)
    write_file(mnt / "a" / "f", b"in a")
    os.symlink("../f", mnt / "a" / "b" / "l")
    assert read_file(mnt / "a" / "b" / "l") == b"in a"
    # moving the link changes what it resolves to
    os.rename(mnt / "a" / "b" / "l", mnt / "l")
    assert errno_of(lambda: read_file(mnt / "l")) == "ENOENT"


def test_symlink_dangling(mnt):
    os.symlink("nowhere", mnt / "l")
    assert errno_of(lambda: os.stat(mnt / "l")) == "ENOENT"
    assert stat.S_ISLNK(os.lstat(mnt / "l").st_mode)
    assert errno_of(lambda: os.open(mnt / "l", os.O_RDONLY)) == "ENOENT"
    assert os.listdir(mnt) == ["l"]


@pytest.mark.parametrize("kind", ["file", "dir", "symlink", "fifo"])
def test_symlink_onto_existing_name_eexist(mnt, kind):
    p = mnt / "x"
    if kind == "file":
        write_file(p, b"keep")
    elif kind == "dir":
        p.mkdir()
    elif kind == "symlink":
        os.symlink("old", p)
    else:
        os.mkfifo(p)
    assert errno_of(lambda: os.symlink("new", p)) == "EEXIST"
    if kind == "symlink":
        assert os.readlink(p) == "old"
    if kind == "file":
        assert read_file(p) == b"keep"


def test_symlink_errors(mnt):
    write_file(mnt / "f", b"x")
    assert errno_of(lambda: os.symlink("t", mnt / "nodir" / "l")) == "ENOENT"
    assert errno_of(lambda: os.symlink("t", mnt / "f" / "l")) == "ENOTDIR"


def test_symlink_updates_parent_mtime_ctime(mnt):
    (mnt / "d").mkdir()
    _, m0, c0 = times_ns(mnt / "d")
    tick()
    os.symlink("t", mnt / "d" / "l")
    _, m1, c1 = times_ns(mnt / "d")
    assert_newer(m0, m1, "parent mtime")
    assert_newer(c0, c1, "parent ctime")


def test_readlink_on_non_symlink_einval(mnt):
    write_file(mnt / "f", b"x")
    (mnt / "d").mkdir()
    assert errno_of(lambda: os.readlink(mnt / "f")) == "EINVAL"
    assert errno_of(lambda: os.readlink(mnt / "d")) == "EINVAL"
    assert errno_of(lambda: os.readlink(mnt / "missing")) == "ENOENT"


# ----- ELOOP ------------------------------------------------------------------------------------------


def test_symlink_loop_eloop(mnt):
    os.symlink("self", mnt / "self")
    os.symlink("b", mnt / "a")
    os.symlink("a", mnt / "b")
    for p in (mnt / "self", mnt / "a", mnt / "b"):
        assert errno_of(lambda p=p: os.open(p, os.O_RDONLY)) == "ELOOP"
        assert errno_of(lambda p=p: os.stat(p)) == "ELOOP"
        assert errno_of(lambda p=p: os.open(p, os.O_WRONLY | os.O_CREAT, 0o644)) == "ELOOP"
        assert errno_of(lambda p=p: os.mkdir(p / "x")) == "ELOOP"
        assert stat.S_ISLNK(os.lstat(p).st_mode)


def test_symlink_chain_of_eight_resolves(mnt):
    # POSIX: SYMLOOP_MAX is at least 8
    write_file(mnt / "end", b"reached")
    prev = "end"
    for i in range(8):
        os.symlink(prev, mnt / f"l{i}")
        prev = f"l{i}"
    assert read_file(mnt / "l7") == b"reached"


def test_open_nofollow_on_symlink_eloop(mnt):
    write_file(mnt / "t", b"x")
    os.symlink("t", mnt / "l")
    assert errno_of(lambda: os.open(mnt / "l", os.O_RDONLY | os.O_NOFOLLOW)) == "ELOOP"
    os.close(os.open(mnt / "t", os.O_RDONLY | os.O_NOFOLLOW))


# ----- names ------------------------------------------------------------------------------------------


def _make(kind: str, path: bytes, mnt) -> None:
    src = os.fsencode(mnt / "src")
    if kind == "file":
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
    elif kind == "dir":
        os.mkdir(path)
    elif kind == "symlink":
        os.symlink(b"src", path)
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "link":
        os.link(src, path)
    elif kind == "rename":
        os.rename(src, path)
    else:
        raise AssertionError(kind)


NAME_KINDS = ["file", "dir", "symlink", "fifo", "link", "rename"]


@pytest.mark.parametrize("kind", NAME_KINDS)
def test_name_of_255_bytes_works(mnt, kind):
    write_file(mnt / "src", b"source")
    name = b"n" * 255
    path = os.fsencode(mnt) + b"/" + name
    _make(kind, path, mnt)
    assert name in os.listdir(os.fsencode(mnt))
    os.lstat(path)
    if kind == "dir":
        os.rmdir(path)
    else:
        os.unlink(path)
    assert name not in os.listdir(os.fsencode(mnt))


@pytest.mark.parametrize("kind", NAME_KINDS)
def test_name_of_256_bytes_enametoolong(mnt, kind):
    write_file(mnt / "src", b"source")
    path = os.fsencode(mnt) + b"/" + b"n" * 256
    assert errno_of(lambda: _make(kind, path, mnt)) == "ENAMETOOLONG"
    assert sorted(os.listdir(mnt)) == ["src"]
    assert read_file(mnt / "src") == b"source"


def test_lookup_of_256_byte_name_enametoolong(mnt):
    long = os.fsencode(mnt) + b"/" + b"n" * 256
    for op in (os.stat, os.lstat, os.unlink, os.rmdir, os.readlink, lambda p: os.open(p, os.O_RDONLY),
               lambda p: os.listdir(p + b"/x")):
        assert errno_of(lambda op=op: op(long)) == "ENAMETOOLONG"


def test_name_limit_counts_bytes_not_characters(mnt):
    base = os.fsencode(mnt) + b"/"
    ok = "€" * 85  # 3 bytes each: 255 bytes
    assert len(ok.encode()) == 255
    touch(base + ok.encode())
    assert os.listdir(mnt) == [ok]
    assert errno_of(lambda: touch(base + ("€" * 86).encode())) == "ENAMETOOLONG"
    assert errno_of(lambda: touch(base + ("é" * 128).encode())) == "ENAMETOOLONG"
    touch(base + ("é" * 127).encode() + b"e")


def test_names_are_arbitrary_bytes(mnt):
    base = os.fsencode(mnt) + b"/"
    every_byte = bytes(b for b in range(1, 256) if b != ord("/"))
    names = {every_byte[i:i + 16] for i in range(0, len(every_byte), 16)}
    names |= {b"\xff\xfe", b"\x80", b"latin1 \xe9t\xe9", b"new\nline", b"tab\there", b" lead",
              b"trail ", b".hidden", b"...", b"-dash", b"*?[]", b"\\", b"a" * 255}
    names.discard(b".")
    names.discard(b"..")
    for i, name in enumerate(sorted(names)):
        write_file(base + name, b"%d" % i)
    assert sorted(os.listdir(base)) == sorted(names)
    for i, name in enumerate(sorted(names)):
        assert read_file(base + name) == b"%d" % i
        assert os.path.isfile(base + name)
    for name in names:
        os.unlink(base + name)
    assert os.listdir(base) == []


def test_names_are_case_sensitive(mnt):
    write_file(mnt / "name", b"lower")
    write_file(mnt / "NAME", b"upper")
    write_file(mnt / "Name", b"mixed")
    assert sorted(os.listdir(mnt)) == ["NAME", "Name", "name"]
    assert read_file(mnt / "name") == b"lower"
    assert read_file(mnt / "NAME") == b"upper"


def test_dot_and_dotdot_cannot_be_created(mnt):
    (mnt / "d").mkdir()
    for name in (".", ".."):
        p = str(mnt / "d") + "/" + name
        assert errno_of(lambda p=p: os.mkdir(p)) == "EEXIST"
        assert errno_of(lambda p=p: os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)) in ("EEXIST", "EISDIR")
        assert errno_of(lambda p=p: os.symlink("t", p)) == "EEXIST"
    assert os.listdir(mnt / "d") == []


def test_path_longer_than_path_max_enametoolong(mnt):
    (mnt / "d").mkdir()
    # 4096 bytes including the NUL no longer fit PATH_MAX, however short each component is
    prefix = str(mnt / "d") + "/"
    path = prefix + "./" * ((4100 - len(prefix)) // 2) + "f"
    assert len(path) >= 4096
    assert errno_of(lambda: os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)) == "ENAMETOOLONG"
    assert errno_of(lambda: os.stat(path)) == "ENAMETOOLONG"
    assert os.listdir(mnt / "d") == []


def test_tree_deeper_than_path_max_through_directory_fds(mnt):
    name = "d" * 250
    depth = 20  # about 5000 bytes of path below mnt
    fds = [os.open(mnt, os.O_RDONLY | os.O_DIRECTORY)]
    try:
        for _ in range(depth):
            os.mkdir(name, dir_fd=fds[-1])
            fds.append(os.open(name, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fds[-1]))
        fd = os.open("leaf", os.O_RDWR | os.O_CREAT, 0o644, dir_fd=fds[-1])
        try:
            os.write(fd, b"down here")
        finally:
            os.close(fd)
        fd = os.open("leaf", os.O_RDONLY, dir_fd=fds[-1])
        try:
            assert os.read(fd, 100) == b"down here"
        finally:
            os.close(fd)
        # ".." from the bottom leads back up, level by level
        assert os.stat("..", dir_fd=fds[-1]).st_ino == os.fstat(fds[-2]).st_ino
        os.unlink("leaf", dir_fd=fds[-1])
        for level in range(depth, 0, -1):
            os.close(fds.pop())
            os.rmdir(name, dir_fd=fds[level - 1])
        assert os.listdir(mnt) == []
    finally:
        for fd in fds:
            os.close(fd)
