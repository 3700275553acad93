"""POSIX behaviour of the filesystem under test: permissions, as unprivileged users.

Every check runs in a child forked by ``posix_support.as_user`` that drops to NOBODY (65534)
or another uid; root only sets the scene. Covers pjdfstest's EACCES / EPERM cases of every
directory (``*/05.t``, ``06.t``, ... — search permission on a path component, write
permission on the parent, read/write permission on the file), the owner / group / other
classes, the sticky bit (``rename``, ``unlink``, ``rmdir`` in a 1777 directory), chmod by a
non-owner (EPERM) and of S_ISGID by an owner outside the group (silently cleared), chown by a
non-root user (EPERM to another uid or to a group one is not in; allowed to one's own group,
clearing S_ISUID and S_ISGID), set-id bits cleared by an unprivileged write, setgid directories,
umask, utimensat's owner and write-permission rules, and user.* xattrs following the file's
read/write permission. See test_posix.py for the map of the whole suite.
"""

from __future__ import annotations

import os
import stat

import pytest
from posix_support import (
    GROUP,
    GROUP2,
    NOBODY,
    OTHER,
    THIRD,
    UTIME_NOW,
    UTIME_OMIT,
    User,
    as_user,
    errno_as,
    mode_of,
    read_file,
    touch,
    utimensat,
    write_file,
)

pytestmark = pytest.mark.timeout(60)

#: NOBODY with GROUP as a supplementary group
NOBODY_IN_GROUP = User(NOBODY.uid, NOBODY.gid, (GROUP,))
SEC = 1_000_000_000
DENIED = ("EACCES", "EPERM")  # a sticky directory refuses with either, depending on the system


def own(path, user: User, mode: int, gid: int | None = None) -> None:
    """Give ``path`` to ``user`` (and ``gid``, default the user's group), then set ``mode`` (in
    that order: chown clears set-id bits)."""
    os.chown(path, user.uid, user.gid if gid is None else gid, follow_symlinks=False)
    os.chmod(path, mode)


def file_of(path, user: User, mode: int, data: bytes = b"data", gid: int | None = None):
    write_file(path, data)
    own(path, user, mode, gid)
    return path


def dir_of(path, user: User, mode: int, gid: int | None = None):
    os.mkdir(path)
    own(path, user, mode, gid)
    return path


def read(p):
    return lambda: read_file(p)


def open_(p, flags, mode=0o644):
    return lambda: os.close(os.open(p, flags, mode))


# ----- reading and writing files ----------------------------------------------------------------------


def test_read_of_other_users_0600_file_eacces(mnt):
    f = file_of(mnt / "secret", OTHER, 0o600)
    assert errno_as(read(f)) == "EACCES"
    assert errno_as(open_(f, os.O_WRONLY)) == "EACCES"
    assert errno_as(open_(f, os.O_RDWR)) == "EACCES"
    assert as_user(lambda: os.access(f, os.R_OK)) is False
    assert as_user(read(f), OTHER) == b"data"  # the owner can
    assert read_file(f) == b"data"  # and so can root


def test_write_to_other_users_0644_file_eacces(mnt):
    f = file_of(mnt / "f", OTHER, 0o644, b"original")
    assert as_user(read(f)) == b"original"
    assert errno_as(open_(f, os.O_WRONLY)) == "EACCES"
    assert errno_as(open_(f, os.O_RDONLY | os.O_TRUNC)) == "EACCES"
    assert errno_as(open_(f, os.O_WRONLY | os.O_APPEND)) == "EACCES"
    assert errno_as(lambda: os.truncate(f, 0)) == "EACCES"
    assert as_user(lambda: (os.access(f, os.R_OK), os.access(f, os.W_OK))) == (True, False)
    assert read_file(f) == b"original"
    os.chmod(f, 0o646)  # write permission for others
    as_user(lambda: write_file(f, b"replaced"))
    assert read_file(f) == b"replaced"
    assert os.stat(f).st_uid == OTHER.uid


def test_owner_class_bits_apply_to_owner_even_if_others_may(mnt):
    f = file_of(mnt / "f", NOBODY, 0o077)
    assert errno_as(read(f)) == "EACCES"
    assert errno_as(open_(f, os.O_WRONLY)) == "EACCES"
    assert as_user(read(f), OTHER) == b"data"
    os.chmod(f, 0o400)
    assert as_user(read(f)) == b"data"


def test_group_class_bits_apply_to_group_members_even_if_others_may(mnt):
    f = file_of(mnt / "f", OTHER, 0o604, gid=GROUP)
    assert errno_as(read(f), NOBODY_IN_GROUP) == "EACCES"
    assert errno_as(read(f), NOBODY) == "OK"  # not in the group: "other" bits
    g = file_of(mnt / "g", OTHER, 0o640, gid=GROUP)
    assert errno_as(read(g), NOBODY_IN_GROUP) == "OK"
    assert errno_as(read(g), NOBODY) == "EACCES"
    assert errno_as(open_(g, os.O_WRONLY), NOBODY_IN_GROUP) == "EACCES"


def test_root_is_not_bound_by_permission_bits(mnt):
    f = file_of(mnt / "f", OTHER, 0o000, b"locked")
    assert read_file(f) == b"locked"
    write_file(f, b"root wrote")
    d = dir_of(mnt / "d", OTHER, 0o000)
    touch(d / "x")
    assert os.listdir(d) == ["x"]


# ----- directories: write and search permission ------------------------------------------------------


def test_create_in_non_owned_0755_directory_eacces(mnt):
    d = dir_of(mnt / "d", OTHER, 0o755)
    file_of(d / "theirs", OTHER, 0o666)
    (d / "sub").mkdir()
    mine = mnt / "mine"
    as_user(lambda: write_file(mine, b"mine"))
    assert errno_as(open_(d / "new", os.O_WRONLY | os.O_CREAT)) == "EACCES"
    assert errno_as(lambda: os.mkdir(d / "newdir")) == "EACCES"
    assert errno_as(lambda: os.mkfifo(d / "fifo")) == "EACCES"
    assert errno_as(lambda: os.symlink("x", d / "link")) == "EACCES"
    assert errno_as(lambda: os.link(mine, d / "hard")) == "EACCES"
    assert errno_as(lambda: os.rename(mine, d / "moved")) == "EACCES"
    assert errno_as(lambda: os.unlink(d / "theirs")) == "EACCES"
    assert errno_as(lambda: os.rename(d / "theirs", mnt / "stolen")) == "EACCES"
    assert errno_as(lambda: os.rmdir(d / "sub")) == "EACCES"
    # reading the directory and the files in it is allowed (r-x for others)
    assert sorted(as_user(lambda: os.listdir(d))) == ["sub", "theirs"]
    assert as_user(read(d / "theirs")) == b"data"
    as_user(lambda: write_file(d / "theirs", b"0666 file"))  # the file itself is writable
    assert sorted(os.listdir(d)) == ["sub", "theirs"]
    assert os.path.exists(mine)


def test_directory_writable_by_others_allows_create_and_delete(mnt):
    d = dir_of(mnt / "d", OTHER, 0o777)
    file_of(d / "theirs", OTHER, 0o600)
    as_user(lambda: write_file(d / "new", b"x"))
    assert os.stat(d / "new").st_uid == NOBODY.uid
    as_user(lambda: os.unlink(d / "theirs"))  # no sticky bit: write on the directory suffices
    as_user(lambda: os.mkdir(d / "sub"))
    as_user(lambda: os.rename(d / "new", d / "sub" / "moved"))
    assert os.listdir(d) == ["sub"] and os.listdir(d / "sub") == ["moved"]


def test_chdir_and_lookup_without_search_permission_eacces(mnt):
    d = dir_of(mnt / "d", OTHER, 0o755)
    file_of(d / "f", OTHER, 0o644)
    os.chmod(d, 0o754)  # others: r-- (no x)
    assert errno_as(lambda: os.chdir(d)) == "EACCES"
    assert errno_as(lambda: os.stat(d / "f")) == "EACCES"
    assert errno_as(read(d / "f")) == "EACCES"
    assert as_user(lambda: os.listdir(d)) == ["f"]  # reading the names needs r only
    os.chmod(d, 0o711)  # others: --x
    assert errno_as(lambda: os.chdir(d)) == "OK"
    assert errno_as(lambda: os.listdir(d)) == "EACCES"
    assert as_user(read(d / "f")) == b"data"  # a known name is reachable


@pytest.mark.parametrize("op", [
    "stat", "open", "creat", "unlink", "mkdir", "rmdir", "rename", "link", "symlink", "readlink",
    "chmod", "chown", "utime", "truncate", "getxattr", "setxattr", "mkfifo",
])
def test_every_syscall_needs_search_permission_on_path_components(mnt, op):
    outer = dir_of(mnt / "outer", NOBODY, 0o700)
    inner = outer / "inner"
    os.mkdir(inner)
    own(inner, NOBODY, 0o777)
    file_of(inner / "f", NOBODY, 0o666)
    os.symlink("f", inner / "l")
    os.chown(inner / "l", NOBODY.uid, NOBODY.gid, follow_symlinks=False)
    (inner / "empty").mkdir()
    own(inner / "empty", NOBODY, 0o777)
    mine = mnt / "mine"
    file_of(mine, NOBODY, 0o666)
    calls = {
        "stat": lambda: os.stat(inner / "f"),
        "open": read(inner / "f"),
        "creat": open_(inner / "new", os.O_WRONLY | os.O_CREAT),
        "unlink": lambda: os.unlink(inner / "f"),
        "mkdir": lambda: os.mkdir(inner / "newdir"),
        "rmdir": lambda: os.rmdir(inner / "empty"),
        "rename": lambda: os.rename(inner / "f", inner / "g"),
        "link": lambda: os.link(mine, inner / "hard"),
        "symlink": lambda: os.symlink("x", inner / "newlink"),
        "readlink": lambda: os.readlink(inner / "l"),
        "chmod": lambda: os.chmod(inner / "f", 0o600),
        "chown": lambda: os.chown(inner / "f", -1, -1),
        "utime": lambda: os.utime(inner / "f"),
        "truncate": lambda: os.truncate(inner / "f", 0),
        "getxattr": lambda: os.getxattr(inner / "f", "user.x"),
        "setxattr": lambda: os.setxattr(inner / "f", "user.x", b"v"),
        "mkfifo": lambda: os.mkfifo(inner / "fifo"),
    }
    os.chmod(outer, 0o600)  # the owner lost x on a component: every call fails
    assert errno_as(calls[op]) == "EACCES"
    os.chmod(outer, 0o700)
    assert errno_as(calls[op]) in ("OK", "ENODATA")  # and the same call works with it


# ----- sticky directories ------------------------------------------------------------------------------


@pytest.fixture
def sticky(mnt):
    """A /tmp-like directory (1777, owned by THIRD) holding OTHER's file and empty subdirectory
    and NOBODY's file."""
    d = dir_of(mnt / "sticky", THIRD, 0o1777)
    as_user(lambda: (write_file(d / "theirs", b"theirs"), os.mkdir(d / "theirdir")), OTHER)
    as_user(lambda: write_file(d / "mine", b"mine"), NOBODY)
    return d


def test_sticky_directory_user_cannot_unlink_or_rename_another_users_file(sticky):
    d = sticky
    assert errno_as(lambda: os.unlink(d / "theirs")) in DENIED
    assert errno_as(lambda: os.rename(d / "theirs", d / "taken")) in DENIED
    assert errno_as(lambda: os.rename(d / "theirs", d.parent / "taken")) in DENIED
    assert errno_as(lambda: os.rename(d / "mine", d / "theirs")) in DENIED  # replacing it neither
    assert errno_as(lambda: os.rmdir(d / "theirdir")) in DENIED
    assert errno_as(lambda: os.rename(d / "theirdir", d / "taken")) in DENIED
    assert sorted(os.listdir(d)) == ["mine", "theirdir", "theirs"]
    assert read_file(d / "theirs") == b"theirs"


def test_sticky_directory_user_can_remove_own_files(sticky):
    d = sticky
    as_user(lambda: os.rename(d / "mine", d / "mine2"))
    as_user(lambda: os.unlink(d / "mine2"))
    as_user(lambda: write_file(d / "another", b""))
    as_user(lambda: os.mkdir(d / "mydir"))
    as_user(lambda: os.rmdir(d / "mydir"))
    as_user(lambda: os.unlink(d / "theirs"), OTHER)
    assert sorted(os.listdir(d)) == ["another", "theirdir"]


def test_sticky_directory_owner_and_root_can_remove_anything(sticky):
    d = sticky
    as_user(lambda: os.unlink(d / "theirs"), THIRD)
    as_user(lambda: os.rmdir(d / "theirdir"), THIRD)
    os.unlink(d / "mine")
    assert os.listdir(d) == []


# ----- chmod --------------------------------------------------------------------------------------------


def test_chmod_by_non_owner_eperm(mnt):
    f = file_of(mnt / "f", OTHER, 0o666)
    d = dir_of(mnt / "d", OTHER, 0o777)
    assert errno_as(lambda: os.chmod(f, 0o600)) == "EPERM"
    assert errno_as(lambda: os.chmod(d, 0o700)) == "EPERM"
    assert (mode_of(f), mode_of(d)) == (0o666, 0o777)
    fd = os.open(f, os.O_RDWR)
    try:
        assert errno_as(lambda: os.fchmod(fd, 0o600)) == "EPERM"
    finally:
        os.close(fd)


def test_chmod_by_owner(mnt):
    f = file_of(mnt / "f", NOBODY, 0o644)
    as_user(lambda: os.chmod(f, 0o4711))  # including set-user-ID
    assert mode_of(f) == 0o4711
    as_user(lambda: os.chmod(f, 0o1600))
    assert mode_of(f) & 0o777 == 0o600


def test_chmod_setgid_by_owner_outside_the_group_is_cleared(mnt):
    f = file_of(mnt / "f", NOBODY, 0o644, gid=GROUP)
    assert errno_as(lambda: os.chmod(f, 0o2755)) == "OK"  # no error ...
    assert mode_of(f) == 0o755  # ... but no S_ISGID either
    as_user(lambda: os.chmod(f, 0o2755), NOBODY_IN_GROUP)
    assert mode_of(f) == 0o2755


# ----- chown / chgrp -------------------------------------------------------------------------------------


def test_chown_to_another_user_by_non_root_eperm(mnt):
    mine = file_of(mnt / "mine", NOBODY, 0o644)
    theirs = file_of(mnt / "theirs", OTHER, 0o666)
    assert errno_as(lambda: os.chown(mine, OTHER.uid, -1)) == "EPERM"
    assert errno_as(lambda: os.chown(theirs, NOBODY.uid, -1)) == "EPERM"
    assert errno_as(lambda: os.chown(mine, 0, 0)) == "EPERM"
    assert (os.stat(mine).st_uid, os.stat(theirs).st_uid) == (NOBODY.uid, OTHER.uid)


def test_chgrp_by_owner_to_group_not_member_of_eperm(mnt):
    f = file_of(mnt / "f", NOBODY, 0o644)
    assert errno_as(lambda: os.chown(f, -1, GROUP2)) == "EPERM"
    assert errno_as(lambda: os.chown(f, -1, GROUP2), NOBODY_IN_GROUP) == "EPERM"
    assert errno_as(lambda: os.chown(f, -1, GROUP)) == "EPERM"
    assert os.stat(f).st_gid == NOBODY.gid


def test_chgrp_by_owner_to_own_group(mnt):
    f = file_of(mnt / "f", NOBODY, 0o644)
    as_user(lambda: os.chown(f, -1, GROUP), NOBODY_IN_GROUP)
    assert os.stat(f).st_gid == GROUP
    as_user(lambda: os.chown(f, NOBODY.uid, NOBODY.gid), NOBODY_IN_GROUP)  # own uid: no change
    st = os.stat(f)
    assert (st.st_uid, st.st_gid) == (NOBODY.uid, NOBODY.gid)


def test_chgrp_by_non_owner_eperm_even_as_group_member(mnt):
    f = file_of(mnt / "f", OTHER, 0o666, gid=GROUP)
    assert errno_as(lambda: os.chown(f, -1, NOBODY.gid), NOBODY_IN_GROUP) == "EPERM"
    assert os.stat(f).st_gid == GROUP


def test_chgrp_by_non_root_owner_clears_setuid_and_setgid(mnt):
    # POSIX: a successful chown by an unprivileged process clears S_ISUID and S_ISGID
    f = file_of(mnt / "f", NOBODY, 0o6755)
    as_user(lambda: os.chown(f, -1, GROUP), NOBODY_IN_GROUP)
    assert os.stat(f).st_gid == GROUP
    assert mode_of(f) == 0o755


def test_chown_by_root_of_non_root_file_clears_setuid(mnt):
    f = file_of(mnt / "f", NOBODY, 0o4755)
    os.chown(f, OTHER.uid, OTHER.gid)
    assert mode_of(f) == 0o755


# ----- set-id bits and writes -------------------------------------------------------------------------


@pytest.mark.parametrize("mode, after", [(0o6755, 0o755), (0o4755, 0o755), (0o2775, 0o775)])
def test_write_by_non_root_owner_clears_setuid_and_setgid(mnt, mode, after):
    f = file_of(mnt / "f", NOBODY, mode)

    def append():
        fd = os.open(f, os.O_WRONLY | os.O_APPEND)
        try:
            os.write(fd, b"more")
        finally:
            os.close(fd)

    as_user(append)
    assert mode_of(f) == after
    assert read_file(f) == b"datamore"


def test_write_by_non_root_non_owner_clears_setuid_and_setgid(mnt):
    f = file_of(mnt / "f", OTHER, 0o6777)

    def overwrite():
        fd = os.open(f, os.O_WRONLY)
        try:
            os.pwrite(fd, b"D", 0)
        finally:
            os.close(fd)

    as_user(overwrite)
    assert mode_of(f) == 0o777
    assert read_file(f) == b"Data"


def test_write_by_non_root_sees_the_cleared_bits_at_once(mnt):
    """The writer's own fstat, right after its write, shows the bits gone: the kernel's cached
    attributes do not outlive the write that changed them."""
    f = file_of(mnt / "f", NOBODY, 0o6755)

    def write_then_fstat():
        fd = os.open(f, os.O_WRONLY)
        try:
            before = stat.S_IMODE(os.fstat(fd).st_mode)
            os.pwrite(fd, b"D", 0)
            return before, stat.S_IMODE(os.fstat(fd).st_mode)
        finally:
            os.close(fd)

    assert as_user(write_then_fstat) == (0o6755, 0o755)


def test_write_by_root_keeps_setuid_and_setgid(mnt):
    """A writer with CAP_FSETID (root) leaves the set-ID bits, as on Linux's own filesystems."""
    f = file_of(mnt / "f", NOBODY, 0o6755)
    fd = os.open(f, os.O_WRONLY)
    try:
        os.pwrite(fd, b"D", 0)
    finally:
        os.close(fd)
    assert mode_of(f) == 0o6755
    assert read_file(f) == b"Data"


@pytest.mark.parametrize("mode, after", [(0o6755, 0o755), (0o2745, 0o2745)])
def test_truncate_by_non_root_clears_setuid_and_setgid(mnt, mode, after):
    """ftruncate, truncate and an O_TRUNC open by an unprivileged owner: S_ISUID goes, S_ISGID
    goes with group execute (without it, it marks mandatory locking and stays)."""
    f = file_of(mnt / "f", NOBODY, mode)
    for cut in (lambda: os.truncate(f, 2), lambda: os.close(os.open(f, os.O_WRONLY | os.O_TRUNC))):
        os.chmod(f, mode)
        as_user(cut)
        assert mode_of(f) == after
    assert read_file(f) == b""


@pytest.mark.skipif(not hasattr(os, "posix_fallocate"), reason="no posix_fallocate")
def test_fallocate_by_non_root_clears_setuid(mnt):
    f = file_of(mnt / "f", NOBODY, 0o4755)

    def grow():
        fd = os.open(f, os.O_WRONLY)
        try:
            os.posix_fallocate(fd, 0, 8192)
        finally:
            os.close(fd)

    as_user(grow)
    assert mode_of(f) == 0o755
    assert os.stat(f).st_size == 8192


def test_direct_write_by_non_root_clears_setuid(mnt):
    """An O_DIRECT write goes to the server without the kernel's own check: the server clears."""
    f = file_of(mnt / "f", NOBODY, 0o4755, data=b"")

    def direct():
        import mmap
        buf = mmap.mmap(-1, 4096)
        buf.write(b"d" * 4096)
        fd = os.open(f, os.O_WRONLY | os.O_DIRECT)
        try:
            os.pwritev(fd, [buf], 0)
        finally:
            os.close(fd)

    as_user(direct)
    assert mode_of(f) == 0o755
    assert read_file(f) == b"d" * 4096


# ----- new files: owner, setgid directories, umask ---------------------------------------------------------


def test_new_entries_are_owned_by_their_creator(mnt):
    as_user(lambda: (touch(mnt / "f"), os.mkdir(mnt / "d"), os.symlink("f", mnt / "l"), os.mkfifo(mnt / "p")))
    for name in ("f", "d", "l", "p"):
        st = os.lstat(mnt / name)
        assert st.st_uid == NOBODY.uid, name
        # POSIX: the parent directory's group or the creator's effective group
        assert st.st_gid in (NOBODY.gid, os.stat(mnt).st_gid), name


def test_setgid_directory_new_entries_inherit_its_group(mnt):
    d = dir_of(mnt / "sgid", OTHER, 0o2777, gid=GROUP)
    as_user(lambda: (touch(d / "f"), os.mkdir(d / "sub"), os.mkfifo(d / "p")))
    for name in ("f", "sub", "p"):
        st = os.stat(d / name)
        assert (st.st_uid, st.st_gid) == (NOBODY.uid, GROUP), name
    assert mode_of(d / "sub") & stat.S_ISGID  # new subdirectories carry the bit on
    as_user(lambda: touch(d / "sub" / "g"))
    assert os.stat(d / "sub" / "g").st_gid == GROUP


def test_directory_without_setgid_new_entries_get_creator_or_parent_group(mnt):
    d = dir_of(mnt / "plain", OTHER, 0o777, gid=GROUP)
    as_user(lambda: (touch(d / "f"), os.mkdir(d / "sub")))
    for name in ("f", "sub"):
        assert os.stat(d / name).st_gid in (NOBODY.gid, GROUP), name
    assert not mode_of(d / "sub") & stat.S_ISGID


@pytest.mark.parametrize("mask", [0o022, 0o077, 0o002])
def test_umask_of_unprivileged_creator_is_respected(mnt, mask):
    as_user(lambda: (touch(mnt / "f", 0o666), os.mkdir(mnt / "d", 0o777), os.mkfifo(mnt / "p", 0o666)),
            umask=mask)
    assert mode_of(mnt / "f") == 0o666 & ~mask
    assert mode_of(mnt / "d") == 0o777 & ~mask
    assert mode_of(mnt / "p") == 0o666 & ~mask


# ----- utimensat ------------------------------------------------------------------------------------------


def test_utimensat_now_needs_write_permission_explicit_times_need_ownership(mnt):
    f = file_of(mnt / "f", OTHER, 0o666)
    assert errno_as(lambda: utimensat(f, UTIME_NOW, UTIME_NOW)) == "OK"
    assert errno_as(lambda: os.utime(f)) == "OK"
    assert errno_as(lambda: utimensat(f, 1 * SEC, 2 * SEC)) == "EPERM"
    assert errno_as(lambda: utimensat(f, UTIME_OMIT, 2 * SEC)) == "EPERM"
    g = file_of(mnt / "g", OTHER, 0o644)
    assert errno_as(lambda: utimensat(g, UTIME_NOW, UTIME_NOW)) == "EACCES"
    assert errno_as(lambda: utimensat(g, 1 * SEC, 2 * SEC)) == "EPERM"


def test_utimensat_by_owner_without_write_permission(mnt):
    f = file_of(mnt / "f", NOBODY, 0o444)
    as_user(lambda: utimensat(f, 3 * SEC + 3, 4 * SEC + 4))
    st = os.stat(f)
    assert (st.st_atime_ns, st.st_mtime_ns) == (3 * SEC + 3, 4 * SEC + 4)
    as_user(lambda: utimensat(f, UTIME_NOW, UTIME_NOW))
    assert os.stat(f).st_mtime_ns > 10 * SEC


# ----- xattrs ----------------------------------------------------------------------------------------------


def test_user_xattrs_follow_file_read_and_write_permission(mnt):
    f = file_of(mnt / "f", OTHER, 0o644)
    os.setxattr(f, "user.k", b"v")
    assert as_user(lambda: os.getxattr(f, "user.k")) == b"v"
    assert errno_as(lambda: os.setxattr(f, "user.k", b"w")) == "EACCES"
    assert errno_as(lambda: os.removexattr(f, "user.k")) == "EACCES"
    os.chmod(f, 0o600)
    assert errno_as(lambda: os.getxattr(f, "user.k")) == "EACCES"
    os.chmod(f, 0o666)
    as_user(lambda: os.setxattr(f, "user.k", b"by nobody"))
    assert os.getxattr(f, "user.k") == b"by nobody"
