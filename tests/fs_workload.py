"""A mixed workload on a mounted traxfs, run as its own process by the crash tests.

usage: fs_workload.py ROOT JOURNAL SEED PREFIX

It writes, under ROOT, files whose contents are derived from (name, version), and appends to
JOURNAL (a file on another filesystem, flushed line by line) what it has made durable and what
it is about to do, so the test can judge the state found after the server is SIGKILLed:

  D name ver [size] name holds version ver (of that size, if given), fsynced (must survive)
  P final tmp ver   about to rename tmp (fsynced, version ver) onto final
  R final ver       the rename is durable (directory fsynced)
  u name            about to unlink name
  U name            the unlink is durable
  V name ver size   name was written up to size bytes of version ver, never fsynced: if it
                    survives at all, it holds a prefix of that version (ordered mode: never
                    bytes that were not written to it)
  O name old new    about to overwrite name (fsynced at version old) in place with version
                    new, same size, in chunks in random order; "D name new" follows once that
                    is fsynced. In between, each byte holds its old or its new value, and no
                    read fails (the checksums of overwritten pages are settled at mount)

It stops at its first error (the server is gone).
"""

from __future__ import annotations

import hashlib
import itertools
import os
import random
import sys


def content(name: str, ver: int, size: int | None = None) -> bytes:
    seed = hashlib.sha256(f"{name}:{ver}".encode()).digest()
    rng = random.Random(seed)
    n = size if size is not None else rng.choice([0, 1, 100, 4095, 4096, 5000, 70000, 300000])
    return rng.randbytes(n)


def main() -> None:
    root, journal, seed, prefix = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    rng = random.Random(seed)
    jf = open(journal, "a", buffering=1)  # noqa: SIM115  (kept open for the whole run)

    def note(line: str) -> None:
        jf.write(line + "\n")
        jf.flush()
        os.fsync(jf.fileno())

    def fsync_dir(path: str) -> None:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    dirs = [os.path.join(root, f"d{i}") for i in range(3)]
    for d in dirs:
        os.makedirs(d, exist_ok=True)
    fsync_dir(root)
    durable: list[str] = []
    versions: dict[str, int] = {}  # durable files overwritten in place: their fsynced version
    n = 0
    try:
        while True:
            n += 1
            op = rng.random()
            d = rng.choice(dirs)
            if op < 0.3:  # a new file, fsynced
                name = os.path.join(d, f"{prefix}f{n}")
                data = content(name, 1)
                with open(name, "wb") as f:
                    for i in range(0, len(data), 65536):
                        f.write(data[i : i + 65536])
                    f.flush()
                    os.fsync(f.fileno())
                fsync_dir(d)
                note(f"D {name} 1")
                durable.append(name)
            elif op < 0.45:  # atomic replace: write tmp, fsync, rename onto the final name
                final = os.path.join(d, f"{prefix}r{rng.randrange(4)}")
                tmp = final + ".tmp"
                ver = n
                with open(tmp, "wb") as f:
                    f.write(content(final, ver))
                    os.fsync(f.fileno())
                fsync_dir(d)
                note(f"P {final} {tmp} {ver}")
                os.rename(tmp, final)
                fsync_dir(d)
                note(f"R {final} {ver}")
            elif op < 0.6 and durable:  # overwrite a durable file in place (checksummed pages rewritten)
                name = rng.choice(durable)
                old_ver = versions.get(name, 1)
                size = len(content(name, 1))  # every version of the file has the first one's size
                new = content(name, n, size)
                note(f"O {name} {old_ver} {n}")
                cuts = sorted({0, size, *(rng.randrange(size + 1) for _ in range(rng.randint(0, 12)))})
                pieces = list(itertools.pairwise(cuts))
                rng.shuffle(pieces)
                fd = os.open(name, os.O_WRONLY)
                try:
                    for a, b in pieces:
                        os.pwrite(fd, new[a:b], a)
                    os.fsync(fd)
                finally:
                    os.close(fd)
                versions[name] = n
                note(f"D {name} {n} {size}")
            elif op < 0.7 and durable:  # unlink
                name = durable.pop(rng.randrange(len(durable)))
                versions.pop(name, None)
                note(f"u {name}")
                os.unlink(name)
                fsync_dir(os.path.dirname(name))
                note(f"U {name}")
            else:  # written, never fsynced
                name = os.path.join(d, f"{prefix}v{n}")
                data = content(name, 1)
                chunk = rng.choice([32768, 3001])  # odd chunks: appends into a checksummed last page
                with open(name, "wb") as f:
                    for i in range(0, len(data), chunk):
                        f.write(data[i : i + chunk])
                        f.flush()
                        note(f"V {name} 1 {min(len(data), i + chunk)}")
                if not data:
                    note(f"V {name} 1 0")
    except OSError:
        sys.exit(0)


if __name__ == "__main__":
    main()
