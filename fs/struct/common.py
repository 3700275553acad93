"""What every structure shares: structure latches, nested top actions, and page helpers.

**The recipe** (Stasis' nested top actions). Slot operations address records by index, so two
transactions' slot operations on one page do not commute: undoing one of them physically after
the other shifted the slots would damage the page. Every structure operation that changes pages
therefore runs as a *nested top action* (NTA) while holding the structure's latch:

1. take the latch (:func:`structure_latch`: one re-entrant lock per structure, keyed by the
   engine and the structure's header page, so every object opened on the same structure shares
   it — the logical undo run by recovery reopens the structure and finds the same latch);
2. ``nta_begin``; do the physical/physiological updates;
3. ``nta_end(nta, UNDO_OPCODE, payload)`` *before* releasing the latch. From then on the
   physical records are never undone; if the transaction aborts, the logical undo (delete the
   key I inserted, ...) runs instead, under the latch again, through the same code path.

:class:`Action` (from :func:`nested_action`) packages this, plus a *savepoint*: if the body
raises (no space, a full log, a bug) after it logged something, the partial action is rolled
back at once, still under the latch, so the structure is as it was and the transaction can go
on or abort safely. Page frees registered during a rolled-back action are forgotten too — the
pages are back in use.

**Freeing pages** (:func:`free_page`). A page a structure unlinks inside a nested top action is
garbage from the moment the action closes, whatever becomes of the transaction: the action is
never undone physically, and logical undos never refer to that page. The allocator frees it when
the transaction commits (``engine.free_page``: space freed by an uncommitted transaction is never
reused). If the transaction aborts instead, those frees would be lost — so the page is also
remembered, and once the abort has finished a small follow-up transaction frees them all. Only a
crash between the two leaves such pages allocated but unreferenced (``check_engine(leaks=True)``
lists them).

**Logical undo payloads** start with ``(header_pid, start_lsn)``. The header pid identifies the
structure (stable across root splits). ``start_lsn`` is the undo-next of the logical record: the
inverse closes *itself* with a compensation record pointing there (:func:`run_inverse`) while it
still holds the latch. The engine's undo (``traxfs.fs.engine.undo``) appends the same
compensation right after the inverse returns, but by then the latch is released and another transaction may have shifted
slots on the same pages; a crash in that window would undo the inverse's records physically.
Closing inside the latch leaves no window (the second, identical compensation is harmless).
"""

from __future__ import annotations

import struct
import threading
import weakref
from collections.abc import Iterable

from ...ext.pagepin import Latch
from ...ext.slotpage import apply_runs, cut_run, paste_run
from ..engine import opcodes, slotted
from ..engine.buffer import PinnedPage
from ..engine.opcodes import Operation
from ..engine.page import HEADER_SIZE, PAGE_SIZE, PageType, set_aux
from ..engine.xact import Transaction, TxState

U16 = struct.Struct("<H")
U64 = struct.Struct("<Q")
HH = struct.Struct("<HH")
DIR_START = slotted.DIR_START
PAGE_CAPACITY = PAGE_SIZE - DIR_START  # bytes of a slotted page for records + their 4-byte slots
UNDO_HEAD = struct.Struct("<QQ")  # header pid, NTA start LSN: the head of every logical undo payload

# ----- structure latches --------------------------------------------------------------------------
_latches: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_latches_lock = threading.Lock()


class StructureLatch:
    """A structure's latch: re-entrant (a savepoint rollback may run a logical undo of the same
    structure while its latch is held)."""

    __slots__ = ("lock",)

    def __init__(self) -> None:
        self.lock = Latch(reentrant=True)  # taken directly only by a C path that never waits (``ext/treeleaf``)

    def __enter__(self) -> StructureLatch:
        self.lock.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.lock.release()


def structure_latch(engine, header_pid: int) -> StructureLatch:
    """The latch of the structure whose header is ``header_pid`` in ``engine`` (shared by every
    object opened on it)."""
    with _latches_lock:
        per_engine = _latches.get(engine)
        if per_engine is None:
            per_engine = _latches[engine] = {}
        latch = per_engine.get(header_pid)
        if latch is None:
            latch = per_engine[header_pid] = StructureLatch()
        return latch


# ----- nested top actions -------------------------------------------------------------------------
# the pages to free if the transaction aborts, kept on the transaction itself (one thread drives
# a transaction, so no lock; every structure operation reads it, so no shared weak map either)
_GARBAGE = "structure_garbage"


def free_page(engine, tx: Transaction, pid: int) -> None:
    """Free a page a structure has just unlinked (see the module docstring)."""
    engine.free_page(tx, pid)
    pages = tx.__dict__.get(_GARBAGE)
    if pages is None:
        pages = tx.__dict__[_GARBAGE] = []
        tx.on_abort.append(lambda t: _free_after_abort(engine, t))
    pages.append(pid)


def _free_after_abort(engine, tx: Transaction) -> None:
    pages = tx.__dict__.pop(_GARBAGE, None)
    if not pages or engine.closed:
        return
    cleanup = engine.begin()
    for pid in pages:
        engine.free_page(cleanup, pid)
    engine.commit(cleanup, durable=False)


class Action:
    """An open nested top action of one structure operation (see the module docstring)."""

    __slots__ = ("engine", "tx", "nta", "start_lsn", "_hooks", "_garbage", "ended")

    def __init__(self, engine, tx: Transaction):
        self.engine, self.tx = engine, tx
        self.nta = engine.nta_begin(tx)
        self.start_lsn = self.nta.start_lsn
        self._hooks = len(tx.pre_commit)
        self._garbage = len(tx.__dict__.get(_GARBAGE, ()))
        self.ended = False

    def forget_frees(self) -> None:
        """The action is being rolled back: the pages it freed are in use again."""
        del self.tx.pre_commit[self._hooks :]
        pages = self.tx.__dict__.get(_GARBAGE)
        if pages is not None:
            del pages[self._garbage :]

    def changed(self) -> bool:
        return self.tx.last_lsn != self.start_lsn

    def end(self, undo_opcode: int, payload: bytes) -> None:
        """Close the action with its logical undo (only if it changed anything)."""
        if self.changed():
            self.engine.nta_end(self.nta, undo_opcode, payload)
        self.ended = True


class nested_action:  # lower case, like contextlib.suppress: ``with nested_action(e, tx, latch) as act``
    """Latch + NTA + savepoint. The body must call ``action.end(...)`` if it changed pages; if it
    raises, or returns without closing a changed action, the action is rolled back to its
    savepoint. A plain class, not a generator: one is entered per structure operation, and a
    generator-based context manager cost about a microsecond of each."""

    __slots__ = ("engine", "tx", "latch", "act")

    def __init__(self, engine, tx: Transaction, latch) -> None:
        self.engine, self.tx, self.latch = engine, tx, latch

    def __enter__(self) -> Action:
        self.tx.require_active()
        self.latch.__enter__()
        try:
            self.act = Action(self.engine, self.tx)
        except BaseException:
            self.latch.__exit__(None, None, None)
            raise
        return self.act

    def __exit__(self, exc_type, exc, tb) -> None:
        act = self.act
        try:
            if exc_type is not None:
                if not act.ended:
                    act.forget_frees()  # first: inverses run by the rollback may free pages anew
                    if act.changed():
                        self.engine.rollback_to(self.tx, act.start_lsn)
            elif act.changed() and not act.ended:
                act.forget_frees()
                self.engine.rollback_to(self.tx, act.start_lsn)
                raise RuntimeError("structure operation changed pages without closing its nested top action")
        finally:
            self.latch.__exit__(None, None, None)


def undo_head(action: Action, header_pid: int) -> bytes:
    return UNDO_HEAD.pack(header_pid, action.start_lsn)


def run_inverse(engine, tx: Transaction, latch, start_lsn: int, fn) -> None:
    """Run a logical undo's inverse operation under the structure latch and close it with a
    compensation record that skips the undone nested top action (see the module docstring).
    The inverse logs no logical undo of its own structure (a structure it uses underneath, like
    the hash's directory array list, may still close its own nested actions: multilevel)."""
    state = tx.state
    tx.state = TxState.ACTIVE  # recovery/abort already did this; savepoint rollbacks too
    try:
        with latch:
            fn()
            engine.compensate(tx, start_lsn)
    finally:
        tx.state = state


# ----- page access helpers ------------------------------------------------------------------------
def pinned(engine, pid: int) -> PinnedPage:
    """``with pinned(engine, pid) as frame``: ``engine.page(pid)``."""
    return engine.page(pid)


def claim_checked_page(engine, pid: int, own: set, where: str, probs: list[str]) -> bytes | None:
    """One step of a structure check walking a page chain: the page must be reached once,
    allocated and slotted. Returns its bytes, or None (problem recorded) when the walk must stop."""
    if pid in own:
        probs.append(f"{where}: reached twice")
        return None
    own.add(pid)
    if not engine.is_allocated(pid):
        probs.append(f"{where}: not allocated")
    with pinned(engine, pid) as f:
        buf = bytes(f.data)
    if buf[3] != PageType.SLOTTED:
        probs.append(f"{where}: type {buf[3]}")
        return None
    return buf


def nslots(buf) -> int:
    return U16.unpack_from(buf, HEADER_SIZE)[0]


def aux_of(buf) -> int:
    return U64.unpack_from(buf, 24)[0]


def lsn_of(buf) -> int:
    return U64.unpack_from(buf, 16)[0]


def write_bytes(engine, tx: Transaction, pid: int, offset: int, new: bytes) -> None:
    """Physically overwrite ``new`` at ``offset`` (logged with its pre-image), if it differs."""
    with engine.page(pid) as f:
        old = bytes(f.data[offset : offset + len(new)])
        if old != new:
            engine.update(tx, pid, opcodes.OP_WRITE, opcodes.write_payload(offset, old, new))


def set_page_aux(engine, tx: Transaction, pid: int, new: int) -> None:
    with engine.page(pid) as f:
        old = aux_of(f.data)
        if old != new:
            engine.update(tx, pid, opcodes.OP_SET_AUX, opcodes.aux_payload(old, new))


def records_fit(records: Iterable[bytes]) -> bool:
    return sum(len(r) + 4 for r in records) <= PAGE_CAPACITY


# ----- structure page operations (opcodes 100-109) ------------------------------------------------
OP_SLOTS_CUT = 100  # delete a run of slots (physiological); undo: paste them back
OP_SLOTS_PASTE = 101  # insert a run of records at an index; undo: cut them
OP_FORMAT = 102  # format a freshly allocated page: type, aux, zero body (+ empty slot directory)
OP_NOOP = 103  # the undo of OP_FORMAT (see below)
_RUN = struct.Struct("<HH")  # index, record count; then count × (u16 length, bytes)
_FMT = struct.Struct("<BQB")  # type, aux, slotted?


def run_payload(index: int, records: list[bytes]) -> bytes:
    parts = [_RUN.pack(index, len(records))]
    for r in records:
        parts.append(U16.pack(len(r)))
        parts.append(r)
    return b"".join(parts)


def _format_redo(page: bytearray, p: bytes) -> None:
    ptype, aux, is_slotted = _FMT.unpack(p)
    page[HEADER_SIZE:] = bytes(PAGE_SIZE - HEADER_SIZE)
    page[3] = ptype
    set_aux(page, aux)
    if is_slotted:
        slotted.format_slotted(page)


opcodes.register(Operation(OP_SLOTS_CUT, "slots_cut", cut_run, lambda p: (OP_SLOTS_PASTE, p)))
opcodes.register(Operation(OP_SLOTS_PASTE, "slots_paste", paste_run, lambda p: (OP_SLOTS_CUT, p)))
# Formatting a page just allocated needs no pre-image (Stasis' logging opt-out: space that no
# one uses): if the transaction aborts, the allocation's own undo frees the page again, and
# whatever bytes it holds are garbage either way. A new page costs one small record instead of
# OP_IMAGE's pre- and post-image (8 KiB). Use it only on pages allocated in the same action.
opcodes.register(Operation(OP_FORMAT, "format", _format_redo, lambda p: (OP_NOOP, b"")))
opcodes.register(Operation(OP_NOOP, "noop", lambda page, p: None, lambda p: (OP_NOOP, b"")))


def new_page(engine, tx: Transaction, ptype: int, aux: int = 0, records: list[bytes] | None = None,
             is_slotted: bool = True) -> int:
    """Allocate and format a page (slotted unless told otherwise), optionally with records."""
    pid = engine.alloc_region(tx, 1)
    engine.update(tx, pid, OP_FORMAT, _FMT.pack(ptype, aux, 1 if is_slotted else 0), fresh=True)
    if records:
        engine.update(tx, pid, OP_SLOTS_PASTE, run_payload(0, records))
    return pid


def format_pages(engine, tx: Transaction, first: int, count: int, ptype: int, aux: int = 0) -> None:
    """Format ``count`` pages just allocated with ``alloc_region`` (not slotted: fixed layouts)."""
    for pid in range(first, first + count):
        engine.update(tx, pid, OP_FORMAT, _FMT.pack(ptype, aux, 0), fresh=True)



# ----- logical undo of key → value maps (B+tree, linear hash) -----------------------------------
_MAP_UNDO_PUT = struct.Struct("<BH")  # had_old, klen


def map_undo_put_payload(head: bytes, key: bytes, old: bytes | None) -> bytes:
    """Undo of a put: put the old value back, or delete the key if there was none."""
    if old is None:
        return head + _MAP_UNDO_PUT.pack(0, len(key)) + key
    return head + _MAP_UNDO_PUT.pack(1, len(key)) + key + old


def map_undo_patch_payload(head: bytes, key: bytes, runs: bytes) -> bytes:
    """Undo of an overwrite by a value of the same length: patch the changed bytes back
    (``runs`` from ``traxfs.ext.slotpage.diff_runs(old, new)``) instead of carrying the old
    value whole."""
    return head + U16.pack(len(key)) + key + runs


def map_undo_delete_payload(head: bytes, key: bytes, old: bytes) -> bytes:
    """Undo of a delete: put the deleted value back."""
    return head + U16.pack(len(key)) + key + old


def _keyed_undo(payload: bytes) -> tuple[int, int, bytes, bytes]:
    """(header pid, start LSN, key, the rest) of an undo payload ``head | klen u16 | key | rest``."""
    header, start = UNDO_HEAD.unpack_from(payload)
    (kl,) = U16.unpack_from(payload, UNDO_HEAD.size)
    pos = UNDO_HEAD.size + 2
    return header, start, payload[pos : pos + kl], payload[pos + kl :]


def register_map_undos(cls, put_opcode: int, delete_opcode: int, patch_opcode: int, name: str) -> None:
    """Register the logical undos of a map class whose objects open as ``cls(engine, header)``
    and change through ``_put(tx, key, value)`` / ``_delete(tx, key)`` without logging undos."""

    def undo_put(engine, tx: Transaction, payload: bytes) -> None:
        header, start = UNDO_HEAD.unpack_from(payload)
        had_old, kl = _MAP_UNDO_PUT.unpack_from(payload, UNDO_HEAD.size)
        pos = UNDO_HEAD.size + _MAP_UNDO_PUT.size
        key, old = payload[pos : pos + kl], payload[pos + kl :]
        m = cls(engine, header)
        if had_old:
            run_inverse(engine, tx, m.latch, start, lambda: m._put(tx, key, old))
        else:
            run_inverse(engine, tx, m.latch, start, lambda: m._delete(tx, key))

    def undo_delete(engine, tx: Transaction, payload: bytes) -> None:
        header, start, key, value = _keyed_undo(payload)
        m = cls(engine, header)
        run_inverse(engine, tx, m.latch, start, lambda: m._put(tx, key, value))

    def undo_patch(engine, tx: Transaction, payload: bytes) -> None:
        header, start, key, runs = _keyed_undo(payload)
        m = cls(engine, header)

        def patch_back() -> None:
            value = m.get(key)
            if value is None:
                raise ValueError(f"{name} {header}: undo of an overwrite finds no key {key!r}")
            old = bytearray(value)
            apply_runs(old, runs, False)
            m._put(tx, key, bytes(old))

        run_inverse(engine, tx, m.latch, start, patch_back)

    opcodes.register(Operation(put_opcode, f"{name}_undo_put", logical_undo=undo_put))
    opcodes.register(Operation(patch_opcode, f"{name}_undo_patch", logical_undo=undo_patch))
    opcodes.register(Operation(delete_opcode, f"{name}_undo_delete", logical_undo=undo_delete))
