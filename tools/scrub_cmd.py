"""`trax scrub` (man page: trax-scrub(8)): read and verify every allocated page of an unmounted
filesystem — every copy of it on a mirror — and rewrite damaged copies from good ones
(``traxfs.fs.scrub``).

Exit codes as fsck's: 0 clean, 1 damage found and all of it repaired, 4 damage left (no good
copy, or found with ``--check``), 8 operational error.
"""

from __future__ import annotations

import argparse
import sys

from ..fs.engine.page import PageCorrupt
from ..fs.errors import FsDamaged
from ..fs.scrub import EXIT_DAMAGED, EXIT_OPERATIONAL, ScrubReport, scrub
from ..volume.errors import VolumeError
from ..volume.locks import WRITE_HINT
from ..volume.overlay import OverlayDevice
from ..volume.registry import Registry
from .fs_commands import FS_ERRORS
from .fs_target import open_target


def cmd_scrub(a: argparse.Namespace, reg: Registry, out) -> int:
    from tqdm import tqdm

    from ..fs.filesystem import FileSystem

    try:
        with open_target(reg, a.target, hint="" if a.check else WRITE_HINT) as (dev, _):
            # a check writes nothing: recovery and the reads run on a memory overlay
            fs = FileSystem.open(OverlayDevice(dev) if a.check else dev, where=a.target)
            try:
                with tqdm(total=0, unit="page", desc="scrub", file=sys.stderr,
                          disable=out.as_json or not sys.stderr.isatty()) as bar:
                    def progress(done: int, total: int) -> None:
                        bar.total = total
                        bar.update(done - bar.n)

                    rep = scrub(fs, repair=not a.check, progress=progress)
            finally:
                fs.close()
    except PageCorrupt as e:
        return out.fail(f"{a.target}: {e}; no good copy of this filesystem page, so the filesystem cannot be "
                        "walked (run `trax fsck` for what it names)", EXIT_DAMAGED, prefix="trax scrub: ")
    except FsDamaged as e:  # refused at open: a page it cannot be opened without is damaged
        return out.fail(str(e), EXIT_DAMAGED, prefix="trax scrub: ")
    except FS_ERRORS + (VolumeError,) as e:
        return out.fail(str(e), EXIT_OPERATIONAL, prefix="trax scrub: ")
    out.emit(rep.as_dict(), lambda: _text(a.target, rep))
    return rep.exit_code


def _text(target: str, rep: ScrubReport) -> str:
    lines = [f"{target}: {rep.engine_pages} engine pages and {rep.data_pages} data pages checked, "
             f"{rep.copies} cop{'y' if rep.copies == 1 else 'ies'} each; {rep.unwritten_pages} preallocated pages "
             f"never written"]
    if rep.unverified_pages:
        lines.append(f"{rep.unverified_pages} data pages have no checksum (written before format 2): not verified")
    if rep.queue_blocks:
        lines.append(f"{rep.queue_blocks} queue blocks checked")
    if rep.pax_pages:
        lines.append(f"{rep.pax_pages} PAX pages of tables checked")
    if rep.rejected_files:
        lines.append(f"{rep.rejected_files} rejected ingest files of tables checked")
    lines += [f"repaired: {t}" for t in rep.repaired]
    lines += [f"DAMAGED: {t}" for t in rep.damaged]
    lines += [f"UNREPAIRABLE: {t}" for t in rep.unrepairable]
    lines.append({0: "clean", 1: "damage repaired"}.get(rep.exit_code, "damage left"))
    return "\n".join(lines)


def add_parser(top, sub) -> None:
    q = sub(top, "scrub", cmd_scrub, "read and verify every page of an unmounted traxfs filesystem, every copy "
            "on a mirror, and repair damaged copies (trax-scrub(8))")
    q.add_argument("target", metavar="VG/LV|DEVICE", help="a logical volume (VG/LV), or a block device or image "
                   "file (a path; write ./NAME for one that could be read as VG/LV)")
    q.add_argument("--check", "-n", action="store_true", help="verify only: write nothing, repair nothing")
