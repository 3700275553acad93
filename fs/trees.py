"""The filesystem's identity and its trees, as named roots in the engine's catalog.

An engine holds a traxfs filesystem when its catalog names every tree in :data:`TREES` (as
``btree:fs.NAME``) and the ``meta`` tree holds a superblock record: magic, format version, a
random UUID, the creation time and a label. Mount refuses an engine without them (foreign: an
engine used for something else), with a damaged record, or with another format version — each
with a message that names what is wrong. The engine's own superblock and pages carry checksums
(``traxfs.fs.engine``), so damage below this level is named by the engine.

Format versions: 1, the first; 2 adds checksums of file data (the ``datasums`` and
``datapending`` trees, ``fs/datasums.py``). A version-1 filesystem is upgraded when it is
opened for use (:func:`upgrade`: the two trees are added, empty, and the record says 2): the
data written before has no checksums, and reads of it are counted as unverified until it is
rewritten. 3 adds snapshots (``fs/history.py``, ``fs/snapshot_store.py``): the trees
``snapshots`` (epoch -> state, time, name), ``hist`` and ``hist_epochs`` (the history of changed
records), ``dead`` (pages freed while a snapshot sees them), the ``epoch`` record, and a birth
epoch in each extent value (20 bytes; a 12-byte value of format 2 reads as birth 0). Older
formats are upgraded when opened for use the same way (the trees added empty, epoch 1). 4: the
B+trees keep no entry count in their headers (B+tree format 2, ``fs/struct/btree_node.py``: the
count cost a logged header update per put and delete); each tree's header changes to format 2
at its first change. Nothing else differs, but a traxfs that reads only 3 would maintain the
count again and fsck would find it wrong, so 4 is refused there. 5 adds the ``datamarked`` tree
(groups of data pages whose overwrites need no log force each: ``fs/datamarks.py``); a traxfs
that reads only 4 would not settle them after a crash, so 5 is refused there.
"""

from __future__ import annotations

import struct
import time
import uuid
from dataclasses import dataclass

from .engine.page import PageCorrupt
from .errors import NotTraxfs
from .keys import U64
from .struct.btree import BTree

MAGIC = b"TRAXFSSB"
VERSION = 5
READABLE = (1, 2, 3, 4, 5)  # older versions are upgraded on open
FORMAT_ADDED = {2: "data checksums", 3: "snapshots", 4: "B+trees without entry counts",
                5: "overwrites forced to the log once per group of pages"}  # for the upgrade's log line
_SUPER = struct.Struct("<8sH16sq32s")
TREES = ("meta", "inodes", "dirents", "cookies", "extents", "xattrs", "symlinks", "orphans", "datasums",
         "datapending", "snapshots", "hist", "hist_epochs", "dead", "datamarked")
ADDED_IN_2 = ("datasums", "datapending")
ADDED_IN_3 = ("snapshots", "hist", "hist_epochs", "dead")
ADDED_IN_5 = ("datamarked",)
KEY_SUPER = b"super"
KEY_NEXT_INO = b"next_ino"
KEY_EPOCH = b"epoch"  # the current epoch (fs/history.py)


@dataclass(frozen=True)
class FsSuper:
    uuid: str
    created_ns: int
    label: str
    version: int = VERSION

    def pack(self) -> bytes:
        return _SUPER.pack(MAGIC, self.version, uuid.UUID(self.uuid).bytes, self.created_ns,
                           self.label.encode()[:32])

    @classmethod
    def unpack(cls, raw: bytes, where: str) -> FsSuper:
        if len(raw) != _SUPER.size:
            raise NotTraxfs(f"{where}: filesystem superblock record has {len(raw)} bytes, expected {_SUPER.size} "
                            "(damaged)")
        magic, version, uid, created, label = _SUPER.unpack(raw)
        if magic != MAGIC:
            raise NotTraxfs(f"{where}: filesystem superblock magic {magic!r} is not {MAGIC!r} (damaged or foreign)")
        if version not in READABLE:
            raise NotTraxfs(f"{where}: filesystem format version {version}; this traxfs reads versions "
                            f"{', '.join(map(str, READABLE))}")
        return cls(str(uuid.UUID(bytes=uid)), created, label.rstrip(b"\0").decode(errors="replace"), version)


def create_trees(engine, tx, label: str) -> tuple[dict[str, BTree], FsSuper]:
    trees = {name: BTree.create(engine, tx, f"fs.{name}") for name in TREES}
    sb = FsSuper(str(uuid.uuid4()), time.time_ns(), label)
    trees["meta"].put(tx, KEY_SUPER, sb.pack())
    trees["meta"].put(tx, KEY_EPOCH, U64.pack(1))
    return trees, sb


def open_trees(engine, where: str, checking: bool = False) -> tuple[dict[str, BTree], FsSuper | None]:
    """The trees named in the catalog and the superblock record. ``checking`` (fsck): trees
    are taken as named without reading their headers, and a ``meta`` tree too damaged to read
    the record from gives None instead of an error (fsck salvages and rebuilds it)."""
    trees: dict[str, BTree] = {}
    missing = []
    for name in TREES:
        if checking:
            pid = engine.get_root(f"btree:fs.{name}")
            t = BTree(engine, pid) if pid else None
        else:
            t = BTree.open_named(engine, f"fs.{name}")
        if t is None:
            missing.append(name)
        else:
            trees[name] = t
    if len(missing) == len(TREES):
        raise NotTraxfs(f"{where}: the engine holds no traxfs filesystem (no fs.* trees in its catalog; "
                        "foreign, or never formatted with `trax mkfs`)")
    if "meta" in missing:
        raise NotTraxfs(f"{where}: filesystem trees missing from the catalog: {', '.join(missing)} (damaged)")
    try:
        raw = trees["meta"].get(KEY_SUPER)
    except PageCorrupt:
        if checking:
            return trees, None
        raise
    if raw is None:
        if checking:
            return trees, None
        raise NotTraxfs(f"{where}: the filesystem superblock record is missing (damaged)")
    sb = FsSuper.unpack(raw, where)
    missing = [name for name in missing if not (sb.version < 5 and name in ADDED_IN_5
                                                or sb.version < 3 and name in ADDED_IN_3
                                                or sb.version < 2 and name in ADDED_IN_2)]
    if missing:
        raise NotTraxfs(f"{where}: filesystem trees missing from the catalog: {', '.join(missing)} (damaged)")
    return trees, sb


def upgrade(engine, trees: dict[str, BTree], sb: FsSuper) -> tuple[dict[str, BTree], FsSuper]:
    """Bring an older filesystem to the current version (one durable transaction): the trees
    of the later versions are added, empty; from 1 or 2 the epoch starts at 1 (the B+tree
    headers of 3 change at their first write)."""
    tx = engine.begin()
    added = ((ADDED_IN_2 if sb.version < 2 else ()) + (ADDED_IN_3 if sb.version < 3 else ())
             + (ADDED_IN_5 if sb.version < 5 else ()))
    for name in added:
        if name not in trees:
            trees[name] = BTree.create(engine, tx, f"fs.{name}")
    if sb.version < 3:
        trees["meta"].put(tx, KEY_EPOCH, U64.pack(1))
    sb = FsSuper(sb.uuid, sb.created_ns, sb.label, VERSION)
    trees["meta"].put(tx, KEY_SUPER, sb.pack())
    engine.commit(tx)
    return trees, sb
