"""Child process for the SIGKILL crash test: runs random transactions until it is killed.

Usage: python engine_child.py IMAGE SEED FIRST_VALUE KEYS THREADS
Each transaction writes its value to its keys' page cells, a B+tree, a linear hash, an array
list (record k, and one record appended per transaction) and a linked list (key k's record
``(k, old)`` removed, ``(k, value)`` pushed) — nested top actions with logical undo next to
plain physical writes — and adds 1 to the shared counter cell ``COUNTER`` without a lock
(concurrent increments commute), so recovery must keep the five structures in step and the
counter equal to the number of appended records.
Prints, flushed, one line per event:  "B <value> <k1,k2,..>" before a transaction commits or
aborts (its intent), "C <value>" after a durable commit returned, "A <value>" after an abort
returned, "E <message>" if a structure contradicted the workload. Values are unique and increase
over time, so the parent can check what recovery kept.

The record formats are shared with tests/test_engine_crash.py (``array_record``, ``list_record``).
"""

from __future__ import annotations

import itertools
import os
import random
import struct
import sys
import threading

sys.path.insert(0, os.path.dirname(__file__))

from kvpages import KV, PER_PAGE, tree_key  # noqa: E402

from traxfs.fs.engine.engine import Engine  # noqa: E402
from traxfs.fs.engine.locks import Deadlock  # noqa: E402
from traxfs.fs.engine.logmanager import GroupCommitPolicy  # noqa: E402
from traxfs.fs.struct.arraylist import ArrayList  # noqa: E402
from traxfs.fs.struct.btree import BTree  # noqa: E402
from traxfs.fs.struct.linearhash import LinearHash  # noqa: E402
from traxfs.fs.struct.linkedlist import LinkedList  # noqa: E402
from traxfs.volume.device import ImageFileDevice  # noqa: E402

ARRAY_RECORD = struct.Struct("<QQ")  # key (APPENDED for a transaction's appended record), value
APPENDED = (1 << 64) - 1
COUNTER = PER_PAGE - 1  # a cell past the keys on the first page of cells (keys < COUNTER)
_LIST_HEAD = struct.Struct("<HQ")  # slot, value; then (value·7 + slot) % 300 padding bytes


def array_record(key: int, value: int) -> bytes:
    return ARRAY_RECORD.pack(key, value)


def list_record(slot: int, value: int) -> bytes:
    """Key (slot) ``slot``'s linked-list record for ``value``; 10..309 bytes, so nodes split."""
    return _LIST_HEAD.pack(slot, value) + bytes([slot & 0xFF]) * ((value * 7 + slot) % 300)


def parse_list_record(rec: bytes) -> tuple[int, int]:
    slot, value = _LIST_HEAD.unpack_from(rec)
    if rec != list_record(slot, value):
        raise AssertionError(f"linked list record {rec[:16]!r}... (length {len(rec)}) is malformed")
    return slot, value


def create_structures(eng: Engine, name: str, keys: int, chunk: int = 500):
    """B+tree, linear hash, array list (records ``(k, 0)`` for every key) and linked list named
    ``name``, made by durable transactions (the array's records in chunks of ``chunk``)."""
    tx = eng.begin()
    tree, table = BTree.create(eng, tx, name), LinearHash.create(eng, tx, name)
    arr, lst = ArrayList.create(eng, tx, ARRAY_RECORD.size, name=name), LinkedList.create(eng, tx, name)
    for k in range(keys):
        arr.append(tx, array_record(k, 0))
        if k % chunk == chunk - 1:
            eng.commit(tx)
            tx = eng.begin()
    eng.commit(tx)
    return tree, table, arr, lst


def main() -> None:
    image, seed, first, keys, threads = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), \
        int(sys.argv[5])
    eng = Engine.open(ImageFileDevice(image), buffer_pages=24, log_buffer=os.environ.get("TRAX_LOG_BUFFER", "cd"),
                      policy=GroupCommitPolicy(max_commits=4, max_delay=0.001))
    assert keys < COUNTER
    kv = KV(eng, keys)
    tree, table = BTree.open_named(eng, "crash"), LinearHash.open_named(eng, "crash")
    arr, lst = ArrayList.open_named(eng, "crash"), LinkedList.open_named(eng, "crash")
    if tree is None:
        tree, table, arr, lst = create_structures(eng, "crash", keys)
    counter = itertools.count(first)
    out_lock = threading.Lock()
    print("R", flush=True)

    def say(line: str) -> None:
        with out_lock:
            sys.stdout.write(line + "\n")
            sys.stdout.flush()

    def worker(w: int) -> None:
        rng = random.Random(seed * 100 + w)
        while True:
            ks = sorted(rng.sample(range(keys), rng.randint(1, 4)))
            tx = eng.begin()
            try:
                for k in ks:
                    eng.lock(tx, ("kv", k))
            except Deadlock:
                eng.abort(tx)
                continue
            value = next(counter)  # taken under the locks: per key, values grow in commit order
            for k in ks:  # the same value in a page cell and in each structure: atomic across structures
                old = kv.get(k)  # under the key's lock: the last committed value
                kv.put(tx, k, value)
                tree.put(tx, tree_key(k), value.to_bytes(8, "little"))
                table.put(tx, tree_key(k), value.to_bytes(8, "little"))
                tree.put(tx, b"%03d-%d" % (k, value % 40), bytes(120))  # growth: splits under load
                arr.set(tx, k, array_record(k, value))
                if old and not lst.remove(tx, list_record(k, old)):
                    say(f"E transaction {value}: linked list has no record ({k}, {old}) to replace")
                lst.push(tx, list_record(k, value))
            arr.append(tx, array_record(APPENDED, value))
            kv.add(tx, COUNTER, 1)
            say(f"B {value} {','.join(map(str, ks))}")
            if rng.random() < 0.2:
                eng.abort(tx)
                say(f"A {value}")
            else:
                eng.commit(tx)
                say(f"C {value}")
            if rng.random() < 0.02:
                eng.checkpoint()

    for w in range(threads):
        threading.Thread(target=worker, args=(w,), daemon=True).start()
    threading.Event().wait()


if __name__ == "__main__":
    main()
