"""POSIX behaviour of the filesystem under test: directories — mkdir, rmdir, rename, readdir,
link counts.

pjdfstest's ``mkdir``, ``rmdir`` and ``rename`` directories: modes and owners of new
directories, parent timestamps, EEXIST / ENOENT / ENOTDIR / ENOTEMPTY / EINVAL; rename of
files, directories, symlinks and fifos within and across directories, onto an existing file or
(empty / non-empty) directory, the EISDIR / ENOTDIR combinations, a directory into its own
subtree (EINVAL), a hard link onto itself (a no-op), ``..`` of a moved directory, and
``renameat2`` with RENAME_NOREPLACE and RENAME_EXCHANGE. Link counts: a directory has
2 + (number of subdirectories), a file one per hard link. readdir in one thread (entries exactly
once, ``d_off`` cookies resume); readdir under concurrent change is in
test_posix_concurrency.py. See test_posix.py for the map of the whole suite.
"""

from __future__ import annotations

import errno
import os
import stat

import pytest
from posix_support import (
    RENAME_EXCHANGE,
    RENAME_NOREPLACE,
    assert_newer,
    assert_same,
    errno_of,
    getdents,
    list_dir_small,
    read_file,
    renameat2,
    tick,
    times_ns,
    umask,
    write_file,
)

pytestmark = pytest.mark.timeout(60)


def nlink(p) -> int:
    return os.lstat(p).st_nlink


def ino(p) -> int:
    return os.lstat(p).st_ino


# ----- mkdir ----------------------------------------------------------------------------------------


def test_mkdir_creates_empty_directory_with_mode_owner_and_nlink_2(mnt):
    (mnt / "parent").mkdir()
    n0 = nlink(mnt / "parent")
    with umask(0o022):
        os.mkdir(mnt / "parent" / "d", 0o777)
    st = os.lstat(mnt / "parent" / "d")
    assert stat.S_ISDIR(st.st_mode)
    assert stat.S_IMODE(st.st_mode) == 0o755
    assert st.st_uid == os.geteuid()
    assert st.st_gid in (os.getegid(), os.stat(mnt / "parent").st_gid)
    assert st.st_nlink == 2
    assert os.listdir(mnt / "parent" / "d") == []
    assert nlink(mnt / "parent") == n0 + 1
    assert ino(mnt / "parent" / "d" / "..") == ino(mnt / "parent")
    assert ino(mnt / "parent" / "d" / ".") == st.st_ino


@pytest.mark.parametrize("mode", [0o700, 0o750, 0o555, 0o000, 0o1777])
def test_mkdir_mode_is_applied(mnt, mode):
    with umask(0):
        os.mkdir(mnt / "d", mode)
    # POSIX leaves bits beyond 0777 implementation-defined; Linux and the rest keep the sticky bit
    assert stat.S_IMODE(os.stat(mnt / "d").st_mode) & 0o777 == mode & 0o777


def test_mkdir_updates_parent_mtime_ctime(mnt):
    (mnt / "p").mkdir()
    _, m0, c0 = times_ns(mnt / "p")
    tick()
    os.mkdir(mnt / "p" / "d")
    _, m1, c1 = times_ns(mnt / "p")
    assert_newer(m0, m1, "parent mtime")
    assert_newer(c0, c1, "parent ctime")


@pytest.mark.parametrize("kind", ["file", "dir", "symlink", "dangling_symlink", "fifo"])
def test_mkdir_on_existing_name_eexist(mnt, kind):
    p = mnt / "x"
    if kind == "file":
        write_file(p, b"x")
    elif kind == "dir":
        p.mkdir()
    elif kind == "symlink":
        (mnt / "t").mkdir()
        os.symlink("t", p)
    elif kind == "dangling_symlink":
        os.symlink("nowhere", p)
    else:
        os.mkfifo(p)
    assert errno_of(lambda: os.mkdir(p)) == "EEXIST"
    assert not os.path.lexists(mnt / "nowhere")


def test_mkdir_failure_keeps_parent_times(mnt):
    (mnt / "p" / "d").mkdir(parents=True)
    _, m0, c0 = times_ns(mnt / "p")
    tick()
    assert errno_of(lambda: os.mkdir(mnt / "p" / "d")) == "EEXIST"
    _, m1, c1 = times_ns(mnt / "p")
    assert (m1, c1) == (m0, c0)


def test_mkdir_errors(mnt):
    write_file(mnt / "f", b"x")
    assert errno_of(lambda: os.mkdir(mnt / "nodir" / "d")) == "ENOENT"
    assert errno_of(lambda: os.mkdir(mnt / "f" / "d")) == "ENOTDIR"


def test_mkdir_with_trailing_slash(mnt):
    os.mkdir(str(mnt / "d") + "/")
    assert os.path.isdir(mnt / "d")


# ----- rmdir ----------------------------------------------------------------------------------------


def test_rmdir_removes_empty_directory_and_decrements_parent_nlink(mnt):
    (mnt / "p" / "d").mkdir(parents=True)
    n0 = nlink(mnt / "p")
    os.rmdir(mnt / "p" / "d")
    assert not os.path.lexists(mnt / "p" / "d")
    assert nlink(mnt / "p") == n0 - 1
    assert os.listdir(mnt / "p") == []
    os.mkdir(mnt / "p" / "d")  # the name can be used again
    assert os.listdir(mnt / "p" / "d") == []


def test_rmdir_updates_parent_mtime_ctime(mnt):
    (mnt / "p" / "d").mkdir(parents=True)
    _, m0, c0 = times_ns(mnt / "p")
    tick()
    os.rmdir(mnt / "p" / "d")
    _, m1, c1 = times_ns(mnt / "p")
    assert_newer(m0, m1, "parent mtime")
    assert_newer(c0, c1, "parent ctime")


@pytest.mark.parametrize("content", ["file", "dir", "symlink", "fifo"])
def test_rmdir_non_empty_directory_fails(mnt, content):
    d = mnt / "d"
    d.mkdir()
    if content == "file":
        write_file(d / "x", b"")
    elif content == "dir":
        (d / "x").mkdir()
    elif content == "symlink":
        os.symlink("nowhere", d / "x")
    else:
        os.mkfifo(d / "x")
    # POSIX allows EEXIST as well as ENOTEMPTY
    assert errno_of(lambda: os.rmdir(d)) in ("ENOTEMPTY", "EEXIST")
    assert os.listdir(d) == ["x"]


def test_rmdir_errors(mnt):
    write_file(mnt / "f", b"x")
    (mnt / "d").mkdir()
    os.symlink("d", mnt / "ld")
    assert errno_of(lambda: os.rmdir(mnt / "f")) == "ENOTDIR"
    assert errno_of(lambda: os.rmdir(mnt / "ld")) == "ENOTDIR"
    assert errno_of(lambda: os.rmdir(mnt / "missing")) == "ENOENT"
    assert errno_of(lambda: os.rmdir(mnt / "f" / "x")) == "ENOTDIR"
    assert errno_of(lambda: os.rmdir(str(mnt / "d") + "/.")) == "EINVAL"
    assert errno_of(lambda: os.rmdir(str(mnt / "d") + "/..")) != "OK"
    assert os.path.isdir(mnt / "d") and os.path.islink(mnt / "ld")


def test_rmdir_of_open_directory_leaves_fd_usable_and_empty(mnt):
    (mnt / "d").mkdir()
    fd = os.open(mnt / "d", os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.rmdir(mnt / "d")
        assert os.fstat(fd).st_nlink == 0
        # POSIX: "." and ".." are gone; Linux refuses to read a removed directory at all
        try:
            assert getdents(fd, 4096) == []
        except FileNotFoundError:
            pass
        # nothing can be created in a removed directory
        assert errno_of(lambda: os.open("x", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd)) == "ENOENT"
    finally:
        os.close(fd)


# ----- rename ----------------------------------------------------------------------------------------


def test_rename_file_within_directory(mnt):
    write_file(mnt / "a", b"content")
    i = ino(mnt / "a")
    os.rename(mnt / "a", mnt / "b")
    assert not os.path.lexists(mnt / "a")
    assert ino(mnt / "b") == i
    assert read_file(mnt / "b") == b"content"
    assert os.listdir(mnt) == ["b"]


def test_rename_file_across_directories(mnt):
    (mnt / "x").mkdir()
    (mnt / "y").mkdir()
    write_file(mnt / "x" / "f", b"moving")
    nx, ny = nlink(mnt / "x"), nlink(mnt / "y")
    os.rename(mnt / "x" / "f", mnt / "y" / "g")
    assert os.listdir(mnt / "x") == [] and os.listdir(mnt / "y") == ["g"]
    assert read_file(mnt / "y" / "g") == b"moving"
    assert (nlink(mnt / "x"), nlink(mnt / "y")) == (nx, ny)  # files do not count


def test_rename_directory_across_directories_moves_dotdot_and_link_counts(mnt):
    (mnt / "x" / "d" / "inner").mkdir(parents=True)
    write_file(mnt / "x" / "d" / "f", b"f")
    (mnt / "y").mkdir()
    nx, ny, nd = nlink(mnt / "x"), nlink(mnt / "y"), nlink(mnt / "x" / "d")
    os.rename(mnt / "x" / "d", mnt / "y" / "e")
    assert nlink(mnt / "x") == nx - 1
    assert nlink(mnt / "y") == ny + 1
    assert nlink(mnt / "y" / "e") == nd
    assert ino(mnt / "y" / "e" / "..") == ino(mnt / "y")
    assert ino(mnt / "y" / "e" / "inner" / ".." / "..") == ino(mnt / "y")
    assert sorted(os.listdir(mnt / "y" / "e")) == ["f", "inner"]


def test_rename_directory_within_directory_keeps_link_count(mnt):
    (mnt / "p" / "d").mkdir(parents=True)
    n = nlink(mnt / "p")
    os.rename(mnt / "p" / "d", mnt / "p" / "e")
    assert nlink(mnt / "p") == n
    assert os.listdir(mnt / "p") == ["e"]


def test_rename_symlink_moves_the_link_itself(mnt):
    write_file(mnt / "t", b"t")
    os.symlink("t", mnt / "l")
    i = ino(mnt / "l")
    os.rename(mnt / "l", mnt / "m")
    assert os.readlink(mnt / "m") == "t"
    assert ino(mnt / "m") == i
    assert read_file(mnt / "t") == b"t"
    # a dangling symlink moves just as well
    os.symlink("nowhere", mnt / "dangling")
    os.rename(mnt / "dangling", mnt / "moved")
    assert os.readlink(mnt / "moved") == "nowhere"


def test_rename_fifo(mnt):
    os.mkfifo(mnt / "p")
    os.rename(mnt / "p", mnt / "q")
    assert stat.S_ISFIFO(os.lstat(mnt / "q").st_mode)


def test_rename_onto_existing_file_replaces_it(mnt):
    write_file(mnt / "src", b"new")
    write_file(mnt / "dst", b"old")
    os.link(mnt / "dst", mnt / "dst_other_name")
    i_src = ino(mnt / "src")
    os.rename(mnt / "src", mnt / "dst")
    assert ino(mnt / "dst") == i_src
    assert read_file(mnt / "dst") == b"new"
    assert sorted(os.listdir(mnt)) == ["dst", "dst_other_name"]
    # the replaced file lost one link and nothing else
    assert nlink(mnt / "dst_other_name") == 1
    assert read_file(mnt / "dst_other_name") == b"old"


def test_rename_onto_open_file_keeps_it_readable_through_fd(mnt):
    write_file(mnt / "src", b"new")
    write_file(mnt / "dst", b"old contents")
    fd = os.open(mnt / "dst", os.O_RDONLY)
    try:
        os.rename(mnt / "src", mnt / "dst")
        assert os.read(fd, 100) == b"old contents"
        assert os.fstat(fd).st_nlink == 0
    finally:
        os.close(fd)
    assert read_file(mnt / "dst") == b"new"


@pytest.mark.parametrize("src_kind", ["symlink", "fifo", "dangling_symlink"])
def test_rename_special_file_onto_existing_file(mnt, src_kind):
    if src_kind == "fifo":
        os.mkfifo(mnt / "src")
    else:
        os.symlink("nowhere" if src_kind == "dangling_symlink" else "dst", mnt / "src")
    write_file(mnt / "dst", b"old")
    i = ino(mnt / "src")
    os.rename(mnt / "src", mnt / "dst")
    assert ino(mnt / "dst") == i
    assert os.listdir(mnt) == ["dst"]


def test_rename_directory_onto_empty_directory(mnt):
    (mnt / "a" / "src" / "inner").mkdir(parents=True)
    (mnt / "b" / "dst").mkdir(parents=True)
    na, nb = nlink(mnt / "a"), nlink(mnt / "b")
    i = ino(mnt / "a" / "src")
    os.rename(mnt / "a" / "src", mnt / "b" / "dst")
    assert ino(mnt / "b" / "dst") == i
    assert os.listdir(mnt / "b" / "dst") == ["inner"]
    assert nlink(mnt / "a") == na - 1
    assert nlink(mnt / "b") == nb  # one subdirectory replaced another
    assert ino(mnt / "b" / "dst" / "..") == ino(mnt / "b")


def test_rename_directory_onto_non_empty_directory_fails(mnt):
    (mnt / "src").mkdir()
    (mnt / "dst" / "x").mkdir(parents=True)
    assert errno_of(lambda: os.rename(mnt / "src", mnt / "dst")) in ("ENOTEMPTY", "EEXIST")
    assert os.path.isdir(mnt / "src")
    assert os.listdir(mnt / "dst") == ["x"]


def test_rename_file_onto_directory_eisdir(mnt):
    write_file(mnt / "f", b"x")
    (mnt / "d").mkdir()
    assert errno_of(lambda: os.rename(mnt / "f", mnt / "d")) == "EISDIR"
    (mnt / "full" / "x").mkdir(parents=True)
    assert errno_of(lambda: os.rename(mnt / "f", mnt / "full")) == "EISDIR"
    assert read_file(mnt / "f") == b"x" and os.path.isdir(mnt / "d")


@pytest.mark.parametrize("dst_kind", ["file", "symlink", "fifo"])
def test_rename_directory_onto_non_directory_enotdir(mnt, dst_kind):
    (mnt / "d").mkdir()
    if dst_kind == "file":
        write_file(mnt / "x", b"x")
    elif dst_kind == "symlink":
        os.symlink("d", mnt / "x")  # even a symlink to a directory is not one
    else:
        os.mkfifo(mnt / "x")
    assert errno_of(lambda: os.rename(mnt / "d", mnt / "x")) == "ENOTDIR"
    assert os.path.isdir(mnt / "d")
    assert not stat.S_ISDIR(os.lstat(mnt / "x").st_mode)


def test_rename_directory_into_its_own_subtree_einval(mnt):
    (mnt / "a" / "b" / "c").mkdir(parents=True)
    assert errno_of(lambda: os.rename(mnt / "a", mnt / "a" / "x")) == "EINVAL"
    assert errno_of(lambda: os.rename(mnt / "a", mnt / "a" / "b" / "c" / "x")) == "EINVAL"
    assert errno_of(lambda: os.rename(mnt / "a" / "b", mnt / "a" / "b" / "c" / "x")) == "EINVAL"
    # onto an existing empty descendant (Linux: EINVAL); a descendant onto its (non-empty)
    # ancestor (Linux: ENOTEMPTY)
    assert errno_of(lambda: os.rename(mnt / "a", mnt / "a" / "b" / "c")) in ("EINVAL", "ENOTEMPTY", "EEXIST")
    assert errno_of(lambda: os.rename(mnt / "a" / "b" / "c", mnt / "a")) in ("EINVAL", "ENOTEMPTY", "EEXIST")
    assert os.path.isdir(mnt / "a" / "b" / "c")
    assert sorted(os.listdir(mnt)) == ["a"]


def test_rename_of_dot_or_dotdot_fails(mnt):
    (mnt / "d" / "e").mkdir(parents=True)
    d = str(mnt / "d")
    assert errno_of(lambda: os.rename(d + "/.", mnt / "x")) in ("EINVAL", "EBUSY")
    assert errno_of(lambda: os.rename(d + "/e/..", mnt / "x")) in ("EINVAL", "EBUSY")
    assert errno_of(lambda: os.rename(mnt / "x", d + "/.")) != "OK"
    assert os.path.isdir(mnt / "d" / "e") and not os.path.lexists(mnt / "x")


def test_rename_hard_link_onto_itself_is_a_no_op(mnt):
    (mnt / "d").mkdir()
    write_file(mnt / "d" / "a", b"same")
    os.link(mnt / "d" / "a", mnt / "d" / "b")
    _, m0, c0 = times_ns(mnt / "d")
    tick()
    os.rename(mnt / "d" / "a", mnt / "d" / "b")
    # POSIX: both names stay, rename succeeds and performs no other action
    assert sorted(os.listdir(mnt / "d")) == ["a", "b"]
    assert nlink(mnt / "d" / "a") == 2
    assert read_file(mnt / "d" / "b") == b"same"
    _, m1, c1 = times_ns(mnt / "d")
    assert (m1, c1) == (m0, c0)
    # and the same name onto itself
    os.rename(mnt / "d" / "a", mnt / "d" / "a")
    assert sorted(os.listdir(mnt / "d")) == ["a", "b"]
    (mnt / "d" / "sub").mkdir()
    os.rename(mnt / "d" / "sub", mnt / "d" / "sub")
    assert os.path.isdir(mnt / "d" / "sub")


def test_rename_updates_mtime_ctime_of_both_parents(mnt):
    (mnt / "x").mkdir()
    (mnt / "y").mkdir()
    write_file(mnt / "x" / "f", b"x")
    _, xm0, xc0 = times_ns(mnt / "x")
    _, ym0, yc0 = times_ns(mnt / "y")
    tick()
    os.rename(mnt / "x" / "f", mnt / "y" / "f")
    _, xm1, xc1 = times_ns(mnt / "x")
    _, ym1, yc1 = times_ns(mnt / "y")
    assert_newer(xm0, xm1, "source parent mtime")
    assert_newer(xc0, xc1, "source parent ctime")
    assert_newer(ym0, ym1, "target parent mtime")
    assert_newer(yc0, yc1, "target parent ctime")


def test_rename_within_directory_updates_its_mtime_ctime(mnt):
    (mnt / "x").mkdir()
    write_file(mnt / "x" / "f", b"x")
    _, m0, c0 = times_ns(mnt / "x")
    _, fm0, _ = times_ns(mnt / "x" / "f")
    tick()
    os.rename(mnt / "x" / "f", mnt / "x" / "g")
    _, m1, c1 = times_ns(mnt / "x")
    _, fm1, _ = times_ns(mnt / "x" / "g")
    assert_newer(m0, m1, "parent mtime")
    assert_newer(c0, c1, "parent ctime")
    assert_same(fm0, fm1, "renamed file's mtime")


def test_rename_errors(mnt):
    write_file(mnt / "f", b"x")
    (mnt / "d").mkdir()
    assert errno_of(lambda: os.rename(mnt / "missing", mnt / "new")) == "ENOENT"
    assert errno_of(lambda: os.rename(mnt / "f", mnt / "nodir" / "new")) == "ENOENT"
    assert errno_of(lambda: os.rename(mnt / "f" / "x", mnt / "new")) == "ENOTDIR"
    assert errno_of(lambda: os.rename(mnt / "f", mnt / "f" / "new")) == "ENOTDIR"
    assert errno_of(lambda: os.rename(str(mnt / "f") + "/", mnt / "new")) == "ENOTDIR"
    assert errno_of(lambda: os.rename(mnt / "f", str(mnt / "new") + "/")) == "ENOTDIR"
    assert sorted(os.listdir(mnt)) == ["d", "f"]
    # a directory may be named with a trailing slash on either side
    os.rename(str(mnt / "d") + "/", str(mnt / "e") + "/")
    assert sorted(os.listdir(mnt)) == ["e", "f"]


# ----- renameat2 ------------------------------------------------------------------------------------


def _renameat2_or_skip(fs_mount, src, dst, flags: int) -> None:
    """``renameat2`` with flags traxfs supports. Only the host's reference filesystem
    (``TRAX_FS_TARGET=local``, no traxfs mount) may lack them, which skips the test; on traxfs
    every error fails it, so a regression in the rename flags shows as a failure, not a skip."""
    try:
        renameat2(src, dst, flags)
    except OSError as e:
        if fs_mount is None and e.errno in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
            pytest.skip(f"the host filesystem does not support renameat2 flags {flags}: {os.strerror(e.errno)}")
        raise


def test_renameat2_noreplace(mnt, fs_mount):
    write_file(mnt / "a", b"a")
    write_file(mnt / "b", b"b")
    _renameat2_or_skip(fs_mount, mnt / "a", mnt / "c", RENAME_NOREPLACE)
    assert sorted(os.listdir(mnt)) == ["b", "c"]
    assert errno_of(lambda: renameat2(mnt / "c", mnt / "b", RENAME_NOREPLACE)) == "EEXIST"
    assert read_file(mnt / "b") == b"b" and read_file(mnt / "c") == b"a"
    (mnt / "d").mkdir()
    assert errno_of(lambda: renameat2(mnt / "c", mnt / "d", RENAME_NOREPLACE)) == "EEXIST"
    os.symlink("nowhere", mnt / "dangling")
    assert errno_of(lambda: renameat2(mnt / "c", mnt / "dangling", RENAME_NOREPLACE)) == "EEXIST"
    assert sorted(os.listdir(mnt)) == ["b", "c", "d", "dangling"]


def test_renameat2_exchange_files(mnt, fs_mount):
    (mnt / "x").mkdir()
    write_file(mnt / "a", b"content a")
    write_file(mnt / "x" / "b", b"content b")
    ia, ib = ino(mnt / "a"), ino(mnt / "x" / "b")
    _renameat2_or_skip(fs_mount, mnt / "a", mnt / "x" / "b", RENAME_EXCHANGE)
    assert (ino(mnt / "a"), ino(mnt / "x" / "b")) == (ib, ia)
    assert read_file(mnt / "a") == b"content b"
    assert read_file(mnt / "x" / "b") == b"content a"


def test_renameat2_exchange_file_and_directory_across_parents(mnt, fs_mount):
    (mnt / "p" / "d" / "inner").mkdir(parents=True)
    (mnt / "q").mkdir()
    write_file(mnt / "q" / "f", b"file")
    np_, nq = nlink(mnt / "p"), nlink(mnt / "q")
    _renameat2_or_skip(fs_mount, mnt / "p" / "d", mnt / "q" / "f", RENAME_EXCHANGE)
    assert os.path.isdir(mnt / "q" / "f") and os.listdir(mnt / "q" / "f") == ["inner"]
    assert read_file(mnt / "p" / "d") == b"file"
    assert ino(mnt / "q" / "f" / "..") == ino(mnt / "q")
    assert nlink(mnt / "p") == np_ - 1
    assert nlink(mnt / "q") == nq + 1


def test_renameat2_exchange_with_missing_target_enoent(mnt, fs_mount):
    write_file(mnt / "a", b"a")
    write_file(mnt / "b", b"b")
    _renameat2_or_skip(fs_mount, mnt / "a", mnt / "b", RENAME_EXCHANGE)  # probe support first
    assert errno_of(lambda: renameat2(mnt / "a", mnt / "missing", RENAME_EXCHANGE)) == "ENOENT"
    assert errno_of(lambda: renameat2(mnt / "a", mnt / "b", RENAME_EXCHANGE | RENAME_NOREPLACE)) == "EINVAL"
    assert sorted(os.listdir(mnt)) == ["a", "b"]
    assert read_file(mnt / "a") == b"b"


# ----- link counts ----------------------------------------------------------------------------------


def test_directory_nlink_is_two_plus_subdirectories(mnt):
    d = mnt / "d"
    d.mkdir()
    assert nlink(d) == 2
    for i in range(3):
        (d / f"sub{i}").mkdir()
    write_file(d / "file", b"")
    os.symlink("sub0", d / "link")
    os.mkfifo(d / "fifo")
    assert nlink(d) == 5
    (d / "sub0" / "deeper").mkdir()
    assert nlink(d) == 5 and nlink(d / "sub0") == 3
    os.rmdir(d / "sub1")
    assert nlink(d) == 4
    os.rename(d / "sub2", d / "sub0" / "moved")
    assert nlink(d) == 3 and nlink(d / "sub0") == 4


def test_file_nlink_counts_hard_links(mnt):
    write_file(mnt / "f", b"x")
    assert nlink(mnt / "f") == 1
    (mnt / "d").mkdir()
    for i in range(3):
        os.link(mnt / "f", mnt / "d" / f"l{i}")
    assert nlink(mnt / "f") == 4
    assert {nlink(mnt / "d" / f"l{i}") for i in range(3)} == {4}
    os.unlink(mnt / "d" / "l0")
    os.rename(mnt / "d" / "l1", mnt / "l1")
    assert nlink(mnt / "f") == 3
    os.unlink(mnt / "f")
    assert nlink(mnt / "l1") == 2


# ----- readdir ----------------------------------------------------------------------------------


DOTS = {b".", b".."}


def test_readdir_of_empty_directory_has_at_most_dot_and_dotdot(mnt):
    # POSIX: "." and ".." are returned once each if the directory has such entries, else not at all
    (mnt / "d").mkdir()
    names = list_dir_small(mnt / "d")
    assert set(names) <= DOTS and len(names) == len(set(names))
    assert os.listdir(mnt / "d") == []


def test_readdir_returns_every_entry_exactly_once_with_types_and_inodes(mnt):
    d = mnt / "d"
    d.mkdir()
    expect = {}
    for i in range(300):
        name = f"file-{i:04d}-" + "x" * (i % 120)
        write_file(d / name, b"")
        expect[name.encode()] = stat.S_IFREG
    for i in range(20):
        (d / f"dir-{i}").mkdir()
        expect[f"dir-{i}".encode()] = stat.S_IFDIR
    os.symlink("nowhere", d / "link")
    expect[b"link"] = stat.S_IFLNK
    os.mkfifo(d / "fifo")
    expect[b"fifo"] = stat.S_IFIFO
    fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
    seen = []
    try:
        while batch := getdents(fd, 512):
            seen.extend(batch)
    finally:
        os.close(fd)
    names = [e.name for e in seen]
    assert sorted(n for n in names if n not in DOTS) == sorted(expect)
    assert len(names) == len(set(names))
    dt = {stat.S_IFREG: 8, stat.S_IFDIR: 4, stat.S_IFLNK: 10, stat.S_IFIFO: 1}
    for e in seen:
        if e.name in (b".", b".."):
            continue
        assert e.type in (0, dt[expect[e.name]]), e  # DT_UNKNOWN is allowed
        assert e.ino == os.lstat(os.fsencode(d) + b"/" + e.name).st_ino, e
    for e in seen:
        if e.name == b".":
            assert e.ino == ino(d)
    assert sorted(os.listdir(d)) == sorted(n.decode() for n in expect)


def test_readdir_cookie_resumes_after_its_entry(mnt):
    d = mnt / "d"
    d.mkdir()
    for i in range(200):
        write_file(d / f"entry-{i:03d}-{'y' * 40}", b"")
    fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
    try:
        full = []
        while batch := getdents(fd, 400):
            full.extend(batch)
        assert len([e for e in full if e.name not in DOTS]) == 200
        for k in (0, 1, 57, 150, len(full) - 2):
            os.lseek(fd, full[k].off, os.SEEK_SET)
            rest = []
            while batch := getdents(fd, 400):
                rest.extend(batch)
            assert [e.name for e in rest] == [e.name for e in full[k + 1:]], k
        os.lseek(fd, 0, os.SEEK_SET)  # rewinddir
        again = []
        while batch := getdents(fd, 4096):
            again.extend(batch)
        assert [e.name for e in again] == [e.name for e in full]
    finally:
        os.close(fd)


def test_readdir_while_deleting_entries_in_same_thread(mnt):
    d = mnt / "d"
    d.mkdir()
    names = [f"n{i:04d}-{'z' * 30}".encode() for i in range(300)]
    for n in names:
        write_file(os.fsencode(d) + b"/" + n, b"")
    doomed = iter(names[1::2])  # every other entry, in creation order

    def delete_some():
        for _ in range(5):
            victim = next(doomed, None)
            if victim is not None:
                os.unlink(os.fsencode(d) + b"/" + victim)

    seen = list_dir_small(d, 300, between=delete_some)
    assert len(seen) == len(set(seen)), "an entry was returned twice"
    survivors = set(names[0::2])
    assert survivors <= set(seen), "an entry that was never removed was skipped"
