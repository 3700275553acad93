"""The device contract: what the layers above ask of anything that stores their bytes.

An image file, a block device, a simulated disk, a logical volume, the overlay a mount looks
through before it writes, the power-loss wrapper of the crash tests: each implements every call
below, so a caller never asks *whether* a device can do something, only calls it.
:class:`~traxfs.volume.device.Device` (the base of the single devices) supplies the plain
versions; :class:`~traxfs.volume.logical.OpenLogicalVolume` implements them over its legs.

Copies. Every device holds one or more copies of its bytes: a mirror one per in-sync leg, any
other device exactly one. A reader whose checksum fails on the bytes ``read`` gave it asks for
every copy (``read_copies``) and rewrites a bad one from a good one (``repair_copy``); with a
single copy there is nothing to choose from and the damage is reported. This is part of the one
contract rather than a second protocol because the layers above checksum every page whatever
the device: with a second protocol each of them would test which kind it was handed.

Geometry. ``boundaries(lbn)`` is the Atropos call "the efficient extent around this 512-byte
sector": the stripe unit (track) of a logical volume. A device that knows no geometry answers
the sector alone, and nothing is aligned for it. ``equivalent(lbn)`` is the semi-sequential set
of a sector (Atropos' quadrangle column: the same sector of the ``d`` blocks reached one head
switch apart); a device without quadrangles answers the sector alone — the clear "none" answer,
so a caller asks the one question on every device. ``read_batch`` reads several ranges together
(the paper's linked commands): on a quadrangle volume one semi-sequential batch per disk, on
any other device the reads one after another.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

Bytes = bytes | bytearray | memoryview


@runtime_checkable
class DeviceContract(Protocol):
    """A fixed-size array of bytes. ``path`` names it in every message; ``size`` is in bytes;
    ``block_size`` is the largest unit it may tear a write into (512 or 4096)."""

    path: str
    size: int
    block_size: int

    def read(self, offset: int, length: int) -> bytes:
        """``length`` bytes at ``offset``."""
        ...

    def readinto(self, offset: int, views: list[memoryview]) -> None:
        """Fill ``views`` from consecutive bytes starting at ``offset`` (vectored read)."""
        ...

    def write(self, offset: int, data: Bytes) -> None:
        """Write ``data`` at ``offset``; durable only after :meth:`flush`."""
        ...

    def writev(self, offset: int, views: list[memoryview]) -> None:
        """Write ``views`` to consecutive bytes starting at ``offset`` (vectored write)."""
        ...

    def flush(self) -> None:
        """Make every completed write durable."""
        ...

    def write_durable(self, offset: int, data: Bytes) -> None:
        """Write and make this write durable (a log append); other writes need not be."""
        ...

    def direct_sync_fd(self) -> int | None:
        """A descriptor opened ``O_DIRECT|O_DSYNC`` for a writer composing aligned sectors
        itself (the log flusher), owned by the device until :meth:`close`; None: no such path."""
        ...

    def refuse_direct(self) -> None:
        """A write through :meth:`direct_sync_fd` was refused (``EINVAL``): stop offering it."""
        ...

    def read_copies(self, offset: int, length: int) -> list[tuple[int, bytes]]:
        """Every copy of ``[offset, offset+length)`` as (copy number, bytes); one for a device
        that is not a mirror."""
        ...

    def repair_copy(self, leg: int, offset: int, data: Bytes) -> None:
        """Write ``data`` over copy ``leg`` only (it failed a checksum another copy passed)."""
        ...

    def boundaries(self, lbn: int) -> tuple[int, int]:
        """(first sector, sectors) of the efficient extent around sector ``lbn``."""
        ...

    def equivalent(self, lbn: int) -> tuple[int, ...]:
        """The semi-sequential set of sector ``lbn``, ascending, ``lbn`` among them; ``(lbn,)``
        on a device without quadrangles."""
        ...

    def read_batch(self, ranges: list[tuple[int, int]]) -> list[bytes]:
        """The bytes of each (offset, length) range, read together as one batch; ranges must
        not overlap."""
        ...

    def locate(self, offset: int, length: int) -> list[tuple[int, str, int, int, int]]:
        """Where bytes ``[offset, offset+length)`` are stored: (copy, device path, byte offset on
        that device, length, offset within the range) for each piece of each copy."""
        ...

    def close(self) -> None:
        ...
