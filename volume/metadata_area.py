"""Volume-group metadata copies on one device (the "metadata area").

Each device holds ``mda_count`` (2) slots. A commit writes the same text with the same sequence
number to every slot, one slot at a time with a flush between, like LVM2's multiple metadata
areas. So at any instant at least one slot holds a complete copy: either the new one or the
previous one. A slot is::

    magic   8s   b"TRAXVGMD"
    version u32  MDA_VERSION
    seq     u64  the group's metadata sequence number
    length  u32  bytes of JSON text that follow the header
    crc     u32  crc32c of the JSON text
    hcrc    u32  crc32c of the fields above
    text    JSON (UTF-8)

A blank slot (all zero) means the device is not in a group yet (an orphan physical volume).
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass

import crc32c

from .device import Device
from .errors import MetadataError
from .label import Label

MDA_MAGIC = b"TRAXVGMD"
ORPHAN_FORMAT = "traxfs-orphan/1"  # the document of a physical volume in no group
MDA_VERSION = 1
_HDR = struct.Struct("<8sIQII")
_HCRC = struct.Struct("<I")
HEADER_SIZE = _HDR.size + _HCRC.size


@dataclass(frozen=True)
class Copy:
    """One intact metadata copy read from a slot."""

    slot: int
    seq: int
    doc: dict


@dataclass(frozen=True)
class SlotState:
    """What one slot held: an intact copy, nothing (blank), or damage with its reason."""

    slot: int
    copy: Copy | None
    problem: str | None  # None for intact or blank

    @property
    def blank(self) -> bool:
        return self.copy is None and self.problem is None


def encode(seq: int, doc: dict, slot_size: int, where: str) -> bytes:
    text = json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()
    if HEADER_SIZE + len(text) > slot_size:
        raise MetadataError(f"{where}: metadata of {len(text)} bytes does not fit a {slot_size}-byte slot")
    hdr = _HDR.pack(MDA_MAGIC, MDA_VERSION, seq, len(text), crc32c.crc32c(text))
    return hdr + _HCRC.pack(crc32c.crc32c(hdr)) + text


def decode(raw: bytes, slot: int, where: str) -> SlotState:
    magic, version, seq, length, crc = _HDR.unpack_from(raw)
    (hcrc,) = _HCRC.unpack_from(raw, _HDR.size)
    if magic != MDA_MAGIC:
        if not any(raw[:HEADER_SIZE]):
            return SlotState(slot, None, None)
        return SlotState(slot, None, f"{where} metadata copy {slot}: bad magic (damaged)")
    if crc32c.crc32c(raw[: _HDR.size]) != hcrc:
        return SlotState(slot, None, f"{where} metadata copy {slot}: header checksum mismatch (damaged)")
    if version != MDA_VERSION:
        return SlotState(slot, None, f"{where} metadata copy {slot}: format version {version} unknown")
    text = raw[HEADER_SIZE : HEADER_SIZE + length]
    if len(text) != length or crc32c.crc32c(text) != crc:
        return SlotState(slot, None, f"{where} metadata copy {slot}: text checksum mismatch (torn or damaged)")
    try:
        doc = json.loads(text)
    except ValueError as e:
        return SlotState(slot, None, f"{where} metadata copy {slot}: unreadable JSON ({e})")
    return SlotState(slot, Copy(slot, seq, doc), None)


def read_slots(dev: Device, label: Label) -> list[SlotState]:
    out = []
    for i in range(label.mda_count):
        raw = dev.read(label.mda_offset + i * label.mda_slot, label.mda_slot)
        out.append(decode(raw, i, dev.path))
    return out


def newest(states: list[SlotState]) -> Copy | None:
    copies = [s.copy for s in states if s.copy is not None]
    return max(copies, key=lambda c: c.seq) if copies else None


def write_slots(dev: Device, label: Label, seq: int, doc: dict) -> None:
    """Write ``doc`` as sequence ``seq`` to every slot, flushing after each."""
    raw = encode(seq, doc, label.mda_slot, dev.path)
    padded = raw + bytes(-len(raw) % 4096)
    for i in range(label.mda_count):
        dev.write(label.mda_offset + i * label.mda_slot, padded)
        dev.flush()


def clear_slots(dev: Device, label: Label) -> None:
    """Blank every slot: the device becomes an orphan physical volume again."""
    for i in range(label.mda_count):
        dev.write(label.mda_offset + i * label.mda_slot, bytes(4096))
    dev.flush()
