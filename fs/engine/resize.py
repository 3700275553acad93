"""Growing an engine into a larger device (``trax resize``): more pages, and maps for them.

The allocation maps of a freshly formatted engine are pages 1..k (``map_pages`` in the
superblock). The pages a grow adds need bits too; rather than reserve room for maps at format
time, each further map lives at the first page of the range it covers (map m at page
``m * BITS_PER_MAP``, its own bit 0 set): the ranges beyond the old end are empty, so that page
is free to take, and the layout needs no other record than ``map_pages``.

Crash safety: the engine is opened and closed first (recovery, a checkpoint: nothing is left
in the log to replay over the old layout). The new maps are written into the new space, past
the old page count where nothing refers to them, and flushed; then one superblock write
switches to the new page count. The two superblock copies alternate, so a crash (or a torn
write) before that write completes leaves the old size, after it the new one. The second copy
is written next, so that both name the new size.

Only growing: shrinking would have to move whatever lives in the pages given up.
"""

from __future__ import annotations

from dataclasses import replace

from .engine import BITS_PER_MAP, Engine, check_device_size, mib_text
from .page import PAGE_SIZE, PageType, init_header, seal
from .superblock import Superblock, read_superblock, write_superblock

_MAP_HEADER = 32


class ResizeRefused(ValueError):
    """The size asked for cannot be had (smaller than the engine, larger than the device)."""


def new_page_count(dev, sb: Superblock, size: int | None, name: str) -> int:
    """Pages of an engine grown to ``size`` bytes of ``dev`` (None: all of it); refuses a size
    the device cannot hold or one smaller than the engine is now."""
    target = dev.size if size is None else size
    if target > dev.size:
        raise ResizeRefused(f"{name}: cannot grow to {mib_text(target)}: the device holds only {mib_text(dev.size)} "
                            "(grow it first: truncate -s, or trax lv extend)")
    count = (target - sb.pages_offset) // PAGE_SIZE
    if count < sb.page_count:
        raise ResizeRefused(f"{name}: {mib_text(target)} is smaller than the filesystem ({mib_text(sb.end)}): "
                            "traxfs can grow, not shrink")
    return count


def write_new_maps(dev, sb: Superblock, count: int) -> int:
    """Write the maps that ``count`` pages need beyond those ``sb`` has (into the new space);
    returns the number of contiguous maps to record (``map_pages``)."""
    map_pages = sb.map_pages or -(-sb.page_count // BITS_PER_MAP)
    buf = bytearray(PAGE_SIZE)
    for m in range(-(-sb.page_count // BITS_PER_MAP), -(-count // BITS_PER_MAP)):
        pid = m * BITS_PER_MAP  # the first page of its own range: it owns itself (bit 0)
        init_header(buf, pid, PageType.ALLOC_MAP)
        buf[_MAP_HEADER] |= 1
        seal(buf, pid, sb.page_seed)
        dev.write(sb.pages_offset + pid * PAGE_SIZE, buf)
    dev.flush()
    return map_pages


def grow(dev, size: int | None = None, *, name: str = "engine") -> tuple[Superblock, Superblock]:
    """Grow the (closed) engine on ``dev`` to ``size`` bytes, or to the whole device. Returns
    (before, after) superblocks; equal page counts mean there was nothing to do."""
    sb = read_superblock(dev, name)
    check_device_size(dev, sb, name)
    new_page_count(dev, sb, size, name)  # refuse before recovery writes anything
    Engine.open(dev, name=name).close()  # recovered and checkpointed: the log replays nothing
    before = read_superblock(dev, name)
    count = new_page_count(dev, before, size, name)
    if count == before.page_count:
        return before, before
    map_pages = write_new_maps(dev, before, count)
    after = write_superblock(dev, replace(before, page_count=count, map_pages=map_pages))
    return before, write_superblock(dev, after)  # both copies name the new size
