"""Blocks in memory: a least-recently-used cache of bounded size, and read-ahead along readers.

Every queue of a store shares one cache of ``capacity`` bytes, so memory stays bounded however
many queues, views and readers there are and however far producers run ahead of consumers (the
blocks they write go to the device; only the tail block of each queue and what readers touch
stay). Read-ahead: a reader entering a block asks for the next ``ahead`` blocks of its queue,
which one background thread loads (a block read from the device costs one request; a reader
that finds its next block already loaded waits for nothing). Loading verifies every frame.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable

from .block import Block

Key = tuple[int, int]  # (queue id, first sequence number of the block)


class BlockCache:
    def __init__(self, capacity: int = 32 << 20):
        self.capacity = capacity
        self._blocks: OrderedDict[Key, Block] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        self._wanted: OrderedDict[Key, Callable[[], Block | None]] = OrderedDict()
        self._wake = threading.Condition(self._lock)
        self._stop = False
        self.stats = {"hits": 0, "misses": 0, "prefetched": 0, "evicted": 0}
        self._thread = threading.Thread(target=self._prefetcher, name="queue-prefetch", daemon=True)
        self._thread.start()

    def get(self, key: Key, load: Callable[[], Block]) -> Block:
        """The block ``key``, from memory or by ``load()`` (which reads and verifies it)."""
        with self._lock:
            b = self._blocks.get(key)
            if b is not None:
                self._blocks.move_to_end(key)
                self.stats["hits"] += 1
                return b
            self.stats["misses"] += 1
        b = load()
        self.put(key, b)
        return b

    def put(self, key: Key, block: Block) -> None:
        with self._lock:
            old = self._blocks.pop(key, None)
            if old is not None:
                self._bytes -= len(old.data)
            self._blocks[key] = block
            self._bytes += len(block.data)
            while self._bytes > self.capacity and len(self._blocks) > 1:
                _, gone = self._blocks.popitem(last=False)
                self._bytes -= len(gone.data)
                self.stats["evicted"] += 1

    def drop(self, keys) -> None:
        """Forget blocks (reclaimed: their pages may soon hold something else)."""
        with self._lock:
            for key in keys:
                b = self._blocks.pop(key, None)
                if b is not None:
                    self._bytes -= len(b.data)
                self._wanted.pop(key, None)

    def resident(self, qid: int) -> int:
        """How many blocks of queue ``qid`` are in memory."""
        with self._lock:
            return sum(1 for q, _ in self._blocks if q == qid)

    def prefetch(self, wanted: list[tuple[Key, Callable[[], Block | None]]]) -> None:
        """Load these blocks in the background unless they are in memory (the loaders return
        None for a block that is gone by then)."""
        with self._lock:
            for key, load in wanted:
                if key not in self._blocks and key not in self._wanted:
                    self._wanted[key] = load
            if self._wanted:
                self._wake.notify()

    def _prefetcher(self) -> None:
        while True:
            with self._lock:
                while not self._wanted and not self._stop:
                    self._wake.wait()
                if self._stop:
                    return
                key, load = self._wanted.popitem(last=False)
            try:
                b = load()
            except Exception:  # noqa: BLE001  (a damaged block: the reader that needs it gets the error)
                continue
            if b is not None:
                with self._lock:
                    fresh = key not in self._blocks
                    self.stats["prefetched"] += fresh
                if fresh:
                    self.put(key, b)

    @property
    def bytes(self) -> int:
        return self._bytes

    def close(self) -> None:
        with self._lock:
            self._stop = True
            self._blocks.clear()
            self._bytes = 0
            self._wake.notify()
