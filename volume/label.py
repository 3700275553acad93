"""The physical-volume label: what makes a device a traxfs device.

On-disk format (version 1), little-endian, written twice — at byte 0 and at byte 4096 — so a
torn or damaged copy is detected by its checksum and the other one used::

    magic      8s   b"TRAXPVLB"
    version    u32  LABEL_VERSION
    flags      u32  0
    pv_uuid    16s
    dev_size   u64  bytes the device had when labelled
    mda_offset u64  first metadata slot
    mda_slot   u64  bytes per metadata slot
    mda_count  u32  number of metadata slots (copies)
    data_off   u64  first byte of the data area (physical extents start here)
    crc        u32  crc32c of everything above

The metadata slots follow the labels; the data area starts 1 MiB-aligned after them.
"""

from __future__ import annotations

import struct
import uuid
from dataclasses import dataclass

import crc32c

from .device import Device
from .errors import LabelError

LABEL_MAGIC = b"TRAXPVLB"
LABEL_VERSION = 1
LABEL_OFFSETS = (0, 4096)
_FMT = struct.Struct("<8sII16sQQQIQ")
_CRC = struct.Struct("<I")
MDA_OFFSET = 8192
MDA_SLOT = 512 * 1024
MDA_COUNT = 2
DATA_OFFSET = 2 * 1024 * 1024


@dataclass(frozen=True)
class Label:
    pv_uuid: str
    dev_size: int
    mda_offset: int = MDA_OFFSET
    mda_slot: int = MDA_SLOT
    mda_count: int = MDA_COUNT
    data_offset: int = DATA_OFFSET

    def pack(self) -> bytes:
        body = _FMT.pack(
            LABEL_MAGIC, LABEL_VERSION, 0, uuid.UUID(self.pv_uuid).bytes, self.dev_size,
            self.mda_offset, self.mda_slot, self.mda_count, self.data_offset,
        )
        return body + _CRC.pack(crc32c.crc32c(body))

    @classmethod
    def unpack(cls, raw: bytes, where: str) -> Label:
        """Decode one label copy; ``where`` names it in the error if it is damaged."""
        body, (crc,) = raw[: _FMT.size], _CRC.unpack_from(raw, _FMT.size)
        magic, version, _flags, pv, size, mo, ms, mc, do = _FMT.unpack(body)
        if magic != LABEL_MAGIC:
            if not any(raw[: _FMT.size + 4]):
                raise LabelError(f"{where}: no traxfs label (blank)")
            raise LabelError(f"{where}: no traxfs label (magic {magic!r})")
        if crc32c.crc32c(body) != crc:
            raise LabelError(f"{where}: label checksum mismatch (damaged label)")
        if version != LABEL_VERSION:
            raise LabelError(f"{where}: label format version {version}, this traxfs reads {LABEL_VERSION}")
        return cls(str(uuid.UUID(bytes=pv)), size, mo, ms, mc, do)


def new_label(dev: Device) -> Label:
    if dev.size < DATA_OFFSET + 2 * 1024 * 1024:
        raise LabelError(f"{dev.path}: device of {dev.size} bytes is too small for a traxfs label")
    return Label(str(uuid.uuid4()), dev.size)


def write_label(dev: Device, label: Label) -> None:
    raw = label.pack().ljust(512, b"\0")
    for off in LABEL_OFFSETS:
        dev.write(off, raw)
    dev.flush()


def read_label(dev: Device) -> Label:
    """Return the first intact label copy; raise naming every copy's damage if none is intact."""
    return read_labels(dev)[0]


def read_labels(dev: Device) -> tuple[Label, list[str]]:
    """The first intact label copy and the damage found in the other copies (for repair)."""
    problems = []
    found = None
    for i, off in enumerate(LABEL_OFFSETS):
        try:
            label = Label.unpack(dev.read(off, 512), f"{dev.path} label copy {i}")
            if found is None:
                found = label
            elif label != found:
                problems.append(f"{dev.path} label copy {i}: differs from copy 0")
        except LabelError as e:
            problems.append(str(e))
    if found is not None:
        return found, problems
    if all("blank" in p for p in problems):
        raise LabelError(f"{dev.path}: not a traxfs physical volume (no label)")
    raise LabelError("; ".join(problems))


def erase_label(dev: Device, label: Label) -> None:
    """Wipe the labels and metadata slots (``trax pv remove``)."""
    dev.write(0, bytes(label.mda_offset + label.mda_slot * label.mda_count))
    dev.flush()
