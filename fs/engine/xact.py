"""Transactions as the engine tracks them (the transaction table's rows)."""

from __future__ import annotations

import enum
import threading
from collections.abc import Callable
from dataclasses import dataclass, field


class TxState(enum.Enum):
    ACTIVE = "active"
    COMMITTED = "committed"
    ABORTING = "aborting"
    ENDED = "ended"


class TransactionError(Exception):
    """An operation was asked of a transaction in the wrong state."""


@dataclass(eq=False)
class Transaction:
    xid: int
    first_lsn: int = 0  # its first log record (0: none yet)
    last_lsn: int = 0  # its latest log record: the head of its undo chain
    state: TxState = TxState.ACTIVE
    depends_lsn: int = 0  # ELR: a commit it saw released early must be durable before its own
    pre_commit: list[Callable[[Transaction], None]] = field(default_factory=list)
    on_abort: list[Callable[[Transaction], None]] = field(default_factory=list)
    # called with the commit's Durability handle once the COMMIT record is in the log buffer
    post_commit: list[Callable[[object], None]] = field(default_factory=list)
    # held while a record is appended and first/last LSN and state are updated, so a checkpoint's
    # snapshot of this row always matches the log (uncontended: one thread drives a transaction)
    latch: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def require_active(self) -> None:
        if self.state is not TxState.ACTIVE:
            raise TransactionError(f"transaction {self.xid} is {self.state.value}, not active")


@dataclass(frozen=True)
class NestedTopAction:
    """Handle of an open nested top action: the transaction's last LSN when it began."""

    tx: Transaction
    start_lsn: int
