"""A device wrapper that simulates power loss, for crash tests of everything above it.

Writes are held back until ``flush()``, as a disk's volatile write cache holds them; reads see
them (read-your-writes, as the cache serves). ``crash()`` then models the power going out:
each unflushed write is independently kept or dropped, the kept ones land in a random order,
and one of them may be torn — only some of its 512-byte or 4 KiB sectors reach the medium.
After ``crash()`` the inner device holds exactly what survived; reopen the layers above on it.

What a correct stack must give after any crash: every byte that was flushed is there, and
everything else is either the old or the new contents of each sector — so checksums catch any
torn structure, and recovery decides the rest.
"""

from __future__ import annotations

import random
import threading

from .device import Device


class PowerLossDevice(Device):
    def __init__(self, inner: Device, seed: int = 0):
        self.inner = inner
        self.path = f"powerloss({inner.path})"
        self.size = inner.size
        self.block_size = inner.block_size
        self.rng = random.Random(seed)
        self._pending: list[tuple[int, bytes]] = []
        self._lock = threading.Lock()
        self.crashed = False
        self.stats = {"writes": 0, "flushes": 0, "dropped": 0, "torn": 0}

    def read(self, offset: int, length: int) -> bytes:
        self._check(offset, length)
        with self._lock:
            data = bytearray(self.inner.read(offset, length))
            for off, w in self._pending:  # later writes win, as in the cache
                lo, hi = max(off, offset), min(off + len(w), offset + length)
                if lo < hi:
                    data[lo - offset : hi - offset] = w[lo - off : hi - off]
        return bytes(data)

    def write(self, offset: int, data: bytes | memoryview) -> None:
        self._check(offset, len(data))
        if self.crashed:
            raise OSError("device lost power")
        with self._lock:
            self._pending.append((offset, bytes(data)))
            self.stats["writes"] += 1

    def write_durable(self, offset: int, data: bytes | memoryview) -> None:
        """This write reaches the medium now; other unflushed writes stay at risk. Unflushed
        bytes it overwrites are superseded, as in a disk cache (only their other bytes remain
        pending)."""
        self._check(offset, len(data))
        if self.crashed:
            raise OSError("device lost power")
        end = offset + len(data)
        with self._lock:
            kept = []
            for off, w in self._pending:
                if off + len(w) <= offset or off >= end:
                    kept.append((off, w))
                    continue
                if off < offset:
                    kept.append((off, w[: offset - off]))
                if off + len(w) > end:
                    kept.append((end, w[end - off :]))
            self._pending = kept
            self.inner.write(offset, bytes(data))
            self.inner.flush()
            self.stats["writes"] += 1

    def flush(self) -> None:
        if self.crashed:
            raise OSError("device lost power")
        with self._lock:
            for off, w in self._pending:
                self.inner.write(off, w)
            self._pending.clear()
            self.inner.flush()
            self.stats["flushes"] += 1

    def crash(self, keep: float = 0.5, tear: bool = True, sector: int | None = None) -> None:
        """Lose power: keep each unflushed write with probability ``keep``, in random order,
        tearing one of them at ``sector`` granularity (512 or 4096, random if None)."""
        with self._lock:
            self.crashed = True
            survivors = [w for w in self._pending if self.rng.random() < keep]
            self.stats["dropped"] += len(self._pending) - len(survivors)
            self.rng.shuffle(survivors)
            torn = self.rng.randrange(len(survivors)) if tear and survivors else -1
            for i, (off, w) in enumerate(survivors):
                if i == torn:
                    unit = sector or self.rng.choice((512, 4096))
                    for s in range(0, len(w), unit):  # each sector independently old or new
                        if self.rng.random() < 0.5:
                            self.inner.write(off + s, w[s : s + unit])
                    self.stats["torn"] += 1
                else:
                    self.inner.write(off, w)
            self._pending.clear()
            self.inner.flush()

    def close(self) -> None:
        self.inner.close()
