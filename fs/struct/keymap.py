"""The changing half of a key → value map (B+tree, linear hash): ``put`` and ``delete``.

Both maps change the same way (see ``common``): under the map's latch, one nested top action
does the physical work and closes with the logical undo (put ↔ put the old value back, or delete
the key; delete ↔ put the value back). Only the physical work and the size limits differ, so
each map provides those and inherits the rest from :class:`LoggedMap`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import ClassVar

from ...ext.slotpage import diff_runs
from ..engine.xact import Transaction
from .common import (
    map_undo_delete_payload,
    map_undo_patch_payload,
    map_undo_put_payload,
    nested_action,
    undo_head,
)


class LoggedMap(ABC):
    """A map whose ``put``/``delete`` are nested top actions with logical undos.

    A subclass sets ``e`` (the engine), ``header`` (its header page) and ``latch``, names its
    undo opcodes (``UNDO_PUT``, ``UNDO_DELETE``, ``UNDO_PATCH``, registered with
    ``common.register_map_undos``)
    and provides ``check_sizes(key, value)`` (raises ValueError) and the physical ``_put`` /
    ``_delete``: latch held, no undo logged, old value returned (None: the key was absent) —
    the logical undos call those too."""

    UNDO_PUT: ClassVar[int]
    UNDO_DELETE: ClassVar[int]
    UNDO_PATCH: ClassVar[int]
    e: object
    header: int
    latch: object

    @staticmethod
    @abstractmethod
    def check_sizes(key: bytes, value: bytes) -> None:
        """Raise ValueError if ``key`` or ``key + value`` is over the map's limits."""

    @abstractmethod
    def _put(self, tx: Transaction, key: bytes, value: bytes) -> bytes | None:
        """Insert or overwrite (latch held, no undo logged); the old value or None."""

    @abstractmethod
    def _delete(self, tx: Transaction, key: bytes) -> bytes | None:
        """Remove ``key`` (latch held, no undo logged); its value or None."""

    def put(self, tx: Transaction, key: bytes, value: bytes) -> bytes | None:
        """Insert or overwrite; return the old value (None if the key is new)."""
        key, value = bytes(key), bytes(value)
        self.check_sizes(key, value)
        with nested_action(self.e, tx, self.latch) as act:
            old = self._put(tx, key, value)
            if old is not None and len(old) == len(value):  # undo: patch back the bytes that changed
                act.end(self.UNDO_PATCH, map_undo_patch_payload(undo_head(act, self.header), key, diff_runs(old, value)))
            else:
                act.end(self.UNDO_PUT, map_undo_put_payload(undo_head(act, self.header), key, old))
        return old

    insert = put

    def delete(self, tx: Transaction, key: bytes) -> bytes | None:
        """Remove ``key``; return its value (None if it was absent: nothing changes)."""
        key = bytes(key)
        with nested_action(self.e, tx, self.latch) as act:
            old = self._delete(tx, key)
            if old is not None:
                act.end(self.UNDO_DELETE, map_undo_delete_payload(undo_head(act, self.header), key, old))
        return old
