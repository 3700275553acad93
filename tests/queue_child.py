"""Child process for the queue crash test: appends, fsyncs and view commits until it is killed.

Usage: python queue_child.py IMAGE SEED FIRST_BATCH
Batch ``b`` holds records ``b<b>-<i>/<n>`` (i of n, padded to a size drawn per record: some
longer than a block). Prints, flushed, one line per event: "A b first n" after batch b was
appended with sequence numbers first.., "S b" after an fsync that followed batch b returned,
"c v seq" before view v's head is moved to seq (commit or seek) and "C v seq" after it returned.

The views may lag far behind, so the history they hold can fill the volume: an append refused
with ENOSPC prints "N b" and changes nothing; the consumers then catch up (both heads committed
to the live end, so retention may reclaim) and batch b is tried again, as a producer would.
"""

from __future__ import annotations

import errno
import os
import random
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))

from queue_model import open_store  # noqa: E402

from traxfs.fs.errors import FsError  # noqa: E402
from traxfs.fs.queues.config import QueueConfig  # noqa: E402

CONFIG = QueueConfig(block_size=16384, retain_age_seconds=None, retain_count=20000, seal_bytes=20000,
                     seal_seconds=0.2, max_record_bytes=60000)


def record(b: int, i: int, n: int, size: int) -> bytes:
    head = f"b{b}-{i}/{n}".encode()
    return head + b"." * max(0, size - len(head) - 1) + b"\n"


def main() -> None:
    image, seed, batch = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    rng = random.Random(seed)
    eng, store = open_store(image, background=True, commit_interval=0.2)
    q = store.queues.get(b"c") or store.create(b"c", CONFIG)
    for v in (b"v", b"w"):
        if v not in q.views:
            q.create_view(v)

    def say(line: str) -> None:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()

    say("R")
    while True:
        n = rng.choice([1, 3, 50, 400])
        data = b"".join(record(batch, i, n, rng.choice([20, 100, 300, 20000] if n < 5 else [20, 100, 300]))
                        for i in range(n))
        try:
            first, count = q.append(data)
        except FsError as e:
            if e.errno != errno.ENOSPC:
                raise
            say(f"N {batch}")
            for v in (b"v", b"w"):
                with q.lock:
                    target = max(q.views[v].head, q.live_end)
                    say(f"c {v.decode()} {target}")
                    q.commit(v, target)
                say(f"C {v.decode()} {target}")
            q.tick(0)
            time.sleep(0.05)
            continue
        say(f"A {batch} {first} {count}")
        if rng.random() < 0.2:
            q.sync()
            say(f"S {batch}")
        if rng.random() < 0.1:
            v = rng.choice([b"v", b"w"])
            with q.lock:  # (no reclaim moves the history's start meanwhile)
                head = q.views[v].head
                if rng.random() < 0.8:
                    target = head + rng.randrange(q.live_end - head + 1)
                else:
                    target = q.first_seq + rng.randrange(q.live_end - q.first_seq + 1)
                say(f"c {v.decode()} {target}")
                (q.commit if target >= head else q.seek)(v, target)
            say(f"C {v.decode()} {target}")
        batch += 1


if __name__ == "__main__":
    main()
