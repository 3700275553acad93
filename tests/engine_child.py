"""Child process for the SIGKILL crash test: runs random transactions until it is killed.

Usage: python engine_child.py IMAGE SEED FIRST_VALUE KEYS THREADS
Each transaction writes its value to its keys' page cells, a B+tree and a linear hash (nested
top actions with logical undo), so recovery must keep the three structures in step.
Prints, flushed, one line per event:  "B <value> <k1,k2,..>" before a transaction commits or
aborts (its intent), "C <value>" after a durable commit returned, "A <value>" after an abort
returned. Values are unique and increase over time, so the parent can check what recovery kept.
"""

from __future__ import annotations

import itertools
import os
import random
import sys
import threading

sys.path.insert(0, os.path.dirname(__file__))

from kvpages import KV, tree_key  # noqa: E402

from traxfs.fs.engine.engine import Engine  # noqa: E402
from traxfs.fs.engine.locks import Deadlock  # noqa: E402
from traxfs.fs.engine.logmanager import GroupCommitPolicy  # noqa: E402
from traxfs.fs.struct.btree import BTree  # noqa: E402
from traxfs.fs.struct.linearhash import LinearHash  # noqa: E402
from traxfs.volume.device import ImageFileDevice  # noqa: E402


def main() -> None:
    image, seed, first, keys, threads = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), \
        int(sys.argv[5])
    eng = Engine.open(ImageFileDevice(image), buffer_pages=24, log_buffer=os.environ.get("TRAX_LOG_BUFFER", "cd"),
                      policy=GroupCommitPolicy(max_commits=4, max_delay=0.001))
    kv = KV(eng, keys)
    tree, table = BTree.open_named(eng, "crash"), LinearHash.open_named(eng, "crash")
    if tree is None:
        tx = eng.begin()
        tree, table = BTree.create(eng, tx, "crash"), LinearHash.create(eng, tx, "crash")
        eng.commit(tx)
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
            for k in ks:  # the same value in a page cell and in a B+tree: atomic across structures
                kv.put(tx, k, value)
                tree.put(tx, tree_key(k), value.to_bytes(8, "little"))
                table.put(tx, tree_key(k), value.to_bytes(8, "little"))
                tree.put(tx, b"%03d-%d" % (k, value % 40), bytes(120))  # growth: splits under load
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
