"""POSIX behaviour of the filesystem under test — our own pjdfstest. This file: regular files.

The suite runs against the ``mnt`` fixture (conftest): a fresh traxfs mount by default, the host's
own filesystem with ``TRAX_FS_TARGET=local`` (the reference: every test passes there). Tests run
as root; the permission tests act as other users through ``posix_support.as_user`` (a forked
child that drops to another uid/gid). Where Linux filesystems legitimately differ, only what
POSIX requires is checked (e.g. unlink of a directory may fail with EISDIR or EPERM).

How pjdfstest's directories map onto the suite (all ``tests/test_posix*.py``):

==================  ==========================================================================
pjdfstest           here
==================  ==========================================================================
open                test_posix.py ``test_open_*``; ELOOP/O_NOFOLLOW in test_posix_names.py;
                    EACCES in test_posix_perms.py
truncate,           test_posix.py ``test_truncate_*`` / ``test_ftruncate_*`` (sparse growth,
ftruncate           shrink, files over 4 GiB); EACCES in test_posix_perms.py
unlink              test_posix.py ``test_unlink_*`` (incl. open-unlinked files); sticky in perms
link                test_posix.py ``test_link_*``
mkfifo, mknod       test_posix.py ``test_mkfifo_*``, ``test_fifo_*``, ``test_mknod_*``
posix_fallocate     test_posix.py ``test_posix_fallocate_*``
(fsync)             test_posix.py ``test_sync_*``
symlink             test_posix_names.py ``test_symlink_*``, ``test_readlink_*``
(names)             test_posix_names.py: NAME_MAX 255 / 256, bytes in names, PATH_MAX
mkdir, rmdir        test_posix_dirs.py ``test_mkdir_*``, ``test_rmdir_*``, link counts
rename              test_posix_dirs.py ``test_rename_*``, ``test_renameat2_*``
(readdir)           test_posix_dirs.py ``test_readdir_*``; under concurrent change in
                    test_posix_concurrency.py
chmod, chown        test_posix_attrs.py (as root) and test_posix_perms.py (as other users:
                    EPERM, set-id bit clearing, setgid directories)
utimensat           test_posix_attrs.py ``test_utimensat_*`` (UTIME_NOW, UTIME_OMIT, ns)
(timestamps)        ``*_updates_*`` / ``*_keeps_*`` tests next to each operation
(xattr, statfs)     test_posix_attrs.py ``test_xattr_*``, ``test_statvfs_*``
(umask)             test_posix_attrs.py ``test_umask_*``, test_posix_perms.py
granular, chflags   not applicable (FreeBSD ACLs and file flags)
(concurrency)       test_posix_concurrency.py: pwrite from threads, O_APPEND writers, creates
                    in one directory, O_EXCL races, readdir while entries come and go
==================  ==========================================================================
"""

from __future__ import annotations

import os
import stat
import time

import pytest
from posix_support import (
    assert_newer,
    assert_same,
    errno_of,
    pread_all,
    pwrite_all,
    read_file,
    syncfs,
    tick,
    times_ns,
    touch,
    umask,
    write_file,
)

pytestmark = pytest.mark.timeout(60)

GiB = 1 << 30
SEC = 1_000_000_000


# ----- open -------------------------------------------------------------------------------------


def test_open_creat_makes_empty_regular_file_with_mode_owner_and_times(mnt):
    path = mnt / "new"
    before = time.time_ns()
    with umask(0o022):
        fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o666)
    after = time.time_ns()
    try:
        st = os.fstat(fd)
    finally:
        os.close(fd)
    assert stat.S_ISREG(st.st_mode)
    assert stat.S_IMODE(st.st_mode) == 0o644
    assert st.st_size == 0
    assert st.st_nlink == 1
    assert st.st_uid == os.geteuid()
    # POSIX: the group is the parent directory's or the creator's effective group
    assert st.st_gid in (os.getegid(), os.stat(mnt).st_gid)
    for name in ("st_atime_ns", "st_mtime_ns", "st_ctime_ns"):
        assert before - SEC <= getattr(st, name) <= after + SEC, name
    assert os.stat(path).st_ino == st.st_ino


@pytest.mark.parametrize("mode", [0o600, 0o640, 0o755, 0o444, 0o000])
def test_open_creat_mode_is_applied(mnt, mode):
    with umask(0):
        os.close(os.open(mnt / "f", os.O_RDWR | os.O_CREAT, mode))
    assert stat.S_IMODE(os.stat(mnt / "f").st_mode) == mode


def test_open_creat_read_only_mode_still_gives_writable_fd(mnt):
    # the mode applies to later opens; the creating open gets the access it asked for
    fd = os.open(mnt / "ro", os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o444)
    try:
        assert os.write(fd, b"data") == 4
        assert os.pread(fd, 4, 0) == b"data"
    finally:
        os.close(fd)


def test_open_creat_updates_parent_mtime_ctime(mnt):
    d = mnt / "d"
    d.mkdir()
    _, m0, c0 = times_ns(d)
    tick()
    touch(d / "f")
    _, m1, c1 = times_ns(d)
    assert_newer(m0, m1, "parent mtime")
    assert_newer(c0, c1, "parent ctime")


def test_open_creat_existing_keeps_content_and_parent_times(mnt):
    d = mnt / "d"
    d.mkdir()
    write_file(d / "f", b"keep me")
    _, pm0, pc0 = times_ns(d)
    _, m0, c0 = times_ns(d / "f")
    tick()
    fd = os.open(d / "f", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        assert os.read(fd, 100) == b"keep me"
    finally:
        os.close(fd)
    assert stat.S_IMODE(os.stat(d / "f").st_mode) == 0o644  # mode argument ignored
    _, pm1, pc1 = times_ns(d)
    _, m1, c1 = times_ns(d / "f")
    assert (pm1, pc1, m1, c1) == (pm0, pc0, m0, c0)


@pytest.mark.parametrize("kind", ["file", "dir", "symlink", "dangling_symlink", "fifo"])
def test_open_creat_excl_on_existing_name_eexist(mnt, kind):
    p = mnt / "x"
    if kind == "file":
        write_file(p, b"old")
    elif kind == "dir":
        p.mkdir()
    elif kind == "symlink":
        write_file(mnt / "target", b"t")
        os.symlink("target", p)
    elif kind == "dangling_symlink":
        os.symlink("nowhere", p)
    else:
        os.mkfifo(p)
    assert errno_of(lambda: os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)) == "EEXIST"
    if kind == "dangling_symlink":
        assert not (mnt / "nowhere").exists()  # O_EXCL never follows the link
    if kind == "file":
        assert read_file(p) == b"old"


def test_open_creat_excl_on_new_name_creates(mnt):
    fd = os.open(mnt / "n", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    os.close(fd)
    assert os.path.isfile(mnt / "n")


def test_open_creat_through_dangling_symlink_creates_target(mnt):
    os.symlink("target", mnt / "link")
    write_file(mnt / "link", b"via link")
    assert os.path.islink(mnt / "link")
    assert read_file(mnt / "target") == b"via link"


def test_open_trunc_empties_file_and_updates_mtime_ctime(mnt):
    p = mnt / "f"
    write_file(p, b"x" * 10000)
    _, m0, c0 = times_ns(p)
    ino = os.stat(p).st_ino
    tick()
    fd = os.open(p, os.O_WRONLY | os.O_TRUNC)
    try:
        assert os.fstat(fd).st_size == 0
    finally:
        os.close(fd)
    st = os.stat(p)
    assert st.st_size == 0 and st.st_ino == ino
    assert_newer(m0, st.st_mtime_ns, "mtime")
    assert_newer(c0, st.st_ctime_ns, "ctime")
    assert read_file(p) == b""


def test_open_append_writes_always_go_to_end(mnt):
    p = mnt / "log"
    write_file(p, b"0123456789")
    fd = os.open(p, os.O_RDWR | os.O_APPEND)
    try:
        os.lseek(fd, 0, os.SEEK_SET)
        os.write(fd, b"AB")
        assert os.lseek(fd, 0, os.SEEK_CUR) == 12
        os.lseek(fd, 3, os.SEEK_SET)
        assert os.read(fd, 2) == b"34"  # reads honour the offset
        os.write(fd, b"CD")
        # another writer extends the file: the next append goes after its data
        write_at_other = os.open(p, os.O_WRONLY)
        os.pwrite(write_at_other, b"zz", 14)
        os.close(write_at_other)
        os.write(fd, b"EF")
    finally:
        os.close(fd)
    assert read_file(p) == b"0123456789ABCDzzEF"


def test_open_directory_for_writing_eisdir(mnt):
    d = mnt / "d"
    d.mkdir()
    assert errno_of(lambda: os.open(d, os.O_WRONLY)) == "EISDIR"
    assert errno_of(lambda: os.open(d, os.O_RDWR)) == "EISDIR"
    assert errno_of(lambda: os.open(d, os.O_WRONLY | os.O_CREAT, 0o644)) == "EISDIR"
    fd = os.open(d, os.O_RDONLY)
    try:
        assert errno_of(lambda: os.read(fd, 10)) == "EISDIR"
    finally:
        os.close(fd)


def test_open_missing_enoent(mnt):
    assert errno_of(lambda: os.open(mnt / "missing", os.O_RDONLY)) == "ENOENT"
    assert errno_of(lambda: os.open(mnt / "missing", os.O_RDWR)) == "ENOENT"
    assert errno_of(lambda: os.open(mnt / "nodir" / "f", os.O_WRONLY | os.O_CREAT, 0o644)) == "ENOENT"
    assert not (mnt / "nodir").exists()


def test_open_through_non_directory_enotdir(mnt):
    write_file(mnt / "file", b"x")
    assert errno_of(lambda: os.open(mnt / "file" / "x", os.O_RDONLY)) == "ENOTDIR"
    assert errno_of(lambda: os.open(mnt / "file" / "x", os.O_WRONLY | os.O_CREAT, 0o644)) == "ENOTDIR"
    assert errno_of(lambda: os.open(str(mnt / "file") + "/", os.O_RDONLY)) == "ENOTDIR"
    assert errno_of(lambda: os.open(mnt / "file", os.O_RDONLY | os.O_DIRECTORY)) == "ENOTDIR"


def test_open_directory_flag_on_directory_works(mnt):
    (mnt / "d").mkdir()
    os.close(os.open(mnt / "d", os.O_RDONLY | os.O_DIRECTORY))
    os.close(os.open(str(mnt / "d") + "/", os.O_RDONLY))


# ----- read and write -----------------------------------------------------------------------------


def test_write_read_roundtrip_at_offsets(mnt):
    p = mnt / "f"
    fd = os.open(p, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        pwrite_all(fd, b"hello", 0)
        pwrite_all(fd, b"world", 3)
        assert pread_all(fd, 100, 0) == b"helworld"
        assert os.lseek(fd, 0, os.SEEK_END) == 8
        os.write(fd, b"!")
        assert os.pread(fd, 10, 8) == b"!"
        assert os.pread(fd, 10, 9) == b""  # at EOF
        assert os.pread(fd, 10, 1000) == b""  # past EOF
        assert os.fstat(fd).st_size == 9
    finally:
        os.close(fd)
    assert read_file(p) == b"helworld!"


def test_write_past_eof_leaves_hole_of_zeros(mnt):
    p = mnt / "f"
    fd = os.open(p, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        os.write(fd, b"head")
        os.lseek(fd, 100_000, os.SEEK_SET)
        os.write(fd, b"tail")
        assert os.fstat(fd).st_size == 100_004
        assert pread_all(fd, 100_004, 0) == b"head" + bytes(100_000 - 4) + b"tail"
    finally:
        os.close(fd)


def test_write_updates_mtime_ctime(mnt):
    p = mnt / "f"
    write_file(p, b"abc")
    _, m0, c0 = times_ns(p)
    tick()
    fd = os.open(p, os.O_WRONLY)
    try:
        os.pwrite(fd, b"x", 1)
    finally:
        os.close(fd)
    _, m1, c1 = times_ns(p)
    assert_newer(m0, m1, "mtime")
    assert_newer(c0, c1, "ctime")


def test_read_and_stat_keep_mtime_ctime(mnt):
    p = mnt / "f"
    write_file(p, b"abc" * 1000)
    _, m0, c0 = times_ns(p)
    tick()
    assert read_file(p) == b"abc" * 1000
    os.stat(p)
    os.listdir(mnt)
    _, m1, c1 = times_ns(p)
    assert_same(m0, m1, "mtime")
    assert_same(c0, c1, "ctime")


def test_write_on_read_only_fd_ebadf(mnt):
    write_file(mnt / "f", b"abc")
    fd = os.open(mnt / "f", os.O_RDONLY)
    try:
        assert errno_of(lambda: os.write(fd, b"x")) == "EBADF"
    finally:
        os.close(fd)
    fd = os.open(mnt / "f", os.O_WRONLY)
    try:
        assert errno_of(lambda: os.read(fd, 1)) == "EBADF"
    finally:
        os.close(fd)


# ----- truncate / ftruncate -------------------------------------------------------------------


def test_truncate_grow_reads_zeros(mnt):
    p = mnt / "f"
    write_file(p, b"abc")
    os.truncate(p, 70_000)
    assert os.stat(p).st_size == 70_000
    assert read_file(p) == b"abc" + bytes(70_000 - 3)


def test_truncate_shrink_discards_tail_for_good(mnt):
    p = mnt / "f"
    write_file(p, b"x" * 20_000)
    os.truncate(p, 100)
    assert os.stat(p).st_size == 100
    assert read_file(p) == b"x" * 100
    # growing again must not bring the old bytes back (same page and later pages)
    os.truncate(p, 20_000)
    assert read_file(p) == b"x" * 100 + bytes(19_900)
    os.truncate(p, 0)
    assert read_file(p) == b""


def test_ftruncate_grow_and_shrink_through_fd(mnt):
    fd = os.open(mnt / "f", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        pwrite_all(fd, b"y" * 5000, 0)
        os.ftruncate(fd, 10)
        assert os.fstat(fd).st_size == 10
        os.ftruncate(fd, 9000)
        assert pread_all(fd, 9000, 0) == b"y" * 10 + bytes(8990)
        # the offset is not moved by truncation: a write there extends from 5000
        assert os.lseek(fd, 0, os.SEEK_CUR) == 0
    finally:
        os.close(fd)


@pytest.mark.parametrize("how", ["truncate", "ftruncate"])
@pytest.mark.parametrize("new_size", [0, 10, 100_000])
def test_truncate_size_change_updates_mtime_ctime(mnt, how, new_size):
    p = mnt / "f"
    write_file(p, b"z" * 1000)
    _, m0, c0 = times_ns(p)
    tick()
    if how == "truncate":
        os.truncate(p, new_size)
    else:
        fd = os.open(p, os.O_WRONLY)
        try:
            os.ftruncate(fd, new_size)
        finally:
            os.close(fd)
    _, m1, c1 = times_ns(p)
    assert_newer(m0, m1, "mtime")
    assert_newer(c0, c1, "ctime")


def test_truncate_errors(mnt):
    write_file(mnt / "f", b"abc")
    (mnt / "d").mkdir()
    assert errno_of(lambda: os.truncate(mnt / "f", -1)) == "EINVAL"
    assert errno_of(lambda: os.truncate(mnt / "d", 0)) == "EISDIR"
    assert errno_of(lambda: os.truncate(mnt / "missing", 0)) == "ENOENT"
    assert errno_of(lambda: os.truncate(mnt / "f" / "x", 0)) == "ENOTDIR"
    assert read_file(mnt / "f") == b"abc"


def test_ftruncate_on_read_only_fd_fails(mnt):
    write_file(mnt / "f", b"abc")
    fd = os.open(mnt / "f", os.O_RDONLY)
    try:
        assert errno_of(lambda: os.ftruncate(fd, 0)) in ("EINVAL", "EBADF")
    finally:
        os.close(fd)
    assert read_file(mnt / "f") == b"abc"


def test_truncate_follows_symlink(mnt):
    write_file(mnt / "t", b"abcdef")
    os.symlink("t", mnt / "l")
    os.truncate(mnt / "l", 2)
    assert read_file(mnt / "t") == b"ab"
    assert os.path.islink(mnt / "l")


def test_truncate_beyond_4gib_is_sparse_and_addressable(mnt):
    p = mnt / "big"
    touch(p)
    os.truncate(p, 6 * GiB)
    assert os.stat(p).st_size == 6 * GiB
    fd = os.open(p, os.O_RDWR)
    try:
        assert pread_all(fd, 4096, 5 * GiB) == bytes(4096)
        pwrite_all(fd, b"five GiB", 5 * GiB)
        assert pread_all(fd, 16, 5 * GiB - 4) == bytes(4) + b"five GiB" + bytes(4)
        # nothing aliased onto the low 4 GiB (offset truncated to 32 bits)
        assert pread_all(fd, 4096, GiB) == bytes(4096)
        assert pread_all(fd, 4096, 0) == bytes(4096)
        assert os.fstat(fd).st_size == 6 * GiB
        # shrink to just above 4 GiB: the data at 5 GiB is gone, growing back reads zeros
        os.ftruncate(fd, 4 * GiB + 1)
        assert os.fstat(fd).st_size == 4 * GiB + 1
        assert os.pread(fd, 10, 4 * GiB) == b"\0"
        os.ftruncate(fd, 6 * GiB)
        assert pread_all(fd, 8, 5 * GiB) == bytes(8)
    finally:
        os.close(fd)


def test_write_at_5gib_offset_extends_sparse_file(mnt):
    p = mnt / "big"
    fd = os.open(p, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        pwrite_all(fd, b"start", 0)
        pwrite_all(fd, b"A", 4 * GiB - 1)
        pwrite_all(fd, b"B", 4 * GiB)
        pwrite_all(fd, b"at 5 GiB", 5 * GiB)
        assert os.fstat(fd).st_size == 5 * GiB + 8
        assert pread_all(fd, 5, 0) == b"start"
        assert pread_all(fd, 4, 4 * GiB - 2) == b"\0AB\0"
        assert pread_all(fd, 100, 5 * GiB) == b"at 5 GiB"
        assert pread_all(fd, 4096, 2 * GiB) == bytes(4096)
    finally:
        os.close(fd)
    assert os.stat(p).st_size == 5 * GiB + 8


# ----- posix_fallocate ------------------------------------------------------------------------------


def test_posix_fallocate_grows_file_with_zeros_and_keeps_data(mnt):
    p = mnt / "f"
    write_file(p, b"data")
    fd = os.open(p, os.O_RDWR)
    try:
        os.posix_fallocate(fd, 0, 50_000)
        assert os.fstat(fd).st_size == 50_000
        assert pread_all(fd, 50_000, 0) == b"data" + bytes(49_996)
        os.posix_fallocate(fd, 0, 10)  # inside the file: size unchanged
        assert os.fstat(fd).st_size == 50_000
    finally:
        os.close(fd)


# ----- unlink ---------------------------------------------------------------------------------------


def test_unlink_removes_name(mnt):
    write_file(mnt / "f", b"x")
    os.unlink(mnt / "f")
    assert not os.path.lexists(mnt / "f")
    assert os.listdir(mnt) == []
    assert errno_of(lambda: os.stat(mnt / "f")) == "ENOENT"


def test_unlink_one_of_two_links_keeps_the_other(mnt):
    write_file(mnt / "a", b"shared")
    os.link(mnt / "a", mnt / "b")
    os.unlink(mnt / "a")
    st = os.stat(mnt / "b")
    assert st.st_nlink == 1
    assert read_file(mnt / "b") == b"shared"


def test_unlink_updates_parent_mtime_ctime_and_file_ctime(mnt):
    d = mnt / "d"
    d.mkdir()
    write_file(d / "f", b"x")
    os.link(d / "f", mnt / "other")
    _, pm0, pc0 = times_ns(d)
    _, m0, c0 = times_ns(mnt / "other")
    tick()
    os.unlink(d / "f")
    _, pm1, pc1 = times_ns(d)
    _, m1, c1 = times_ns(mnt / "other")
    assert_newer(pm0, pm1, "parent mtime")
    assert_newer(pc0, pc1, "parent ctime")
    assert_newer(c0, c1, "file ctime")
    assert_same(m0, m1, "file mtime")


def test_unlink_open_file_stays_readable_and_writable_until_close(mnt):
    p = mnt / "f"
    write_file(p, b"before unlink")
    fd = os.open(p, os.O_RDWR)
    try:
        os.unlink(p)
        assert not os.path.lexists(p)
        assert os.listdir(mnt) == []
        assert os.fstat(fd).st_nlink == 0
        assert pread_all(fd, 100, 0) == b"before unlink"
        pwrite_all(fd, b"after", 100_000)
        assert os.fstat(fd).st_size == 100_005
        assert pread_all(fd, 5, 100_000) == b"after"
        os.ftruncate(fd, 6)
        assert pread_all(fd, 100, 0) == b"before"
        # the name is free again: a new file there is a different, empty file
        write_file(p, b"new")
        assert os.stat(p).st_ino != os.fstat(fd).st_ino  # the unlinked file still exists
        assert pread_all(fd, 100, 0) == b"before"
        assert read_file(p) == b"new"
    finally:
        os.close(fd)
    assert read_file(p) == b"new"


def test_unlink_symlink_removes_link_not_target(mnt):
    write_file(mnt / "t", b"target")
    os.symlink("t", mnt / "l")
    os.unlink(mnt / "l")
    assert not os.path.lexists(mnt / "l")
    assert read_file(mnt / "t") == b"target"
    os.symlink("nowhere", mnt / "dangling")
    os.unlink(mnt / "dangling")
    assert not os.path.lexists(mnt / "dangling")


def test_unlink_directory_fails(mnt):
    (mnt / "d").mkdir()
    # POSIX says EPERM, Linux says EISDIR
    assert errno_of(lambda: os.unlink(mnt / "d")) in ("EISDIR", "EPERM")
    assert os.path.isdir(mnt / "d")


def test_unlink_errors(mnt):
    write_file(mnt / "f", b"x")
    assert errno_of(lambda: os.unlink(mnt / "missing")) == "ENOENT"
    assert errno_of(lambda: os.unlink(mnt / "nodir" / "f")) == "ENOENT"
    assert errno_of(lambda: os.unlink(mnt / "f" / "x")) == "ENOTDIR"
    assert errno_of(lambda: os.unlink(str(mnt / "f") + "/")) in ("ENOTDIR", "EISDIR")
    assert read_file(mnt / "f") == b"x"


def test_unlink_fifo(mnt):
    os.mkfifo(mnt / "p")
    os.unlink(mnt / "p")
    assert not os.path.lexists(mnt / "p")


# ----- link -------------------------------------------------------------------------------------------


def test_link_creates_second_name_for_same_inode(mnt):
    write_file(mnt / "a", b"one")
    (mnt / "d").mkdir()
    os.link(mnt / "a", mnt / "d" / "b")
    sa, sb = os.stat(mnt / "a"), os.stat(mnt / "d" / "b")
    assert sa.st_ino == sb.st_ino
    assert sa.st_nlink == sb.st_nlink == 2
    write_file(mnt / "d" / "b", b"two")  # O_TRUNC through the other name
    assert read_file(mnt / "a") == b"two"
    os.chmod(mnt / "a", 0o600)
    assert stat.S_IMODE(os.stat(mnt / "d" / "b").st_mode) == 0o600


def test_link_updates_file_ctime_and_parent_mtime_ctime(mnt):
    d = mnt / "d"
    d.mkdir()
    write_file(mnt / "f", b"x")
    _, m0, c0 = times_ns(mnt / "f")
    _, pm0, pc0 = times_ns(d)
    tick()
    os.link(mnt / "f", d / "g")
    _, m1, c1 = times_ns(mnt / "f")
    _, pm1, pc1 = times_ns(d)
    assert_newer(c0, c1, "file ctime")
    assert_same(m0, m1, "file mtime")
    assert_newer(pm0, pm1, "parent mtime")
    assert_newer(pc0, pc1, "parent ctime")


@pytest.mark.parametrize("kind", ["file", "dir", "symlink", "dangling_symlink"])
def test_link_onto_existing_name_eexist(mnt, kind):
    write_file(mnt / "src", b"src")
    dst = mnt / "dst"
    if kind == "file":
        write_file(dst, b"dst")
    elif kind == "dir":
        dst.mkdir()
    elif kind == "symlink":
        os.symlink("src", dst)
    else:
        os.symlink("nowhere", dst)
    assert errno_of(lambda: os.link(mnt / "src", dst)) == "EEXIST"
    assert os.stat(mnt / "src").st_nlink == 1


def test_link_errors(mnt):
    write_file(mnt / "f", b"x")
    (mnt / "d").mkdir()
    assert errno_of(lambda: os.link(mnt / "missing", mnt / "new")) == "ENOENT"
    assert errno_of(lambda: os.link(mnt / "f", mnt / "nodir" / "new")) == "ENOENT"
    assert errno_of(lambda: os.link(mnt / "f" / "x", mnt / "new")) == "ENOTDIR"
    assert errno_of(lambda: os.link(mnt / "f", mnt / "f" / "new")) == "ENOTDIR"
    assert errno_of(lambda: os.link(mnt / "d", mnt / "dirlink")) == "EPERM"
    assert not os.path.lexists(mnt / "new")
    assert not os.path.lexists(mnt / "dirlink")
    assert os.stat(mnt / "f").st_nlink == 1


def test_link_to_symlink_without_follow_links_the_symlink(mnt):
    write_file(mnt / "t", b"t")
    os.symlink("t", mnt / "l")
    os.link(mnt / "l", mnt / "l2", follow_symlinks=False)
    assert os.readlink(mnt / "l2") == "t"
    assert os.lstat(mnt / "l2").st_ino == os.lstat(mnt / "l").st_ino
    assert os.lstat(mnt / "l").st_nlink == 2
    assert os.stat(mnt / "t").st_nlink == 1
    # linkat(AT_SYMLINK_FOLLOW) links the target instead (CPython only calls linkat, rather
    # than link(2) which never follows, when it is given a directory fd)
    dfd = os.open(mnt, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.link("l", "t2", src_dir_fd=dfd, dst_dir_fd=dfd, follow_symlinks=True)
    finally:
        os.close(dfd)
    assert os.lstat(mnt / "t2").st_ino == os.stat(mnt / "t").st_ino
    assert os.stat(mnt / "t").st_nlink == 2


def test_link_fifo(mnt):
    os.mkfifo(mnt / "p")
    os.link(mnt / "p", mnt / "q")
    assert stat.S_ISFIFO(os.stat(mnt / "q").st_mode)
    assert os.stat(mnt / "p").st_nlink == 2


def test_link_data_survives_unlink_of_original_name(mnt):
    write_file(mnt / "orig", b"payload")
    os.link(mnt / "orig", mnt / "copy")
    os.unlink(mnt / "orig")
    assert read_file(mnt / "copy") == b"payload"
    assert os.stat(mnt / "copy").st_nlink == 1


# ----- mkfifo / mknod ---------------------------------------------------------------------------------


def test_mkfifo_creates_fifo_with_mode_owner_and_parent_times(mnt):
    d = mnt / "d"
    d.mkdir()
    _, pm0, pc0 = times_ns(d)
    tick()
    with umask(0o022):
        os.mkfifo(d / "p", 0o666)
    st = os.lstat(d / "p")
    assert stat.S_ISFIFO(st.st_mode)
    assert stat.S_IMODE(st.st_mode) == 0o644
    assert st.st_uid == os.geteuid()
    assert st.st_nlink == 1
    _, pm1, pc1 = times_ns(d)
    assert_newer(pm0, pm1, "parent mtime")
    assert_newer(pc0, pc1, "parent ctime")


def test_mkfifo_errors(mnt):
    write_file(mnt / "f", b"x")
    os.symlink("nowhere", mnt / "dangling")
    assert errno_of(lambda: os.mkfifo(mnt / "f")) == "EEXIST"
    assert errno_of(lambda: os.mkfifo(mnt / "dangling")) == "EEXIST"
    assert errno_of(lambda: os.mkfifo(mnt / "nodir" / "p")) == "ENOENT"
    assert errno_of(lambda: os.mkfifo(mnt / "f" / "p")) == "ENOTDIR"
    assert not os.path.lexists(mnt / "nowhere")


def test_fifo_passes_data_between_reader_and_writer(mnt):
    os.mkfifo(mnt / "p")
    rfd = os.open(mnt / "p", os.O_RDONLY | os.O_NONBLOCK)
    try:
        wfd = os.open(mnt / "p", os.O_WRONLY)
        try:
            os.write(wfd, b"through the pipe")
        finally:
            os.close(wfd)
        assert os.read(rfd, 100) == b"through the pipe"
    finally:
        os.close(rfd)


def test_fifo_open_write_nonblocking_without_reader_enxio(mnt):
    os.mkfifo(mnt / "p")
    assert errno_of(lambda: os.open(mnt / "p", os.O_WRONLY | os.O_NONBLOCK)) == "ENXIO"


@pytest.mark.parametrize(
    "kind, rdev",
    [(stat.S_IFREG, 0), (stat.S_IFIFO, 0), (stat.S_IFCHR, os.makedev(1, 3)),
     (stat.S_IFBLK, os.makedev(7, 200)), (stat.S_IFSOCK, 0)],
    ids=["reg", "fifo", "chr", "blk", "sock"],
)
def test_mknod_creates_node_of_each_type(mnt, kind, rdev):
    with umask(0):
        os.mknod(mnt / "node", kind | 0o640, rdev)
    st = os.lstat(mnt / "node")
    assert stat.S_IFMT(st.st_mode) == kind
    assert stat.S_IMODE(st.st_mode) == 0o640
    if kind in (stat.S_IFCHR, stat.S_IFBLK):
        assert st.st_rdev == rdev
    os.unlink(mnt / "node")
    assert not os.path.lexists(mnt / "node")


def test_mknod_on_existing_name_eexist(mnt):
    write_file(mnt / "f", b"x")
    assert errno_of(lambda: os.mknod(mnt / "f", stat.S_IFIFO | 0o644)) == "EEXIST"


# ----- fsync / fdatasync / syncfs -------------------------------------------------------------------


def test_sync_calls_succeed_on_files_and_directories(mnt):
    (mnt / "d").mkdir()
    write_file(mnt / "d" / "f", b"durable")
    fd = os.open(mnt / "d" / "f", os.O_RDWR)
    try:
        os.fsync(fd)
        os.fdatasync(fd)
        syncfs(fd)
    finally:
        os.close(fd)
    dfd = os.open(mnt / "d", os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)
    assert read_file(mnt / "d" / "f") == b"durable"
