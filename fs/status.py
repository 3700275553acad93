"""What the filesystem reports about itself: ``statfs`` (space) and the counters of ``/.trax``."""

from __future__ import annotations

from dataclasses import dataclass

from .engine.page import PAGE_SIZE
from .inodes import Inodes
from .lifetime import Lifetime
from .limits import NAME_MAX
from .process_status import process_status


@dataclass
class StatFs:
    block_size: int
    blocks: int
    blocks_free: int
    files: int
    files_free: int
    name_max: int = NAME_MAX


def statfs(inodes: Inodes) -> StatFs:
    """Pages of the engine, and as many inodes (each takes a share of some page)."""
    e = inodes.e
    with inodes.lock:
        free = e.free_pages()
        total = e.page_count
        return StatFs(PAGE_SIZE, total, free, total, free)


def status(sb, inodes: Inodes, lifetime: Lifetime) -> dict:
    """Counters: the filesystem's (with what its process costs the machine: memory, CPU time,
    threads, descriptors), its data's, and the engine's (log, buffer, locks)."""
    e, data = inodes.e, inodes.data
    with inodes.lock:
        return {"filesystem": {"uuid": sb.uuid, "label": sb.label, "version": sb.version, **inodes.stats,
                               **inodes.counts(), "referenced_inodes": lifetime.referenced(),
                               "process": process_status()},
                "data": {**data.stats, **data.sums.stats, "track_pages": data.track,
                         "quarantined_pages": e.quarantined_pages()},
                **e.stats()}
