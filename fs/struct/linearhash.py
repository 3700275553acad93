"""Litwin's linear hash: a hash table that grows one bucket at a time.

Why linear hashing: a split rehashes *one* bucket, so an insert never pays for
rehashing the table — latency stays predictable — and the directory grows by appending, which
is exactly what the array list does well.

* **Addressing.** ``h`` is a 32-bit hash of the key (crc32c with a murmur finaliser: stable
  across processes, unlike Python's ``hash``). With ``level`` = N and ``split`` = the next bucket
  to split, the bucket is ``h mod 2**N``, or ``h mod 2**(N+1)`` if that is below ``split``.
  There are ``2**N + split`` buckets.
* **Growth.** When the records' bytes exceed :data:`FILL` of the buckets' first-page capacity,
  bucket ``split`` is split into itself and ``split + 2**N``: its records whose ``h mod
  2**(N+1)`` names the new bucket move there; then ``split`` advances (at ``2**N`` it wraps to
  0 and N grows). The table never shrinks (as in Stasis): deletes leave space for later inserts.
* **Buckets** are chains of slotted pages (``PageType.SLOTTED``, aux = next page, 0 ends the
  chain), records ``klen u16 | key | value`` in no order; a lookup finds ``klen|key`` in the
  page with ``bytes.find`` and confirms the hit is a record start, so it costs no per-slot
  Python loop. The first page of bucket ``b`` is record ``b`` (u64) of an :class:`ArrayList`.
* **Header** (``PageType.HASH_HEADER``): magic b"TXLH", version u16, pad u16, directory u64,
  count u64, record bytes u64, level u32, split u32.

Every change — including the split an insert triggers — is one nested top action under the
table's latch with a logical undo (put ↔ put back / delete, delete ↔ put); a split is not undone
by the logical undo (the table keeps its shape, which is harmless). Moving records at a split
deletes them one by one from the old chain (slot deletes log the record, ~the bytes moved) and
pastes them into new pages; the old chain keeps its pages, which later inserts refill.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator

import crc32c

from ..engine import check as engine_check
from ..engine import opcodes, slotted
from ..engine.page import HEADER_SIZE, PAGE_SIZE, PageType, init_header, set_aux
from ..engine.xact import Transaction
from .arraylist import ArrayList
from .common import (
    DIR_START,
    PAGE_CAPACITY,
    U16,
    U64,
    aux_of,
    claim_checked_page,
    new_page,
    nslots,
    pinned,
    records_fit,
    register_map_undos,
    set_page_aux,
    structure_latch,
    write_bytes,
)
from .keymap import LoggedMap

KIND = "hash"
MAGIC = b"TXLH"
VERSION = 1
MAX_KEY = 1024
MAX_ENTRY = 3000  # key + value: a record always fits an empty bucket page
FILL = 0.75
INITIAL_LEVEL = 2  # 4 buckets
_HDR = struct.Struct("<4sHHQQQII")  # magic, version, pad, directory, count, bytes, level, split
_DIR_OFF = HEADER_SIZE + 8
_STATS_OFF = HEADER_SIZE + 16  # count u64, bytes u64
_SHAPE_OFF = HEADER_SIZE + 32  # level u32, split u32
_STATS = struct.Struct("<QQ")
_SHAPE = struct.Struct("<II")

OP_UNDO_PUT = 120  # payload: undo head | had_old u8 | klen u16 | key | old value
OP_UNDO_DELETE = 121  # payload: undo head | klen u16 | key | value
OP_UNDO_PATCH = 122  # payload: undo head | klen u16 | key | patch runs of the value (old -> new)


def key_hash(key: bytes) -> int:
    h = crc32c.crc32c(key)
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & 0xFFFFFFFF
    return h ^ (h >> 16)


def bucket_of(h: int, level: int, split: int) -> int:
    b = h & ((1 << level) - 1)
    if b < split:
        b = h & ((1 << (level + 1)) - 1)
    return b


def _record(key: bytes, value: bytes) -> bytes:
    return U16.pack(len(key)) + key + value


def _rec_key(rec: bytes) -> bytes:
    return rec[2 : 2 + U16.unpack_from(rec)[0]]


def _find(buf, probe: bytes) -> int:
    """Slot of the record that starts with ``probe`` (= klen|key), or -1."""
    n = nslots(buf)
    if not n:
        return -1
    pos = buf.find(probe, DIR_START + 4 * n)
    if pos < 0:
        return -1
    starts = struct.unpack_from(f"<{2 * n}H", buf, DIR_START)[0::2]
    while pos >= 0:
        try:
            return starts.index(pos)
        except ValueError:  # a match inside another record, or in freed heap bytes
            pos = buf.find(probe, pos + 1)
    return -1


def _check_sizes(key: bytes, value: bytes) -> None:
    if len(key) > MAX_KEY:
        raise ValueError(f"hash key of {len(key)} bytes exceeds the limit of {MAX_KEY}")
    if len(key) + len(value) > MAX_ENTRY:
        raise ValueError(f"hash key + value of {len(key) + len(value)} bytes exceeds the limit of {MAX_ENTRY}")


class LinearHash(LoggedMap):
    """One linear hash table, identified by its header page; objects on the same header share
    one latch."""

    UNDO_PUT, UNDO_DELETE, UNDO_PATCH = OP_UNDO_PUT, OP_UNDO_DELETE, OP_UNDO_PATCH
    check_sizes = staticmethod(_check_sizes)

    def __init__(self, engine, header_pid: int):
        self.e = engine
        self.header = header_pid
        self.latch = structure_latch(engine, header_pid)
        with pinned(engine, header_pid) as f:
            magic, _v, _p, directory, *_ = _HDR.unpack_from(f.data, HEADER_SIZE)
            ptype = f.data[3]
        if ptype != PageType.HASH_HEADER or magic != MAGIC:
            raise ValueError(f"page {header_pid} is not a linear hash header")
        self.dir = ArrayList(engine, directory)

    @classmethod
    def create(cls, engine, tx: Transaction, name: str | None = None) -> LinearHash:
        header = new_page(engine, tx, PageType.HASH_HEADER, is_slotted=False)
        directory = ArrayList.create(engine, tx, 8)
        for _ in range(1 << INITIAL_LEVEL):
            directory.append(tx, U64.pack(new_page(engine, tx, PageType.SLOTTED)))
        write_bytes(engine, tx, header, HEADER_SIZE,
                    _HDR.pack(MAGIC, VERSION, 0, directory.header, 0, 0, INITIAL_LEVEL, 0))
        if name is not None:
            engine.set_root(tx, f"{KIND}:{name}", header)
        return cls(engine, header)

    @classmethod
    def bulk_create(cls, engine, tx: Transaction, items, name: str | None = None) -> LinearHash:
        """A new table holding ``items`` ((key, value) pairs, unique keys), built in one pass.

        The same logging opt-out as the B+tree's bulk build: the table is sized at once to the
        shape that inserting the items one by one would have grown to (buckets = bytes /
        (FILL · page capacity)), every bucket's chain and the directory are laid out in memory
        and written unlogged to freshly allocated pages, forced; only the allocations, the
        header and the catalog entry are logged. Abort, or a crash before commit, leaves no
        table and no allocated page."""
        records: list[bytes] = []
        hashes: list[int] = []
        seen: set[bytes] = set()
        nbytes = 0
        for k, v in items:
            k, v = bytes(k), bytes(v)
            _check_sizes(k, v)
            if k in seen:
                raise ValueError(f"duplicate key {k!r} in a bulk load")
            seen.add(k)
            rec = U16.pack(len(k)) + k + v
            records.append(rec)
            hashes.append(key_hash(k))
            nbytes += len(rec) + 4
        buckets = max(1 << INITIAL_LEVEL, -(-nbytes // int(FILL * PAGE_CAPACITY)))
        level = buckets.bit_length() - 1
        split = buckets - (1 << level)
        chains: list[list[list[bytes]]] = [[[]] for _ in range(buckets)]
        used = [0] * buckets
        for rec, h in zip(records, hashes, strict=True):
            b = bucket_of(h, level, split)
            if used[b] + len(rec) + 4 > PAGE_CAPACITY:
                chains[b].append([])
                used[b] = 0
            chains[b][-1].append(rec)
            used[b] += len(rec) + 4
        total = sum(len(c) for c in chains)
        header = new_page(engine, tx, PageType.HASH_HEADER, is_slotted=False)
        first = engine.alloc_region(tx, total)
        lsn = engine.next_lsn()
        images = bytearray()
        heads: list[bytes] = []
        pid = first
        for chain in chains:
            heads.append(U64.pack(pid))
            for i, page_records in enumerate(chain):
                buf = bytearray(PAGE_SIZE)
                init_header(buf, pid, PageType.SLOTTED, lsn)
                slotted.build(buf, page_records)
                set_aux(buf, pid + 1 if i + 1 < len(chain) else 0)
                images += buf
                pid += 1
        engine.write_unlogged(first, images)
        directory = ArrayList.bulk_create(engine, tx, 8, heads)
        write_bytes(engine, tx, header, HEADER_SIZE,
                    _HDR.pack(MAGIC, VERSION, 0, directory.header, len(records), nbytes, level, split))
        if name is not None:
            engine.set_root(tx, f"{KIND}:{name}", header)
        return cls(engine, header)

    @classmethod
    def open(cls, engine, header_pid: int) -> LinearHash:
        return cls(engine, header_pid)

    @classmethod
    def open_named(cls, engine, name: str) -> LinearHash | None:
        pid = engine.get_root(f"{KIND}:{name}")
        return cls(engine, pid) if pid else None

    # ----- header -------------------------------------------------------------------------------
    def _shape(self) -> tuple[int, int]:
        with pinned(self.e, self.header) as f:
            return _SHAPE.unpack_from(f.data, _SHAPE_OFF)

    def __len__(self) -> int:
        with pinned(self.e, self.header) as f:
            return _STATS.unpack_from(f.data, _STATS_OFF)[0]

    def buckets(self) -> int:
        level, split = self._shape()
        return (1 << level) + split

    def _chain(self, bucket: int) -> list[int]:
        pid = U64.unpack(self.dir.get(bucket))[0]
        out = []
        while pid:
            out.append(pid)
            with pinned(self.e, pid) as f:
                pid = aux_of(f.data)
        return out

    # ----- reading ------------------------------------------------------------------------------
    def get(self, key: bytes, default=None):
        key = bytes(key)
        probe = U16.pack(len(key)) + key
        with self.latch:
            level, split = self._shape()
            pid = U64.unpack(self.dir.get(bucket_of(key_hash(key), level, split)))[0]
            while pid:
                with pinned(self.e, pid) as f:
                    i = _find(f.data, probe)
                    if i >= 0:
                        return slotted.get(f.data, i)[len(probe) :]
                    pid = aux_of(f.data)
        return default

    lookup = get

    def __contains__(self, key: bytes) -> bool:
        return self.get(key) is not None

    def items(self) -> Iterator[tuple[bytes, bytes]]:
        """Every entry, bucket by bucket (one bucket read per latch hold). A split running
        between two buckets' reads may move a record read already to a bucket not yet read:
        concurrent writers can make an entry appear twice; the order is the hash's."""
        b = 0
        while True:
            with self.latch:
                if b >= self.buckets():
                    return
                batch = []
                for pid in self._chain(b):
                    with pinned(self.e, pid) as f:
                        for rec in slotted.records(f.data):
                            k = _rec_key(rec)
                            batch.append((k, rec[2 + len(k) :]))
            yield from batch
            b += 1

    def keys(self) -> Iterator[bytes]:
        return (k for k, _ in self.items())

    __iter__ = keys

    # ----- changing: put and delete are LoggedMap's; the physical work (latch held, inside a
    # nested top action or a logical undo) is here
    def _header(self) -> tuple[int, int, int, int]:
        """(count, bytes, level, split)."""
        with pinned(self.e, self.header) as f:
            return _STATS.unpack_from(f.data, _STATS_OFF) + _SHAPE.unpack_from(f.data, _SHAPE_OFF)

    def _set_stats(self, tx: Transaction, old: tuple[int, int], new: tuple[int, int]) -> None:
        if old != new:
            self.e.update(tx, self.header, opcodes.OP_WRITE,
                          opcodes.write_payload(_STATS_OFF, _STATS.pack(*old), _STATS.pack(*new)))

    def _put(self, tx: Transaction, key: bytes, value: bytes) -> bytes | None:
        """One pass over the bucket's chain: find the key, remember the first page with room."""
        e = self.e
        probe = U16.pack(len(key)) + key
        rec = probe + value
        count0, nbytes0, level, split = self._header()
        count, nbytes = count0, nbytes0
        pid = U64.unpack(self.dir.get(bucket_of(key_hash(key), level, split)))[0]
        old = room = None
        last = 0
        while pid:
            with pinned(e, pid) as f:
                buf = f.data
                i = _find(buf, probe) if old is None else -1
                if i >= 0:
                    old_rec = slotted.get(buf, i)
                    old = old_rec[len(probe) :]
                    if old_rec == rec:
                        return old
                    if slotted.free_space(buf) + len(old_rec) >= len(rec):
                        e.update(tx, pid, opcodes.OP_SLOT_REPLACE, opcodes.slot_replace_payload(i, old_rec, rec))
                        self._set_stats(tx, (count, nbytes), (count, nbytes + len(rec) - len(old_rec)))
                        return old
                    e.update(tx, pid, opcodes.OP_SLOT_DELETE, opcodes.slot_delete_payload(i, old_rec))
                    count, nbytes = count - 1, nbytes - len(old_rec) - 4
                if room is None and slotted.fits(buf, len(rec)):
                    room = pid
                last, pid = pid, aux_of(buf)
            if old is not None and room is not None:
                break
        if room is not None:
            with pinned(e, room) as f:
                e.update(tx, room, opcodes.OP_SLOT_INSERT, opcodes.slot_insert_payload(nslots(f.data), rec))
        else:
            set_page_aux(e, tx, last, new_page(e, tx, PageType.SLOTTED, 0, [rec]))
        self._set_stats(tx, (count0, nbytes0), (count + 1, nbytes + len(rec) + 4))
        self._maybe_split(tx, count + 1, nbytes + len(rec) + 4, level, split)
        return old

    def _delete(self, tx: Transaction, key: bytes) -> bytes | None:
        e = self.e
        probe = U16.pack(len(key)) + key
        count, nbytes, level, split = self._header()
        pid = U64.unpack(self.dir.get(bucket_of(key_hash(key), level, split)))[0]
        while pid:
            with pinned(e, pid) as f:
                i = _find(f.data, probe)
                if i >= 0:
                    old_rec = slotted.get(f.data, i)
                    e.update(tx, pid, opcodes.OP_SLOT_DELETE, opcodes.slot_delete_payload(i, old_rec))
                    self._set_stats(tx, (count, nbytes), (count - 1, nbytes - len(old_rec) - 4))
                    return old_rec[len(probe) :]
                pid = aux_of(f.data)
        return None

    def _maybe_split(self, tx: Transaction, count: int, nbytes: int, level: int, split: int) -> None:
        if nbytes > FILL * PAGE_CAPACITY * ((1 << level) + split):
            self._split(tx, level, split)

    def _split(self, tx: Transaction, level: int, split: int) -> None:
        """Split bucket ``split`` into itself and ``split + 2**level``."""
        e = self.e
        new_b = split + (1 << level)
        mask = (1 << (level + 1)) - 1
        moving: list[bytes] = []
        for pid in self._chain(split):
            with pinned(e, pid) as f:
                recs = slotted.records(f.data)
                go = [i for i, r in enumerate(recs) if key_hash(_rec_key(r)) & mask == new_b]
                for i in reversed(go):  # highest first: lower indices stay valid
                    e.update(tx, pid, opcodes.OP_SLOT_DELETE, opcodes.slot_delete_payload(i, recs[i]))
                moving += [recs[i] for i in go]
        groups: list[list[bytes]] = [[]]
        for r in moving:
            if not records_fit(groups[-1] + [r]):
                groups.append([])
            groups[-1].append(r)
        nxt = 0
        for g in reversed(groups):
            nxt = new_page(e, tx, PageType.SLOTTED, nxt, g)
        if self.dir.append(tx, U64.pack(nxt)) != new_b:
            raise AssertionError(f"linear hash {self.header}: directory out of step with bucket {new_b}")
        split += 1
        if split == 1 << level:
            level, split = level + 1, 0
        write_bytes(e, tx, self.header, _SHAPE_OFF, _SHAPE.pack(level, split))

    # ----- verification -------------------------------------------------------------------------
    def check(self, pages: set | None = None) -> list[str]:
        """Header; directory (an array list) holds exactly 2**level + split buckets; every chain
        page is an allocated slotted page owned once; every record well-formed and addressed
        to its bucket; keys unique; count and byte totals match the header."""
        probs: list[str] = []
        own = pages if pages is not None else set()
        name = f"hash {self.header}"
        with self.latch:
            with pinned(self.e, self.header) as f:
                magic, version, _pad, directory, count, nbytes, level, split = _HDR.unpack_from(f.data, HEADER_SIZE)
            own.add(self.header)
            if magic != MAGIC or version != VERSION:
                return [f"{name}: bad header (magic {magic!r}, version {version})"]
            probs += [f"{name}: directory: {p}" for p in self.dir.check(own)]
            nb = (1 << level) + split
            if split >= 1 << level:
                probs.append(f"{name}: split pointer {split} beyond 2**{level}")
            if len(self.dir) != nb:
                probs.append(f"{name}: directory holds {len(self.dir)} buckets, expected {nb}")
                nb = min(nb, len(self.dir))
            total = total_bytes = 0
            for b in range(nb):
                pid = U64.unpack(self.dir.get(b))[0]
                seen_keys: set[bytes] = set()
                if not pid:
                    probs.append(f"{name}: bucket {b} has no page")
                while pid:
                    where = f"{name} bucket {b} page {pid}"
                    buf = claim_checked_page(self.e, pid, own, where, probs)
                    if buf is None:
                        break
                    for i, rec in enumerate(slotted.records(buf)):
                        if len(rec) < 2 or U16.unpack_from(rec)[0] > len(rec) - 2:
                            probs.append(f"{where} slot {i}: malformed record")
                            continue
                        k = _rec_key(rec)
                        if bucket_of(key_hash(k), level, split) != b:
                            probs.append(f"{where} slot {i}: key {k!r} belongs in another bucket")
                        if k in seen_keys:
                            probs.append(f"{where} slot {i}: duplicate key {k!r}")
                        seen_keys.add(k)
                        total += 1
                        total_bytes += len(rec) + 4
                    pid = aux_of(buf)
            if total != count or total_bytes != nbytes:
                probs.append(f"{name}: header counts {count} entries / {nbytes} bytes, "
                             f"buckets hold {total} / {total_bytes}")
        return probs


# ----- logical undo -------------------------------------------------------------------------------
register_map_undos(LinearHash, OP_UNDO_PUT, OP_UNDO_DELETE, OP_UNDO_PATCH, "hash")


def _check_root(engine, pid: int, pages: set) -> list[str]:
    try:
        h = LinearHash(engine, pid)
    except ValueError as ex:
        return [str(ex)]
    return h.check(pages)


engine_check.register_checker(KIND, _check_root)
