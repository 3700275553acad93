"""`trax scrub` (man page: trax-scrub(8)): read and verify every allocated page of an unmounted
filesystem — every copy of it on a mirror — and rewrite damaged copies from good ones
(``traxfs.fs.scrub``).

Exit codes as fsck's: 0 clean, 1 damage found and all of it repaired, 4 damage left (no good
copy, or found with ``--check``), 8 operational error.
"""

from __future__ import annotations

import argparse
import json
import sys

from traxfs.fs.engine.page import PageCorrupt
from traxfs.fs.scrub import EXIT_DAMAGED, EXIT_OPERATIONAL, ScrubReport, scrub
from traxfs.tools.fs_commands import FS_ERRORS
from traxfs.tools.fs_target import open_target
from traxfs.volume.errors import VolumeError
from traxfs.volume.overlay import OverlayDevice
from traxfs.volume.registry import Registry


def cmd_scrub(a: argparse.Namespace, reg: Registry, out) -> int:
    from tqdm import tqdm

    from traxfs.fs.filesystem import FileSystem

    as_json = getattr(a, "json", False) or out.as_json
    try:
        with open_target(reg, a.target) as (dev, _):
            # a check writes nothing: recovery and the reads run on a memory overlay
            fs = FileSystem.open(OverlayDevice(dev) if a.check else dev, where=a.target)
            try:
                with tqdm(total=0, unit="page", desc="scrub", file=sys.stderr,
                          disable=as_json or not sys.stderr.isatty()) as bar:
                    def progress(done: int, total: int) -> None:
                        bar.total = total
                        bar.update(done - bar.n)

                    rep = scrub(fs, repair=not a.check, progress=progress)
            finally:
                fs.close()
    except PageCorrupt as e:
        print(f"trax scrub: {a.target}: {e}; no good copy of this filesystem page, so the filesystem cannot be "
              "walked (run `trax fsck` for what it names)", file=sys.stderr)
        return EXIT_DAMAGED
    except FS_ERRORS + (VolumeError,) as e:
        print(f"trax scrub: {e}", file=sys.stderr)
        return EXIT_OPERATIONAL
    if as_json:
        print(json.dumps(rep.as_dict(), indent=2, sort_keys=True))
    else:
        print(_text(a.target, rep))
    return rep.exit_code


def _text(target: str, rep: ScrubReport) -> str:
    lines = [f"{target}: {rep.engine_pages} engine pages and {rep.data_pages} data pages checked, "
             f"{rep.copies} cop{'y' if rep.copies == 1 else 'ies'} each; {rep.unwritten_pages} preallocated pages "
             f"never written"]
    if rep.unverified_pages:
        lines.append(f"{rep.unverified_pages} data pages have no checksum (written before format 2): not verified")
    lines += [f"repaired: {t}" for t in rep.repaired]
    lines += [f"DAMAGED: {t}" for t in rep.damaged]
    lines += [f"UNREPAIRABLE: {t}" for t in rep.unrepairable]
    lines.append({0: "clean", 1: "damage repaired"}.get(rep.exit_code, "damage left"))
    return "\n".join(lines)


def add_parser(top, sub) -> None:
    q = sub(top, "scrub", cmd_scrub, "read and verify every page of an unmounted traxfs filesystem, every copy "
            "on a mirror, and repair damaged copies (trax-scrub(8))")
    q.add_argument("target", metavar="VG/LV|DEVICE")
    q.add_argument("--check", "-n", action="store_true", help="verify only: write nothing, repair nothing")
    q.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="print the report as JSON")
