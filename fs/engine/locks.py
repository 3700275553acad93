"""The lock manager: shared/exclusive locks on arbitrary keys, with deadlock detection.

Stasis leaves locking to applications and its author regretted it; traxfs ships one.
Locks are held by transaction ids. A request that cannot be granted waits; before waiting, the
waits-for graph is searched for a cycle through the requester, and if there is one the
requester is the victim (:class:`Deadlock`; the caller aborts it). Early lock release (Aether's
ELR: a transaction's locks go once its commit record is in the log) is the engine's business: it calls :meth:`release_all` as soon as the commit record is in
the log buffer, before it is durable.
"""

from __future__ import annotations

import threading
from collections.abc import Hashable

S, X = "S", "X"


class Deadlock(Exception):
    """Granting this lock would close a cycle of waiting transactions; abort the requester."""


class LockTimeout(Exception):
    pass


class _Entry:
    __slots__ = ("holders", "commit_lsn")

    def __init__(self) -> None:
        self.holders: dict[int, str] = {}  # xid -> mode
        self.commit_lsn = 0  # end LSN of the last commit that released this lock early (ELR)


class LockManager:
    def __init__(self) -> None:
        self._locks: dict[Hashable, _Entry] = {}
        self._held: dict[int, set[Hashable]] = {}
        self._waits_for: dict[int, Hashable] = {}  # xid -> key it waits on
        self._mutex = threading.Lock()  # entered directly: a Condition's __enter__ is Python code
        self._cv = threading.Condition(self._mutex)
        self._waiting = 0  # threads in _cv.wait: release_all notifies only when there are any
        self.stats = {"acquired": 0, "waits": 0, "deadlocks": 0}

    @staticmethod
    def _compatible(entry: _Entry, xid: int, mode: str) -> bool:
        holders = entry.holders
        if not holders or (len(holders) == 1 and xid in holders):
            return True
        return mode == S and all(m == S for x, m in holders.items() if x != xid)

    def _blockers(self, xid: int) -> set[int]:
        key = self._waits_for.get(xid)
        entry = self._locks.get(key) if key is not None else None
        if entry is None:
            return set()
        return {x for x in entry.holders if x != xid}

    def _cycle(self, start: int) -> bool:
        seen, stack = set(), list(self._blockers(start))
        while stack:
            x = stack.pop()
            if x == start:
                return True
            if x not in seen:
                seen.add(x)
                stack.extend(self._blockers(x))
        return False

    def lock(self, xid: int, key: Hashable, mode: str = X, timeout: float | None = 30.0) -> int:
        """Acquire; return the end LSN of the last commit that released ``key`` early. A
        transaction that read or overwrote such data must not report success before that LSN is
        durable (ELR condition 1; the engine enforces it at commit)."""
        with self._mutex:
            entry = self._locks.get(key)
            if entry is None:  # the common case: nobody holds or recently released it
                entry = self._locks[key] = _Entry()
            held = None
            if entry.holders:  # (empty: free, granted at once -- every uncontended transaction)
                held = entry.holders.get(xid)
                if held == X or (held == S and mode == S):
                    return entry.commit_lsn
                if not self._compatible(entry, xid, mode):
                    self.stats["waits"] += 1
                    while not self._compatible(entry, xid, mode):
                        self._waits_for[xid] = key
                        if self._cycle(xid):
                            del self._waits_for[xid]
                            self.stats["deadlocks"] += 1
                            raise Deadlock(f"transaction {xid} would deadlock waiting for {key!r}")
                        self._waiting += 1
                        try:
                            woken = self._cv.wait(timeout)
                        finally:
                            self._waiting -= 1
                        if not woken:
                            del self._waits_for[xid]
                            raise LockTimeout(f"transaction {xid} timed out waiting for {key!r}")
                        entry = self._locks.get(key)  # the last holder's release may have dropped it
                        if entry is None:
                            entry = self._locks[key] = _Entry()
                    self._waits_for.pop(xid, None)
            entry.holders[xid] = X if mode == X else (held or S)
            keys = self._held.get(xid)
            if keys is None:
                self._held[xid] = {key}
            else:
                keys.add(key)
            self.stats["acquired"] += 1
            return entry.commit_lsn

    def release_all(self, xid: int, commit_lsn: int = 0) -> None:
        """Release every lock of ``xid``. ``commit_lsn``: it committed (maybe not yet durably)."""
        with self._mutex:
            for key in self._held.pop(xid, ()):
                entry = self._locks[key]
                entry.holders.pop(xid, None)
                entry.commit_lsn = max(entry.commit_lsn, commit_lsn)
                if not entry.holders and entry.commit_lsn == 0:
                    del self._locks[key]
            if self._waiting:
                self._cv.notify_all()

    def holders(self, key: Hashable) -> dict[int, str]:
        with self._mutex:
            e = self._locks.get(key)
            return dict(e.holders) if e else {}

    def prune(self, durable_lsn: int) -> None:
        """Forget early-release marks of commits that are now durable (they constrain no one)."""
        with self._mutex:
            for key in [k for k, e in self._locks.items() if not e.holders and e.commit_lsn <= durable_lsn]:
                del self._locks[key]
