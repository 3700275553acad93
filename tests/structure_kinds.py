"""The four page structures behind one small interface, for the contract suite
(test_structures_contract.py) and the structure-specific test files.

A *kind* creates and reopens its structure, keeps a Python model of what the structure must hold
(a dict for the maps — B+tree and linear hash —, a list for the sequences — array list and
linked list), applies a random mix of its own operations to both, and checks the structure
against the model. What differs between structures lives here and nowhere else; what every
structure must do (survive abort, reopen, crash, concurrent use) is written once in the suite.
"""

from __future__ import annotations

import random
from abc import ABC, abstractmethod
from typing import Any

from traxfs.fs.struct.arraylist import ArrayList
from traxfs.fs.struct.btree import BTree
from traxfs.fs.struct.btree_node import MAX_ENTRY as BTREE_MAX_ENTRY
from traxfs.fs.struct.linearhash import MAX_ENTRY as HASH_MAX_ENTRY
from traxfs.fs.struct.linearhash import LinearHash
from traxfs.fs.struct.linkedlist import LinkedList


class Kind(ABC):
    """One structure, as the contract suite drives it."""

    name: str
    cls: type
    is_map: bool
    examples: int  # hypothesis examples of its state machine
    change_log: int  # about the log bytes one random change writes (a transaction must fit the log)
    batch: int  # random changes per transaction in the abort / reopen / crash test

    def __str__(self) -> str:
        return self.name

    def create(self, eng, tx, name: str):
        return self.cls.create(eng, tx, name)

    def make(self, eng, name: str = "s"):
        """A new empty structure named ``name``, committed."""
        tx = eng.begin()
        s = self.create(eng, tx, name)
        eng.commit(tx)
        return s

    def open(self, eng, name: str = "s"):
        return self.cls.open_named(eng, name)

    @abstractmethod
    def empty(self) -> Any:
        """The model of an empty structure."""

    @abstractmethod
    def contents(self, s) -> Any:
        """What the structure holds, comparable with the (normalised) model."""

    def assert_holds(self, s, model) -> None:
        assert s.check() == []
        assert self.contents(s) == self.normal(model)
        assert len(s) == len(model)

    def normal(self, model) -> Any:
        return model

    @abstractmethod
    def changes(self, s, tx, model, rnd: random.Random, n: int) -> None:
        """``n`` random operations of this structure, applied to it and to ``model``."""


class MapKind(Kind):
    is_map = True

    def __init__(self, name: str, cls: type, max_entry: int, ordered: bool, examples: int):
        self.name, self.cls, self.max_entry, self.ordered, self.examples = name, cls, max_entry, ordered, examples
        self.change_log, self.batch = 1500, 1500

    def empty(self) -> dict:
        return {}

    def contents(self, s):
        got = list(s.items())
        if self.ordered:
            return got
        assert len({k for k, _ in got}) == len(got), "a key listed twice"
        return dict(got)

    def normal(self, model):
        return sorted(model.items()) if self.ordered else model

    def value(self, key: bytes, value: bytes) -> bytes:
        """``value`` cut to what fits with ``key`` in one entry."""
        return value[: self.max_entry - len(key)]

    def changes(self, s, tx, model, rnd, n):
        """Puts (new keys and overwrites; values of one size class per call, so big calls split
        pages) and deletes of present keys (pages emptied, merged, freed)."""
        size = rnd.choice([4, 60, 900])
        for _ in range(n):
            if model and rnd.random() < 0.3:
                k = rnd.choice(list(model))
                assert s.delete(tx, k) == model.pop(k)
                continue
            i = rnd.randrange(4000)
            k = b"b%05d" % i if rnd.random() < 0.9 else rnd.randbytes(rnd.randrange(1, 20))
            v = self.value(k, (b"%d." % i * size)[: rnd.randrange(size + 1)])
            assert s.put(tx, k, v) == model.get(k)
            model[k] = v

    def lookups(self, s, model, k: bytes, lo: bytes | None, hi: bytes | None) -> None:
        """Point lookups, and for an ordered map the floor of ``k`` and the range [lo, hi)."""
        assert s.get(k) == model.get(k)
        assert (k in s) == (k in model)
        if not self.ordered:
            return
        below = [x for x in model if x <= k]
        want = max(below) if below else None
        assert s.floor(k) == ((want, model[want]) if want is not None else None)
        assert list(s.items(lo, hi)) == sorted((x, v) for x, v in model.items()
                                               if (lo is None or x >= lo) and (hi is None or x < hi))


class ArrayListKind(Kind):
    name, cls, is_map, examples, change_log, batch = "arraylist", ArrayList, False, 6, 400, 1500
    record_size = 64  # 63 records a page: a few hundred appends cross into new, doubled ranges

    def create(self, eng, tx, name):
        return ArrayList.create(eng, tx, self.record_size, name=name)

    def empty(self) -> list:
        return []

    def contents(self, s) -> list:
        return list(s)

    def record(self, data: bytes) -> bytes:
        return data[: self.record_size].ljust(self.record_size, b".")

    def append(self, s, tx, model, data: bytes) -> None:
        r = self.record(data)
        assert s.append(tx, r) == len(model)
        model.append(r)

    def changes(self, s, tx, model, rnd, n):
        """Appends, and sets of records anywhere (physical writes, undone byte range by byte
        range)."""
        for _ in range(n):
            if model and rnd.random() < 0.3:
                i = rnd.randrange(len(model))
                model[i] = self.record(b"set %d" % rnd.randrange(10**6))
                s.set(tx, i, model[i])
            else:
                self.append(s, tx, model, b"%d" % rnd.randrange(10**9))


class LinkedListKind(Kind):
    name, cls, is_map, examples, change_log, batch = "linkedlist", LinkedList, False, 6, 4500, 600

    def empty(self) -> list:
        return []

    def contents(self, s) -> list:
        return list(s)

    def append(self, s, tx, model, data: bytes) -> None:
        s.push(tx, data)
        model.append(data)

    def changes(self, s, tx, model, rnd, n):
        """Pushes and pops at both ends, removes of a record anywhere; records of 1 to 1,500
        bytes, so pages fill, split and empty."""
        for _ in range(n):
            c = rnd.random()
            r = bytes([rnd.randrange(256)]) * rnd.choice([1, 10, 100, 700, 1500])
            if c < 0.35:
                s.push(tx, r)
                model.append(r)
            elif c < 0.55:
                s.push(tx, r, front=True)
                model.insert(0, r)
            elif c < 0.72:
                assert s.pop(tx) == (model.pop(0) if model else None)
            elif c < 0.85:
                assert s.pop(tx, front=False) == (model.pop() if model else None)
            elif model:
                victim = rnd.choice(model)
                assert s.remove(tx, victim)
                model.remove(victim)
            else:
                assert not s.remove(tx, r)


BTREE = MapKind("btree", BTree, BTREE_MAX_ENTRY, ordered=True, examples=12)
HASH = MapKind("linearhash", LinearHash, HASH_MAX_ENTRY, ordered=False, examples=10)
ARRAYLIST = ArrayListKind()
LINKEDLIST = LinkedListKind()
KINDS = [BTREE, HASH, ARRAYLIST, LINKEDLIST]
MAPS = [BTREE, HASH]
