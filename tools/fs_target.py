"""What `trax mkfs|mount|fsck` work on: a logical volume (``VG/LV``) or a device path (an image
file or a block device), opened exclusively.

A logical volume is opened under its volume group's lock, which is held for as long as the
filesystem is in use: a second mount, an fsck of a mounted filesystem or an ``lv remove`` of
it are refused, naming the holder. A device path is locked with ``flock`` on the device itself.
"""

from __future__ import annotations

import fcntl
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager

from traxfs.volume.device import BlockDevice, ImageFileDevice
from traxfs.volume.errors import UsageError, VolumeError
from traxfs.volume.group import VolumeGroup
from traxfs.volume.registry import Registry


def is_lv_name(text: str) -> bool:
    vg, sep, lv = text.partition("/")
    return bool(sep and vg and lv and "/" not in lv and not os.path.exists(text))


@contextmanager
def open_target(reg: Registry, text: str, *, partial: bool = False,
                create_size: int | None = None) -> Iterator[tuple[object, dict]]:
    """Yield (device, description) for ``text``; ``create_size`` creates a missing image file."""
    if is_lv_name(text):
        vg_name, lv_name = text.split("/")
        with VolumeGroup.open(reg, vg_name, partial=partial) as vg:
            lv = vg.open_lv(lv_name)
            meta = lv.meta
            first, count = lv.boundaries(0)
            info = {"target": text, "kind": "logical volume", "size": lv.size, "layout": meta.layout,
                    "stripes": meta.stripes, "stripe_unit": meta.stripe_unit, "mirror": meta.mirrored,
                    "track_bytes": count * 512,
                    "devices": sorted({vg.meta.pv(a.pv).path for leg in meta.legs for s in leg.segments
                                       for a in s.areas})}
            try:
                yield lv, info
            finally:
                lv.flush()
        return
    if not os.path.exists(text) and create_size is None:
        raise UsageError(f"{text}: no such device or image file (and not a VG/LV name)")
    if os.path.exists(text) and stat.S_ISBLK(os.stat(text).st_mode):
        dev = BlockDevice(text)
        kind = "block device"
    else:
        dev = ImageFileDevice(text, create_size, create=create_size is not None)
        kind = "image file"
    try:
        try:
            fcntl.flock(dev.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise VolumeError(f"{text}: in use by another process (mounted, or being checked)") from None
        yield dev, {"target": os.path.abspath(text), "kind": kind, "size": dev.size}
    finally:
        dev.close()
