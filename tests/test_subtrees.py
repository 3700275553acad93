"""The Subtree protocol (``fs/subtrees/protocol.py``) through its two users, ``/.trax`` and
``/.snapshots``: what the FileSystem façade does for every subtree (the root's entries, inode
numbers tagged and stable across remounts, ``..`` of the top, EXDEV between a subtree and the
tree, a subtree's names in the root neither created, removed nor renamed), what it routes to the
subtree (refusals with the subtree's errno, the open's cache choice), and the same seen through a
real FUSE mount, where the adapter only translates."""

from __future__ import annotations

import errno
import os

import pytest
from fsmount import traxfs_mount

from traxfs.fs.errors import FsError
from traxfs.fs.filesystem import ROOT_INO, FileSystem
from traxfs.fs.keys import FIRST_COOKIE
from traxfs.fs.subtrees.protocol import TAG_SHIFT, TOP, Caller, Subtree, subtree_ino
from traxfs.fs.subtrees.snapshots import Snapshots
from traxfs.fs.subtrees.status_files import STATUS_FILES, StatusFiles
from traxfs.volume.device import ImageFileDevice

MiB = 1 << 20
TRAX_TOP = subtree_ino(StatusFiles.tag, TOP)
SNAP_TOP = subtree_ino(Snapshots.tag, TOP)


def _errno(fn, *args, **kw) -> int:
    with pytest.raises(FsError) as e:
        fn(*args, **kw)
    return e.value.errno


@pytest.fixture
def fs(image_fs):
    return image_fs


def test_the_root_lists_the_subtrees_first_with_cookies_from_their_tags(fs):
    fs.create(ROOT_INO, b"a", 0o644, 0, 0)
    listing = fs.readdir(ROOT_INO, 0)
    assert [(name, cookie) for name, _, cookie in listing[:2]] == [(b".trax", 3), (b".snapshots", 4)]  # DOTS + tag
    assert {name for name, _, _ in listing[2:]} == {b"a", b"queues", b"tables"}
    assert [node.ino for _, node, _ in listing[:2]] == [TRAX_TOP, SNAP_TOP]
    # a listing resumed at any cookie returns the rest exactly once
    for limit in (1, 2, 3):
        got, after = [], 0
        while batch := fs.readdir(ROOT_INO, after, limit):
            got += [name for name, _, _ in batch]
            after = batch[-1][2]
        assert got == [name for name, _, _ in listing]


def test_listings_with_dots_resume_at_every_cookie(fs):
    # readdir(2)'s view: "." and ".." (cookies 1 and 2) first, then the subtrees, then the tree's own
    d = fs.mkdir(ROOT_INO, b"d", 0o755, 0, 0).ino
    fs.create(d, b"x", 0o644, 0, 0)
    for ino, dotdot in ((ROOT_INO, ROOT_INO), (d, ROOT_INO), (TRAX_TOP, ROOT_INO), (SNAP_TOP, ROOT_INO)):
        listing = fs.readdir(ino, 0, dots=True)
        assert [(n, node.ino, c) for n, node, c in listing[:2]] == [(b".", ino, 1), (b"..", dotdot, 2)]
        assert [n for n, _, _ in listing[2:]] == [n for n, _, _ in fs.readdir(ino, 0)]
        cookies = [c for _, _, c in listing]
        assert cookies == sorted(set(cookies))
        for limit in (1, 2, 3):
            got, after = [], 0
            while batch := fs.readdir(ino, after, limit, dots=True):
                got += [name for name, _, _ in batch]
                after = batch[-1][2]
            assert got == [name for name, _, _ in listing]


def test_inode_numbers_carry_the_tag_and_survive_a_remount(tmp_path):
    dev = ImageFileDevice(str(tmp_path / "fs.img"), 64 * MiB, create=True)
    FileSystem.mkfs(dev)
    fs = FileSystem.open(dev)
    fs.mkdir(ROOT_INO, b"a", 0o755, 0, 0)  # one entry of the tree's own in the root
    fs.close()
    seen = []
    for _ in range(2):
        fs = FileSystem.open(dev)
        try:
            top = fs.lookup(ROOT_INO, b".trax")
            files = {name: node.ino for name, node, _ in fs.readdir(top.ino, 0)}
            seen.append((top.ino, files, fs.lookup(ROOT_INO, b".snapshots").ino))
            assert set(files) == {n.encode() for n in STATUS_FILES}
            assert all(ino >> TAG_SHIFT == StatusFiles.tag for ino in files.values())
            own = [node for _, node, cookie in fs.readdir(ROOT_INO, 0) if cookie >= FIRST_COOKIE]  # the tree's
            assert own and all(node.ino < 1 << TAG_SHIFT for node in own)
        finally:
            fs.close()
    dev.close()
    assert seen[0] == seen[1] and seen[0][0] == TRAX_TOP and seen[0][2] == SNAP_TOP


def test_dot_and_dotdot_of_a_subtree(fs):
    assert fs.lookup(TRAX_TOP, b"..").ino == ROOT_INO
    assert fs.lookup(SNAP_TOP, b".").ino == SNAP_TOP
    ino = fs.lookup(TRAX_TOP, b"log.json").ino
    assert fs.lookup(TRAX_TOP, b"log.json").ino == ino and fs.getattr(ino).size > 0
    assert _errno(fs.lookup, TRAX_TOP, b"nope.json") == errno.ENOENT
    assert fs.readdir(SNAP_TOP, 0) == []
    fs.opendir(SNAP_TOP)
    assert _errno(fs.opendir, ino) == errno.ENOTDIR


def test_the_names_of_subtrees_in_the_root_belong_to_them(fs):
    f = fs.create(ROOT_INO, b"f", 0o644, 0, 0).ino
    d = fs.mkdir(ROOT_INO, b"d", 0o755, 0, 0).ino
    for name in (b".trax", b".snapshots"):
        assert _errno(fs.create, ROOT_INO, name, 0o644, 0, 0) == errno.EEXIST
        assert _errno(fs.mkdir, ROOT_INO, name, 0o755, 0, 0) == errno.EEXIST
        assert _errno(fs.symlink, ROOT_INO, name, b"f", 0, 0) == errno.EEXIST
        assert _errno(fs.link, f, ROOT_INO, name) == errno.EEXIST
        assert _errno(fs.rename, ROOT_INO, b"f", ROOT_INO, name) == errno.EEXIST
        assert _errno(fs.rmdir, ROOT_INO, name) == errno.EPERM
        assert _errno(fs.unlink, ROOT_INO, name) == errno.EPERM
        assert _errno(fs.rename, ROOT_INO, name, d, b"x") == errno.EPERM
    assert fs.lookup(ROOT_INO, b"f").ino == f  # nothing changed


def test_between_a_subtree_and_the_tree_is_another_device(fs):
    f = fs.create(ROOT_INO, b"f", 0o644, 0, 0).ino
    status = fs.lookup(TRAX_TOP, b"engine.json").ino
    assert _errno(fs.rename, TRAX_TOP, b"engine.json", ROOT_INO, b"moved") == errno.EXDEV
    assert _errno(fs.rename, ROOT_INO, b"f", TRAX_TOP, b"f") == errno.EXDEV
    assert _errno(fs.rename, ROOT_INO, b"f", SNAP_TOP, b"f") == errno.EXDEV
    assert _errno(fs.link, status, ROOT_INO, b"l") == errno.EXDEV
    assert _errno(fs.link, f, TRAX_TOP, b"l") == errno.EXDEV


def test_changes_in_a_subtree_are_refused_with_its_errno(fs):
    status = fs.lookup(TRAX_TOP, b"data.json").ino
    assert _errno(fs.mkdir, TRAX_TOP, b"x", 0o755, 0, 0) == errno.EPERM  # (in /.snapshots mkdir takes one)
    for top, refused in ((TRAX_TOP, errno.EPERM), (SNAP_TOP, errno.EROFS)):
        assert _errno(fs.create, top, b"x", 0o644, 0, 0) == refused
        assert _errno(fs.symlink, top, b"x", b"t", 0, 0) == refused
        assert _errno(fs.setattr, top, mode=0o777) == refused
        assert _errno(fs.setxattr, top, b"user.a", b"v") == refused
        assert _errno(fs.removexattr, top, b"user.a") == refused
        assert _errno(fs.getxattr, top, b"user.a") == errno.ENODATA
        assert fs.listxattr(top) == []
    assert _errno(fs.unlink, TRAX_TOP, b"data.json") == errno.EPERM
    assert _errno(fs.rename, TRAX_TOP, b"data.json", TRAX_TOP, b"x.json") == errno.EPERM
    assert _errno(fs.setattr, status, size=0) == errno.EPERM
    assert _errno(fs.open_file, status, os.O_WRONLY) == errno.EACCES
    assert _errno(fs.open_file, status, os.O_RDWR | os.O_TRUNC) == errno.EACCES
    assert _errno(fs.open_file, TRAX_TOP, os.O_RDONLY) == errno.EISDIR
    assert fs.getattr(status).size > 0  # still there, unchanged


def test_an_open_says_how_the_kernel_may_cache_the_file(fs):
    status = fs.lookup(TRAX_TOP, b"filesystem.json", Caller(pid=os.getpid())).ino
    assert fs.volatile(status) and not fs.volatile(TRAX_TOP)
    handle = fs.open_file(status, os.O_RDONLY, Caller(pid=os.getpid()))
    try:
        assert (handle.direct_io, handle.keep_cache, handle.nonseekable) == (True, False, False)
        size = fs.getattr(status, Caller(pid=os.getpid())).size  # the size of what this open reads
        assert len(handle.read(0, size + 100)) == size
        assert handle.seek(0, os.SEEK_HOLE) == size
    finally:
        handle.release()
    f = fs.create(ROOT_INO, b"f", 0o644, 0, 0).ino
    assert not fs.volatile(f)
    handle = fs.open_file(f, os.O_RDWR)
    try:
        assert (handle.direct_io, handle.keep_cache, handle.nonseekable) == (False, True, False)
        assert handle.write(0, b"data") == 4 and handle.read(0, 10) == b"data"
    finally:
        handle.release()


def test_a_subtree_must_bring_a_free_tag_and_name(fs):
    class Other(Subtree):
        name, tag = b"other", 1  # the tag of /.trax

    with pytest.raises(ValueError, match="taken"):
        fs.add_subtree(Other())
    Other.tag, Other.name = 3, b".trax"
    with pytest.raises(ValueError, match="taken"):
        fs.add_subtree(Other())
    Other.tag = 1 << 20  # above the tree's first readdir cookie: the root entry's cookie would collide
    with pytest.raises(ValueError, match="not in"):
        fs.add_subtree(Other())


@pytest.fixture(scope="module")
def mounted(tmp_path_factory):
    with traxfs_mount(tmp_path_factory.mktemp("subtrees"), size=128 * MiB) as m:
        yield m.mp


def _os_errno(fn, *args) -> int:
    with pytest.raises(OSError) as e:
        fn(*args)
    return e.value.errno


def test_through_fuse_the_adapter_only_translates(mounted):
    mp = mounted
    (mp / "f").write_bytes(b"x")
    assert os.listdir(mp)[:2] == [".trax", ".snapshots"]
    assert os.stat(mp / ".trax").st_ino == TRAX_TOP
    assert os.stat(mp / ".trax" / "engine.json").st_ino == fs_ino(".trax", "engine.json")
    assert _os_errno(os.rename, mp / ".trax" / "log.json", mp / "log.json") == errno.EXDEV
    assert _os_errno(os.rename, mp / "f", mp / ".snapshots" / "f") == errno.EXDEV
    assert _os_errno(os.mknod, mp / ".snapshots" / "s1") == errno.EROFS  # (mkdir there takes a snapshot)
    assert _os_errno(os.mkdir, mp / ".trax") == errno.EEXIST
    assert _os_errno(os.rmdir, mp / ".snapshots") == errno.EPERM
    assert _os_errno(os.rename, mp / ".trax", mp / "trax") == errno.EPERM
    assert _os_errno(os.unlink, mp / ".trax" / "log.json") == errno.EPERM
    assert _os_errno(os.open, mp / ".trax" / "log.json", os.O_WRONLY) == errno.EACCES
    assert _os_errno(os.chmod, mp / ".snapshots", 0o777) == errno.EROFS
    assert os.stat(mp / ".trax" / "..").st_ino == os.stat(mp).st_ino
    assert os.listdir(mp / ".snapshots") == []
    with open(mp / ".trax" / "buffer.json", "rb") as f:  # direct_io: what is read is what fstat says
        assert len(f.read()) == os.fstat(f.fileno()).st_size


def fs_ino(top: str, name: str) -> int:
    """The inode number the façade gives ``/top/name`` (``/.trax`` files: 16 on, in listing order)."""
    assert top == ".trax"
    return subtree_ino(StatusFiles.tag, 16 + STATUS_FILES.index(name))
