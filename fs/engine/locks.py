"""The lock manager: shared/exclusive locks on arbitrary keys, with deadlock detection.

Stasis leaves locking to applications and its author regretted it (§1.8); traxfs ships one.
Locks are held by transaction ids. A request that cannot be granted waits; before waiting, the
waits-for graph is searched for a cycle through the requester, and if there is one the
requester is the victim (:class:`Deadlock`; the caller aborts it). Early lock release (Aether
§2) is the engine's business: it calls :meth:`release_all` as soon as the commit record is in
the log buffer, before it is durable.
"""

from __future__ import annotations

import threading
from collections.abc import Hashable
from dataclasses import dataclass, field

S, X = "S", "X"


class Deadlock(Exception):
    """Granting this lock would close a cycle of waiting transactions; abort the requester."""


class LockTimeout(Exception):
    pass


@dataclass
class _Entry:
    holders: dict[int, str] = field(default_factory=dict)  # xid -> mode
    commit_lsn: int = 0  # end LSN of the last commit that released this lock early (ELR)


class LockManager:
    def __init__(self) -> None:
        self._locks: dict[Hashable, _Entry] = {}
        self._held: dict[int, set[Hashable]] = {}
        self._waits_for: dict[int, Hashable] = {}  # xid -> key it waits on
        self._cv = threading.Condition()
        self.stats = {"acquired": 0, "waits": 0, "deadlocks": 0}

    @staticmethod
    def _compatible(entry: _Entry, xid: int, mode: str) -> bool:
        others = {x: m for x, m in entry.holders.items() if x != xid}
        if not others:
            return True
        return mode == S and all(m == S for m in others.values())

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
        with self._cv:
            entry = self._locks.setdefault(key, _Entry())
            if entry.holders.get(xid) == X or (entry.holders.get(xid) == S and mode == S):
                return entry.commit_lsn
            first = True
            while not self._compatible(entry := self._locks.setdefault(key, _Entry()), xid, mode):
                self._waits_for[xid] = key
                if self._cycle(xid):
                    del self._waits_for[xid]
                    self.stats["deadlocks"] += 1
                    raise Deadlock(f"transaction {xid} would deadlock waiting for {key!r}")
                if first:
                    self.stats["waits"] += 1
                    first = False
                if not self._cv.wait(timeout):
                    del self._waits_for[xid]
                    raise LockTimeout(f"transaction {xid} timed out waiting for {key!r}")
            self._waits_for.pop(xid, None)
            entry.holders[xid] = X if mode == X else entry.holders.get(xid, S)
            self._held.setdefault(xid, set()).add(key)
            self.stats["acquired"] += 1
            return entry.commit_lsn

    def release_all(self, xid: int, commit_lsn: int = 0) -> None:
        """Release every lock of ``xid``. ``commit_lsn``: it committed (maybe not yet durably)."""
        with self._cv:
            for key in self._held.pop(xid, ()):
                entry = self._locks[key]
                entry.holders.pop(xid, None)
                entry.commit_lsn = max(entry.commit_lsn, commit_lsn)
                if not entry.holders and entry.commit_lsn == 0:
                    del self._locks[key]
            self._cv.notify_all()

    def holders(self, key: Hashable) -> dict[int, str]:
        with self._cv:
            e = self._locks.get(key)
            return dict(e.holders) if e else {}

    def prune(self, durable_lsn: int) -> None:
        """Forget early-release marks of commits that are now durable (they constrain no one)."""
        with self._cv:
            for key in [k for k, e in self._locks.items() if not e.holders and e.commit_lsn <= durable_lsn]:
                del self._locks[key]
