"""A tiny page-backed register file used by the engine's tests: key k is a u64 at a fixed place.

Each key lives in its own 8-byte cell (page ``base + k // 500``, offset ``64 + 8*(k % 500)``),
changed with logged OP_WRITE operations under an exclusive lock on the key, so concurrent
transactions never touch the same bytes. Simple enough that a wrong recovery cannot hide.
"""

from __future__ import annotations

import struct

from traxfs.fs.engine import opcodes
from traxfs.fs.engine.page import PageType

PER_PAGE = 500


class KV:
    def __init__(self, eng, keys: int):
        self.eng, self.keys = eng, keys
        base = eng.get_root("kv")
        if base is None:
            tx = eng.begin()
            pages = -(-keys // PER_PAGE)
            base = eng.alloc.alloc_region(tx, pages)
            for p in range(pages):
                f = eng.buffer.pin(base + p, load=False)
                try:
                    with f.latch:
                        eng.update(tx, base + p, opcodes.OP_IMAGE, opcodes.image_payload(f.data, PageType.FIXED, 8, b""))
                finally:
                    eng.buffer.unpin(f)
            eng.set_root(tx, "kv", base)
            eng.commit(tx)
        self.base = base

    def _where(self, k: int) -> tuple[int, int]:
        return self.base + k // PER_PAGE, 64 + 8 * (k % PER_PAGE)

    def get(self, k: int) -> int:
        pid, off = self._where(k)
        with self.eng.page(pid) as f:
            return struct.unpack_from("<Q", f.data, off)[0]

    def put(self, tx, k: int, value: int) -> None:
        self.eng.lock(tx, ("kv", k))
        pid, off = self._where(k)
        with self.eng.page(pid) as f:
            old = bytes(f.data[off : off + 8])
            self.eng.update(tx, pid, opcodes.OP_WRITE, opcodes.write_payload(off, old, struct.pack("<Q", value)))

    def add(self, tx, k: int, delta: int) -> None:
        """Add ``delta`` to cell ``k`` with the engine's increment (OP_ADD), taking no lock:
        increments commute, so concurrent transactions may share the cell and an abort's undo
        (the negated delta) never restores a stale value."""
        pid, off = self._where(k)
        self.eng.update(tx, pid, opcodes.OP_ADD, opcodes.add_payload(off, delta))


def tree_key(k: int) -> bytes:
    """The B+tree key the crash tests mirror key ``k`` under."""
    return b"key%03d" % k
