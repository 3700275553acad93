"""POSIX behaviour of the filesystem under test: attributes — chmod, chown (as root),
utimensat, umask, setgid directories, extended attributes, statvfs.

pjdfstest's ``chmod``, ``chown`` and ``utimensat`` directories for the privileged caller: every
mode bit is stored, ctime (and only ctime) moves, symlinks are followed (or not, for lchown and
AT_SYMLINK_NOFOLLOW); root's chown clears the set-user-ID and set-group-ID bits of a regular
file (Linux; POSIX leaves it to the implementation for privileged callers) but not of a
directory; utimensat stores nanoseconds and honours UTIME_NOW and UTIME_OMIT. The unprivileged
side (EPERM, EACCES, set-id clearing on write) is in test_posix_perms.py. Extended attributes
(``user.*``: set, get, list, remove, ENODATA, XATTR_CREATE / XATTR_REPLACE) and statvfs are
Linux rather than POSIX, and are checked the way Linux filesystems agree on. See test_posix.py
for the map of the whole suite.
"""

from __future__ import annotations

import os
import stat
import time

import pytest
from posix_support import (
    GROUP,
    OTHER,
    UTIME_NOW,
    UTIME_OMIT,
    assert_newer,
    assert_same,
    errno_of,
    mode_of,
    read_file,
    tick,
    times_ns,
    touch,
    umask,
    utimensat,
    write_file,
)

pytestmark = pytest.mark.timeout(60)

SEC = 1_000_000_000


# ----- chmod ------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["file", "dir", "fifo"])
@pytest.mark.parametrize("mode", [0o000, 0o644, 0o777, 0o4755, 0o2755, 0o1777, 0o6711, 0o7777])
def test_chmod_stores_every_mode_bit(mnt, kind, mode):
    p = mnt / "x"
    if kind == "file":
        touch(p)
    elif kind == "dir":
        p.mkdir()
    else:
        os.mkfifo(p)
    os.chmod(p, mode)
    assert mode_of(p) == mode
    fmt = stat.S_IFMT(os.lstat(p).st_mode)
    assert fmt == {"file": stat.S_IFREG, "dir": stat.S_IFDIR, "fifo": stat.S_IFIFO}[kind]


def test_chmod_updates_ctime_only(mnt):
    write_file(mnt / "f", b"x")
    a0, m0, c0 = times_ns(mnt / "f")
    tick()
    os.chmod(mnt / "f", 0o600)
    a1, m1, c1 = times_ns(mnt / "f")
    assert_newer(c0, c1, "ctime")
    assert_same(m0, m1, "mtime")
    assert_same(a0, a1, "atime")


def test_chmod_follows_symlinks(mnt):
    touch(mnt / "t", 0o644)
    os.symlink("t", mnt / "l")
    link_mode = mode_of(mnt / "l", follow_symlinks=False)
    os.chmod(mnt / "l", 0o600)
    assert mode_of(mnt / "t") == 0o600
    assert mode_of(mnt / "l", follow_symlinks=False) == link_mode


def test_fchmod_through_fd(mnt):
    fd = os.open(mnt / "f", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        os.fchmod(fd, 0o640)
        assert stat.S_IMODE(os.fstat(fd).st_mode) == 0o640
    finally:
        os.close(fd)
    assert mode_of(mnt / "f") == 0o640


def test_chmod_errors(mnt):
    touch(mnt / "f")
    os.symlink("nowhere", mnt / "dangling")
    assert errno_of(lambda: os.chmod(mnt / "missing", 0o644)) == "ENOENT"
    assert errno_of(lambda: os.chmod(mnt / "dangling", 0o644)) == "ENOENT"
    assert errno_of(lambda: os.chmod(mnt / "f" / "x", 0o644)) == "ENOTDIR"


def test_chmod_is_not_masked_by_umask(mnt):
    touch(mnt / "f")
    with umask(0o077):
        os.chmod(mnt / "f", 0o666)
    assert mode_of(mnt / "f") == 0o666


# ----- chown (root) -----------------------------------------------------------------------------


def test_chown_by_root_sets_owner_and_group(mnt):
    touch(mnt / "f")
    os.chown(mnt / "f", OTHER.uid, OTHER.gid)
    st = os.stat(mnt / "f")
    assert (st.st_uid, st.st_gid) == (OTHER.uid, OTHER.gid)
    os.chown(mnt / "f", 0, -1)  # -1: leave the group alone
    st = os.stat(mnt / "f")
    assert (st.st_uid, st.st_gid) == (0, OTHER.gid)
    os.chown(mnt / "f", -1, GROUP)
    st = os.stat(mnt / "f")
    assert (st.st_uid, st.st_gid) == (0, GROUP)
    (mnt / "d").mkdir()
    os.chown(mnt / "d", OTHER.uid, GROUP)
    st = os.stat(mnt / "d")
    assert (st.st_uid, st.st_gid) == (OTHER.uid, GROUP)


def test_chown_updates_ctime_only(mnt):
    write_file(mnt / "f", b"x")
    a0, m0, c0 = times_ns(mnt / "f")
    tick()
    os.chown(mnt / "f", OTHER.uid, OTHER.gid)
    a1, m1, c1 = times_ns(mnt / "f")
    assert_newer(c0, c1, "ctime")
    assert_same(m0, m1, "mtime")
    assert_same(a0, a1, "atime")


def test_chown_follows_symlinks_and_lchown_does_not(mnt):
    touch(mnt / "t")
    os.symlink("t", mnt / "l")
    os.chown(mnt / "l", OTHER.uid, OTHER.gid)
    assert os.stat(mnt / "t").st_uid == OTHER.uid
    assert os.lstat(mnt / "l").st_uid == 0
    os.lchown(mnt / "l", OTHER.uid + 1, GROUP)
    st = os.lstat(mnt / "l")
    assert (st.st_uid, st.st_gid) == (OTHER.uid + 1, GROUP)
    assert os.stat(mnt / "t").st_uid == OTHER.uid
    os.symlink("nowhere", mnt / "dangling")
    os.lchown(mnt / "dangling", OTHER.uid, OTHER.gid)
    assert os.lstat(mnt / "dangling").st_uid == OTHER.uid
    assert errno_of(lambda: os.chown(mnt / "dangling", 0, 0)) == "ENOENT"


def test_fchown_through_fd(mnt):
    fd = os.open(mnt / "f", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        os.fchown(fd, OTHER.uid, GROUP)
        st = os.fstat(fd)
        assert (st.st_uid, st.st_gid) == (OTHER.uid, GROUP)
    finally:
        os.close(fd)


def test_chown_by_root_clears_setuid_and_setgid_of_regular_file(mnt):
    # POSIX leaves this to the implementation for a privileged caller; Linux clears S_ISUID,
    # and S_ISGID when group-execute is set (otherwise S_ISGID marks mandatory locking)
    touch(mnt / "f")
    os.chmod(mnt / "f", 0o6755)
    os.chown(mnt / "f", OTHER.uid, OTHER.gid)
    assert mode_of(mnt / "f") == 0o755
    os.chmod(mnt / "f", 0o4700)
    os.chown(mnt / "f", 0, 0)
    assert mode_of(mnt / "f") == 0o700


def test_chown_by_root_keeps_setgid_of_directory(mnt):
    (mnt / "d").mkdir()
    os.chmod(mnt / "d", 0o2775)
    os.chown(mnt / "d", OTHER.uid, GROUP)
    assert mode_of(mnt / "d") == 0o2775


def test_chown_errors(mnt):
    touch(mnt / "f")
    assert errno_of(lambda: os.chown(mnt / "missing", 0, 0)) == "ENOENT"
    assert errno_of(lambda: os.chown(mnt / "f" / "x", 0, 0)) == "ENOTDIR"


# ----- setgid directories (root's side; other users in test_posix_perms.py) --------------------------


def test_setgid_directory_passes_group_to_new_entries(mnt):
    d = mnt / "sgid"
    d.mkdir()
    os.chown(d, 0, GROUP)
    os.chmod(d, 0o2775)
    touch(d / "file")
    os.mkdir(d / "sub")
    os.mkfifo(d / "fifo")
    os.symlink("file", d / "link")
    for name in ("file", "sub", "fifo", "link"):
        assert os.lstat(d / name).st_gid == GROUP, name
    # a new subdirectory inherits the setgid bit, and so passes the group on again
    assert mode_of(d / "sub") & stat.S_ISGID
    assert not mode_of(d / "file") & stat.S_ISGID
    os.mkdir(d / "sub" / "deeper")
    assert os.stat(d / "sub" / "deeper").st_gid == GROUP
    assert mode_of(d / "sub" / "deeper") & stat.S_ISGID


def test_directory_without_setgid_gives_new_entries_creator_or_parent_group(mnt):
    d = mnt / "plain"
    d.mkdir()
    os.chown(d, 0, GROUP)
    os.chmod(d, 0o775)
    touch(d / "file")
    os.mkdir(d / "sub")
    for name in ("file", "sub"):
        assert os.stat(d / name).st_gid in (os.getegid(), GROUP)  # POSIX allows either
    assert not mode_of(d / "sub") & stat.S_ISGID


# ----- umask ------------------------------------------------------------------------------------


@pytest.mark.parametrize("mask", [0o000, 0o022, 0o027, 0o077, 0o777])
def test_umask_masks_modes_of_new_files_dirs_and_fifos(mnt, mask):
    with umask(mask):
        touch(mnt / "f", 0o666)
        os.mkdir(mnt / "d", 0o777)
        os.mkfifo(mnt / "p", 0o666)
        fd = os.open(mnt / "x", os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o751)
        os.close(fd)
    assert mode_of(mnt / "f") == 0o666 & ~mask
    assert mode_of(mnt / "d") == 0o777 & ~mask
    assert mode_of(mnt / "p", follow_symlinks=False) == 0o666 & ~mask
    assert mode_of(mnt / "x") == 0o751 & ~mask


# ----- utimensat ---------------------------------------------------------------------------------


@pytest.mark.parametrize("atime, mtime", [
    (1_234_567_890_123_456_789, 1_000_000_000_987_654_321),
    (1, 999_999_999),
    (0, 0),
    (2_000_000_000_000_000_001, 1_700_000_000_500_000_000),
])
def test_utimensat_stores_explicit_times_with_nanoseconds(mnt, atime, mtime):
    touch(mnt / "f")
    utimensat(mnt / "f", atime, mtime)
    a, m, _ = times_ns(mnt / "f")
    assert (a, m) == (atime, mtime)
    os.utime(mnt / "f", ns=(mtime, atime))  # the libc/Python path too
    a, m, _ = times_ns(mnt / "f")
    assert (a, m) == (mtime, atime)


def test_utimensat_times_survive_reopen_and_rename(mnt):
    touch(mnt / "f")
    os.utime(mnt / "f", ns=(1_111_111_111_111_111_111, 1_222_222_222_222_222_222))
    os.rename(mnt / "f", mnt / "g")
    assert read_file(mnt / "g") == b""  # reading may touch atime under some mount options
    assert times_ns(mnt / "g")[1] == 1_222_222_222_222_222_222


def test_utimensat_updates_ctime(mnt):
    touch(mnt / "f")
    _, _, c0 = times_ns(mnt / "f")
    tick()
    utimensat(mnt / "f", 1 * SEC, 2 * SEC)
    _, _, c1 = times_ns(mnt / "f")
    assert_newer(c0, c1, "ctime")


def test_utimensat_utime_now_sets_current_time(mnt):
    touch(mnt / "f")
    utimensat(mnt / "f", 5 * SEC, 6 * SEC)
    before = time.time_ns()
    utimensat(mnt / "f", UTIME_NOW, UTIME_NOW)
    after = time.time_ns()
    a, m, c = times_ns(mnt / "f")
    for name, t in (("atime", a), ("mtime", m)):
        assert before - SEC < t <= after + SEC, name
    utimensat(mnt / "f", 5 * SEC, 6 * SEC)
    os.utime(mnt / "f")  # times=None: both "now"
    a, m, c = times_ns(mnt / "f")
    assert a > 10 * SEC and m > 10 * SEC


def test_utimensat_utime_omit_leaves_that_time_alone(mnt):
    touch(mnt / "f")
    utimensat(mnt / "f", 5 * SEC + 5, 6 * SEC + 6)
    utimensat(mnt / "f", UTIME_OMIT, 7 * SEC + 7)
    assert times_ns(mnt / "f")[:2] == (5 * SEC + 5, 7 * SEC + 7)
    utimensat(mnt / "f", 8 * SEC + 8, UTIME_OMIT)
    assert times_ns(mnt / "f")[:2] == (8 * SEC + 8, 7 * SEC + 7)
    before = time.time_ns()
    utimensat(mnt / "f", UTIME_OMIT, UTIME_NOW)
    a, m, _ = times_ns(mnt / "f")
    assert a == 8 * SEC + 8
    assert m > before - SEC
    utimensat(mnt / "f", UTIME_OMIT, UTIME_OMIT)
    assert times_ns(mnt / "f")[:2] == (a, m)


def test_utimensat_nofollow_sets_the_symlinks_own_times(mnt):
    touch(mnt / "t")
    os.symlink("t", mnt / "l")
    utimensat(mnt / "t", 3 * SEC, 4 * SEC)
    utimensat(mnt / "l", 11 * SEC + 1, 12 * SEC + 2, follow_symlinks=False)
    assert times_ns(mnt / "l", follow_symlinks=False)[:2] == (11 * SEC + 1, 12 * SEC + 2)
    assert times_ns(mnt / "t")[:2] == (3 * SEC, 4 * SEC)
    utimensat(mnt / "l", 13 * SEC, 14 * SEC)  # following: the target's times
    assert times_ns(mnt / "t")[:2] == (13 * SEC, 14 * SEC)


def test_futimens_through_fd(mnt):
    fd = os.open(mnt / "f", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        os.utime(fd, ns=(21 * SEC + 21, 22 * SEC + 22))
        st = os.fstat(fd)
        assert (st.st_atime_ns, st.st_mtime_ns) == (21 * SEC + 21, 22 * SEC + 22)
    finally:
        os.close(fd)


def test_utimensat_on_directory(mnt):
    (mnt / "d").mkdir()
    utimensat(mnt / "d", 31 * SEC + 3, 32 * SEC + 4)
    assert times_ns(mnt / "d")[:2] == (31 * SEC + 3, 32 * SEC + 4)


def test_utimensat_errors(mnt):
    touch(mnt / "f")
    assert errno_of(lambda: utimensat(mnt / "missing", UTIME_NOW, UTIME_NOW)) == "ENOENT"
    assert errno_of(lambda: utimensat(mnt / "f" / "x", UTIME_NOW, UTIME_NOW)) == "ENOTDIR"


# ----- extended attributes (user.*) -------------------------------------------------------------------


def test_xattr_set_get_list_remove(mnt):
    p = mnt / "f"
    touch(p)
    os.setxattr(p, "user.color", b"blue")
    os.setxattr(p, "user.size", b"XL")
    assert os.getxattr(p, "user.color") == b"blue"
    assert {n for n in os.listxattr(p) if n.startswith("user.")} == {"user.color", "user.size"}
    os.setxattr(p, "user.color", b"a much longer value than before")
    assert os.getxattr(p, "user.color") == b"a much longer value than before"
    os.setxattr(p, "user.color", b"r")
    assert os.getxattr(p, "user.color") == b"r"
    os.removexattr(p, "user.color")
    assert {n for n in os.listxattr(p) if n.startswith("user.")} == {"user.size"}
    assert errno_of(lambda: os.getxattr(p, "user.color")) == "ENODATA"


def test_xattr_missing_name_enodata(mnt):
    touch(mnt / "f")
    assert errno_of(lambda: os.getxattr(mnt / "f", "user.none")) == "ENODATA"
    assert errno_of(lambda: os.removexattr(mnt / "f", "user.none")) == "ENODATA"
    assert [n for n in os.listxattr(mnt / "f") if n.startswith("user.")] == []


def test_xattr_create_and_replace_flags(mnt):
    p = mnt / "f"
    touch(p)
    assert errno_of(lambda: os.setxattr(p, "user.k", b"v", os.XATTR_REPLACE)) == "ENODATA"
    assert errno_of(lambda: os.getxattr(p, "user.k")) == "ENODATA"
    os.setxattr(p, "user.k", b"v1", os.XATTR_CREATE)
    assert errno_of(lambda: os.setxattr(p, "user.k", b"v2", os.XATTR_CREATE)) == "EEXIST"
    assert os.getxattr(p, "user.k") == b"v1"
    os.setxattr(p, "user.k", b"v3", os.XATTR_REPLACE)
    assert os.getxattr(p, "user.k") == b"v3"
    os.removexattr(p, "user.k")
    assert errno_of(lambda: os.setxattr(p, "user.k", b"v4", os.XATTR_REPLACE)) == "ENODATA"


@pytest.mark.parametrize("value", [b"", b"\0", b"\0binary\xff\0with nuls\0", bytes(range(256)) * 4,
                                   # around the 1,000-byte chunks a value is kept in (fs/keys.py CHUNK)
                                   b"a" * 999, b"b" * 1000, b"c" * 1001, b"d" * 2000, bytes(range(256)) * 256])
def test_xattr_values_are_stored_exactly(mnt, value):
    touch(mnt / "f")
    os.setxattr(mnt / "f", "user.v", value)
    assert os.getxattr(mnt / "f", "user.v") == value
    assert "user.v" in os.listxattr(mnt / "f")


def test_xattr_many_names(mnt):
    touch(mnt / "f")
    names = {f"user.attr-{i:02d}" for i in range(30)}
    for n in names:
        os.setxattr(mnt / "f", n, n.encode())
    assert {n for n in os.listxattr(mnt / "f") if n.startswith("user.")} == names
    for n in names:
        assert os.getxattr(mnt / "f", n) == n.encode()


def test_xattr_name_length_limit(mnt):
    touch(mnt / "f")
    ok = "user." + "n" * 250  # XATTR_NAME_MAX: 255 bytes including the prefix
    os.setxattr(mnt / "f", ok, b"v")
    assert os.getxattr(mnt / "f", ok) == b"v"
    assert errno_of(lambda: os.setxattr(mnt / "f", ok + "n", b"v")) == "ERANGE"


def test_xattr_on_directory(mnt):
    (mnt / "d").mkdir()
    os.setxattr(mnt / "d", "user.dir", b"yes")
    assert os.getxattr(mnt / "d", "user.dir") == b"yes"
    assert "user.dir" in os.listxattr(mnt / "d")
    os.removexattr(mnt / "d", "user.dir")
    assert "user.dir" not in os.listxattr(mnt / "d")


def test_xattr_user_namespace_not_allowed_on_symlink_itself(mnt):
    touch(mnt / "t")
    os.symlink("t", mnt / "l")
    assert errno_of(lambda: os.setxattr(mnt / "l", "user.x", b"v", follow_symlinks=False)) == "EPERM"
    os.setxattr(mnt / "l", "user.x", b"via link")  # following: the target's
    assert os.getxattr(mnt / "t", "user.x") == b"via link"


def test_xattr_belongs_to_inode_shared_by_links_and_kept_by_rename(mnt):
    touch(mnt / "a")
    os.setxattr(mnt / "a", "user.k", b"v")
    os.link(mnt / "a", mnt / "b")
    assert os.getxattr(mnt / "b", "user.k") == b"v"
    os.rename(mnt / "a", mnt / "c")
    assert os.getxattr(mnt / "c", "user.k") == b"v"
    os.setxattr(mnt / "b", "user.k", b"w")
    assert os.getxattr(mnt / "c", "user.k") == b"w"


def test_xattr_gone_with_the_file(mnt):
    touch(mnt / "f")
    os.setxattr(mnt / "f", "user.k", b"v")
    os.unlink(mnt / "f")
    touch(mnt / "f")
    assert errno_of(lambda: os.getxattr(mnt / "f", "user.k")) == "ENODATA"
    (mnt / "d").mkdir()
    os.setxattr(mnt / "d", "user.k", b"v")
    os.rmdir(mnt / "d")
    (mnt / "d").mkdir()
    assert errno_of(lambda: os.getxattr(mnt / "d", "user.k")) == "ENODATA"


def test_xattr_through_fd(mnt):
    fd = os.open(mnt / "f", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        os.setxattr(fd, "user.fd", b"v")
        assert os.getxattr(fd, "user.fd") == b"v"
        assert "user.fd" in os.listxattr(fd)
        os.removexattr(fd, "user.fd")
        assert errno_of(lambda: os.getxattr(fd, "user.fd")) == "ENODATA"
    finally:
        os.close(fd)


def test_xattr_unknown_namespace_eopnotsupp(mnt):
    touch(mnt / "f")
    # EOPNOTSUPP, which Python's errno table names ENOTSUP (the same number on Linux)
    assert errno_of(lambda: os.setxattr(mnt / "f", "nosuchnamespace.k", b"v")) in ("EOPNOTSUPP", "ENOTSUP")
    assert errno_of(lambda: os.getxattr(mnt / "f", "nosuchnamespace.k")) in ("EOPNOTSUPP", "ENOTSUP")


def test_xattr_errors_on_missing_file(mnt):
    assert errno_of(lambda: os.setxattr(mnt / "missing", "user.k", b"v")) == "ENOENT"
    assert errno_of(lambda: os.getxattr(mnt / "missing", "user.k")) == "ENOENT"
    assert errno_of(lambda: os.listxattr(mnt / "missing")) == "ENOENT"


# ----- statvfs ------------------------------------------------------------------------------------


def test_statvfs_is_sane(mnt):
    sv = os.statvfs(mnt)
    assert sv.f_bsize > 0 and sv.f_frsize > 0
    assert sv.f_blocks > 0
    assert 0 <= sv.f_bavail <= sv.f_bfree <= sv.f_blocks
    assert 0 <= sv.f_favail <= sv.f_ffree <= sv.f_files or sv.f_files == 0
    assert sv.f_namemax == 255
    assert sv.f_frsize * sv.f_blocks >= 1 << 20  # at least a megabyte in all


def test_statvfs_same_filesystem_from_any_path_and_fd(mnt):
    (mnt / "d").mkdir()
    write_file(mnt / "d" / "f", b"x")
    a, b = os.statvfs(mnt), os.statvfs(mnt / "d" / "f")
    assert (a.f_bsize, a.f_frsize, a.f_blocks, a.f_namemax, a.f_fsid) == \
           (b.f_bsize, b.f_frsize, b.f_blocks, b.f_namemax, b.f_fsid)
    fd = os.open(mnt / "d" / "f", os.O_RDONLY)
    try:
        c = os.fstatvfs(fd)
    finally:
        os.close(fd)
    assert (c.f_bsize, c.f_blocks, c.f_namemax) == (a.f_bsize, a.f_blocks, a.f_namemax)
