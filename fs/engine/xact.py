"""Transactions as the engine tracks them (the transaction table's rows)."""

from __future__ import annotations

import enum
from collections.abc import Callable

from ...ext.pagepin import Latch


class TxState(enum.Enum):
    ACTIVE = "active"
    COMMITTED = "committed"
    ABORTING = "aborting"
    ENDED = "ended"


class TransactionError(Exception):
    """An operation was asked of a transaction in the wrong state."""


class Transaction:
    """One row of the transaction table. A plain slotted class: one is built per transaction,
    and a dataclass with three list factories costs a tenth of a small durable transaction."""

    __slots__ = ("xid", "first_lsn", "last_lsn", "state", "depends_lsn", "pre_commit", "on_abort", "post_commit",
                 "latch", "__weakref__", "__dict__")  # __dict__: layers above keep their own per-transaction state

    def __init__(self, xid: int, first_lsn: int = 0, last_lsn: int = 0, state: TxState = TxState.ACTIVE):
        self.xid = xid
        self.first_lsn = first_lsn  # its first log record (0: none yet)
        self.last_lsn = last_lsn  # its latest log record: the head of its undo chain
        self.state = state
        self.depends_lsn = 0  # ELR: a commit it saw released early must be durable before its own
        self.pre_commit: list[Callable[[Transaction], None]] = []
        self.on_abort: list[Callable[[Transaction], None]] = []
        # called with the commit's Durability handle once the COMMIT record is in the log buffer
        self.post_commit: list[Callable[[object], None]] = []
        # held while a record is appended and first/last LSN and state are updated, so a
        # checkpoint's snapshot of this row always matches the log (uncontended: one thread
        # drives a transaction)
        self.latch = Latch()  # taken from C by every logged update (``ext/logapply.pyx``)

    def __repr__(self) -> str:
        return f"Transaction(xid={self.xid}, state={self.state.value}, first_lsn={self.first_lsn}, " \
               f"last_lsn={self.last_lsn})"

    def require_active(self) -> None:
        if self.state is not TxState.ACTIVE:
            raise TransactionError(f"transaction {self.xid} is {self.state.value}, not active")


class NestedTopAction:
    """Handle of an open nested top action: the transaction's last LSN when it began. A plain
    slotted class: every structure operation opens one, and a frozen dataclass's ``__init__``
    (``object.__setattr__`` per field) cost about a microsecond of each."""

    __slots__ = ("tx", "start_lsn")

    def __init__(self, tx: Transaction, start_lsn: int) -> None:
        self.tx, self.start_lsn = tx, start_lsn
