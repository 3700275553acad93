"""Epochs and the history of changed records: what lets a snapshot see the tree as it was.

**Epochs** (ZFS's birth times). The filesystem keeps a current epoch ``E`` (``meta``
``epoch``, 1 on a new filesystem). Taking a snapshot records it with epoch ``E`` and moves ``E``
on by one, in one transaction: snapshot ``s`` sees everything committed in epochs ``<= s``, and
its epoch is its id. Creating one therefore costs the same whatever the amount of data.

**History** (:class:`HistoryTree`). The trees a snapshot must see (:data:`VERSIONED`: inodes,
directory entries, readdir cookies, extents, xattrs, symlinks) are wrapped: when a record is
put or deleted while a snapshot exists (``L``, the latest one, :attr:`Chain.latest`), its
current value — or an *absent* marker — is first kept as ``hist[(tree, key, L)]``, unless an
entry for ``(tree, key, L)`` is already there (only the first change after ``L`` matters);
``hist_epochs[(L, tree, key)]`` indexes it by epoch, for deleting ``L``. The key of snapshot
``s`` reads the smallest entry ``(tree, key, x)`` with ``x >= s`` if there is one, else the
live record (:func:`snapshot_get`); a range reads the live records and the history's of the
range, merged (:func:`snapshot_items`). With no snapshot a change costs one comparison more.

Deleting snapshot ``s`` (``fs/snapshot_store.py``) re-keys each of its entries to the previous
live snapshot ``p`` when ``p`` has none for that key (``p`` saw the same value), or drops it.

History keys are ``tree id (1 byte) + key + epoch (8 bytes, big-endian)``: the epoch is always
the last 8 bytes, so the key is recovered exactly, and the entries of keys in ``[lo, hi)`` lie
in ``[id + lo, id + hi)`` (every range the filesystem scans is a prefix of whole fields).
"""

from __future__ import annotations

import threading
from bisect import bisect_left, bisect_right
from collections.abc import Iterator

from .keys import U64

VERSIONED = ("inodes", "dirents", "cookies", "extents", "xattrs", "symlinks")
TREE_ID = {name: i + 1 for i, name in enumerate(VERSIONED)}
ABSENT = b"\0"  # a history value: the key did not exist
PRESENT = b"\1"  # ... followed by the value it had
_TOP = b"\xff" * 9  # past every epoch of a key (and every longer key sharing its prefix)


def hist_key(tid: int, key: bytes, epoch: int) -> bytes:
    return bytes((tid,)) + key + U64.pack(epoch)


def epoch_key(epoch: int, tid: int, key: bytes) -> bytes:
    return U64.pack(epoch) + bytes((tid,)) + key


def split_hist_key(hk: bytes) -> tuple[int, bytes, int]:
    """(tree id, key, epoch) of a history key."""
    return hk[0], hk[1:-8], U64.unpack(hk[-8:])[0]


def unpack_value(raw: bytes) -> bytes | None:
    """A history value: the record's value, or None (absent)."""
    return None if raw[:1] == ABSENT else raw[1:]


class Chain:
    """The snapshots' epochs (those being deleted included: their history is still in use until
    the delete finishes) and the current epoch. Changed under the filesystem's metadata lock;
    read without it (a single int read)."""

    def __init__(self, current: int, epochs: list[int]) -> None:
        self.current = current
        self.epochs = sorted(epochs)
        self.latest = self.epochs[-1] if self.epochs else 0
        self.lock = threading.Lock()

    def add(self, epoch: int) -> None:
        with self.lock:
            self.epochs.append(epoch)
            self.epochs.sort()
            self.latest = self.epochs[-1]
            self.current = max(self.current, epoch + 1)

    def remove(self, epoch: int) -> None:
        with self.lock:
            self.epochs.remove(epoch)
            self.latest = self.epochs[-1] if self.epochs else 0

    def neighbours(self, epoch: int) -> tuple[int | None, int | None]:
        """The snapshot before ``epoch`` and the one after (None: there is none)."""
        i = bisect_left(self.epochs, epoch)
        prev = self.epochs[i - 1] if i else None
        j = bisect_right(self.epochs, epoch)
        return prev, self.epochs[j] if j < len(self.epochs) else None

    def sees(self, birth: int) -> bool:
        """Does some snapshot see pages born in epoch ``birth`` (may they not be changed)?"""
        return self.latest >= birth and bool(self.epochs)

    def needed(self, birth: int, death: int) -> bool:
        """Does a snapshot see pages born in ``birth`` and freed in ``death`` (one in
        ``[birth, death)``)?"""
        i = bisect_left(self.epochs, birth)
        return i < len(self.epochs) and self.epochs[i] < death


class HistoryTree:
    """A versioned tree: the B+tree's API, keeping what a snapshot needs before each change."""

    def __init__(self, tree, tid: int, chain: Chain, hist, hist_epochs) -> None:
        self.tree = tree
        self.tid = tid
        self.chain = chain
        self.hist = hist
        self.hist_epochs = hist_epochs

    def __getattr__(self, name: str):  # get, floor, items, keys, values, header, check, ...
        return getattr(self.tree, name)

    def __len__(self) -> int:
        return len(self.tree)

    def __contains__(self, key: bytes) -> bool:
        return key in self.tree

    def __iter__(self):
        return iter(self.tree)

    def _keep(self, tx, key: bytes) -> None:
        latest = self.chain.latest
        if not latest:
            return
        hk = hist_key(self.tid, key, latest)
        if self.hist.get(hk) is not None:
            return
        old = self.tree.get(key)
        self.hist.put(tx, hk, ABSENT if old is None else PRESENT + old)
        self.hist_epochs.put(tx, epoch_key(latest, self.tid, key), b"")

    def put(self, tx, key: bytes, value: bytes) -> bytes | None:
        if self.chain.latest:
            self._keep(tx, key)
        return self.tree.put(tx, key, value)

    def delete(self, tx, key: bytes) -> bytes | None:
        if self.chain.latest and self.tree.get(key) is not None:
            self._keep(tx, key)
        return self.tree.delete(tx, key)


def snapshot_get(tree: HistoryTree, epoch: int, key: bytes) -> bytes | None:
    """The value ``key`` had in snapshot ``epoch`` (None: absent)."""
    want = len(key) + 9
    for hk, raw in tree.hist.items(hist_key(tree.tid, key, epoch), bytes((tree.tid,)) + key + _TOP):
        if len(hk) == want:
            return unpack_value(raw)
    return tree.tree.get(key)


def snapshot_items(tree: HistoryTree, epoch: int, lo: bytes, hi: bytes) -> Iterator[tuple[bytes, bytes]]:
    """The records of keys in ``[lo, hi)`` as snapshot ``epoch`` saw them, in key order."""
    tid = bytes((tree.tid,))
    older: dict[bytes, tuple[int, bytes | None]] = {}
    for hk, raw in tree.hist.items(tid + lo, tid + hi):
        _, key, x = split_hist_key(hk)
        if x >= epoch and (key not in older or x < older[key][0]):
            older[key] = (x, unpack_value(raw))
    if not older:
        yield from tree.tree.items(lo, hi)
        return
    fixed = sorted(older)
    i = 0
    for k, v in tree.tree.items(lo, hi):
        while i < len(fixed) and fixed[i] < k:
            val = older[fixed[i]][1]
            if val is not None:
                yield fixed[i], val
            i += 1
        if i < len(fixed) and fixed[i] == k:
            val = older[k][1]
            i += 1
            if val is not None:
                yield k, val
            continue
        yield k, v
    for key in fixed[i:]:
        val = older[key][1]
        if val is not None:
            yield key, val


class Barrier:
    """The snapshot barrier: every data change (write, truncate, fallocate) holds it shared for
    its whole length; taking a snapshot holds it exclusive for an instant, so no write is half
    done (pages allocated, copy-on-write decided) when the epoch moves. Shared holds nest in a
    thread; a waiting exclusive holder stops new shared ones (a snapshot is not starved)."""

    def __init__(self) -> None:
        # ``with self._lock``, not ``with self._cv``: a Condition's __enter__ is Python code, and
        # every write takes this barrier
        self._lock = threading.Lock()
        self._cv = threading.Condition(self._lock)
        self._shared = 0
        self._exclusive = False
        self._waiting = 0
        self._mine = threading.local()

    def __enter__(self) -> None:  # shared
        mine = self._mine
        depth = getattr(mine, "depth", 0)
        if not depth:
            with self._lock:
                while self._exclusive or self._waiting:
                    self._cv.wait()
                self._shared += 1
        mine.depth = depth + 1

    def __exit__(self, *exc) -> None:
        mine = self._mine
        mine.depth -= 1
        if not mine.depth:
            with self._lock:
                self._shared -= 1
                if self._waiting:  # only a snapshot waits for shared holders to go (notify_all is Python)
                    self._cv.notify_all()

    def exclusive(self):
        return _Exclusive(self)


class _Exclusive:
    def __init__(self, barrier: Barrier) -> None:
        self.b = barrier

    def __enter__(self) -> None:
        b = self.b
        with b._lock:
            b._waiting += 1
            try:
                while b._exclusive or b._shared:
                    b._cv.wait()
            finally:
                b._waiting -= 1
            b._exclusive = True

    def __exit__(self, *exc) -> None:
        with self.b._lock:
            self.b._exclusive = False
            self.b._cv.notify_all()
