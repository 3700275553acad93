"""Foreign signatures on image files, for the tests of what writers refuse to overwrite.

ext4 and swap come from the real tools (mkfs.ext4, mkswap). MBR and GPT partition tables and
the LVM2 label are written here byte for byte as fdisk/sgdisk/pvcreate write them — header
checksums included, so libblkid (``wipefs``) recognises them too, which a test checks — because
sfdisk and LVM2 are not installed everywhere the tests run.
"""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
import uuid
import zlib

SECTOR = 512
LINUX_FS = uuid.UUID("0fc63daf-8483-4772-8e79-3d69d8477de4")  # the GPT type of a Linux filesystem


def blank(path: str, size: int) -> None:
    with open(path, "wb") as f:
        f.truncate(size)


def write_at(path: str, offset: int, data: bytes) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        f.write(data)


def ext4(path: str, size: int) -> None:
    blank(path, size)
    subprocess.run(["mkfs.ext4", "-q", "-F", "-L", "old", path], check=True, capture_output=True, timeout=60)


def swap(path: str, size: int) -> None:
    blank(path, size)
    subprocess.run([shutil.which("mkswap") or "/usr/sbin/mkswap", path], check=True, capture_output=True, timeout=60)


def _mbr_entry(kind: int, first: int, count: int) -> bytes:
    return struct.pack("<B3sB3sII", 0, b"\xfe\xff\xff", kind, b"\xfe\xff\xff", first, count)


def mbr(path: str, size: int) -> None:
    """A DOS partition table with one Linux partition from 1 MiB to the end."""
    blank(path, size)
    sectors = size // SECTOR
    write_at(path, 446, _mbr_entry(0x83, 2048, sectors - 2048) + bytes(48) + b"\x55\xaa")


def gpt(path: str, size: int) -> None:
    """A GPT disk: protective MBR, primary header and entries, backup entries and header."""
    blank(path, size)
    n = size // SECTOR
    write_at(path, 446, _mbr_entry(0xEE, 1, min(n - 1, 0xFFFFFFFF)) + bytes(48) + b"\x55\xaa")
    entry = struct.pack("<16s16sQQQ72s", LINUX_FS.bytes_le, uuid.uuid4().bytes_le, 2048, n - 34 - 1, 0,
                        "data".encode("utf-16-le"))
    entries = entry + bytes(127 * 128)
    disk = uuid.uuid4().bytes_le

    def header(mine: int, other: int, entries_at: int) -> bytes:
        def pack(crc: int) -> bytes:
            return struct.pack("<8sIIIIQQQQ16sQIII", b"EFI PART", 0x00010000, 92, crc, 0, mine, other, 34, n - 34,
                               disk, entries_at, 128, 128, zlib.crc32(entries))
        return pack(zlib.crc32(pack(0)))

    write_at(path, SECTOR, header(1, n - 1, 2))
    write_at(path, 2 * SECTOR, entries)
    write_at(path, (n - 33) * SECTOR, entries)
    write_at(path, (n - 1) * SECTOR, header(n - 1, 1, n - 33))


def _lvm_crc(data: bytes) -> int:
    """LVM2's label checksum: CRC-32 (reflected, 0xEDB88320) from 0xf597a6cf, no final xor."""
    return ~zlib.crc32(data, ~0xF597A6CF & 0xFFFFFFFF) & 0xFFFFFFFF


def lvm2(path: str, size: int) -> None:
    """An LVM2 physical-volume label in sector 1, as pvcreate writes it."""
    blank(path, size)
    pv_id = uuid.uuid4().hex[:32].encode()
    body = struct.pack("<I8s", 32, b"LVM2 001") + pv_id + struct.pack("<Q", size)
    body += struct.pack("<QQ", 1 << 20, 0) + bytes(16)  # one data area from 1 MiB, then the end marker
    body += struct.pack("<QQ", 4096, (1 << 20) - 4096) + bytes(16)  # one metadata area, then the end marker
    body = body.ljust(SECTOR - 20, b"\0")  # what the checksum covers: from offset_xl to the sector's end
    write_at(path, SECTOR, b"LABELONE" + struct.pack("<QI", 1, _lvm_crc(body)) + body)


def wipefs_types(path: str) -> set[str]:
    """What libblkid finds (``wipefs`` listing); empty if wipefs is missing."""
    tool = shutil.which("wipefs", path=os.environ.get("PATH", "") + ":/usr/sbin:/sbin")
    if tool is None:
        return set()
    import json

    r = subprocess.run([tool, "--json", path], capture_output=True, text=True, check=True, timeout=30)
    return {row["type"] for row in json.loads(r.stdout)["signatures"]}
