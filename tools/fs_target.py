"""What `trax mkfs|mount|fsck` work on: a logical volume (``VG/LV``) or a device path (an image
file or a block device), opened exclusively.

A logical volume is opened holding its own lock and its group's use lock (shared), and a shared
lock on each device of the group, for as long as the filesystem is in use: a second mount, an
fsck of the mounted filesystem, an ``lv remove`` of it, a ``vg remove`` of its group or a
``mkfs``/``pv create`` of one of its devices are refused, naming the holder; other volumes of
the group can be mounted and created meanwhile. A device path is locked exclusively on the
device itself (and opened ``O_EXCL`` if it is a block device): see :mod:`traxfs.volume.locks`.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager

from traxfs.volume.device import BlockDevice, ImageFileDevice
from traxfs.volume.errors import UsageError
from traxfs.volume.group import USE, VolumeGroup
from traxfs.volume.locks import device_lock
from traxfs.volume.registry import Registry


def is_lv_name(text: str) -> bool:
    vg, sep, lv = text.partition("/")
    return bool(sep and vg and lv and "/" not in lv and not os.path.exists(text))


@contextmanager
def open_target(reg: Registry, text: str, *, partial: bool = False, create_size: int | None = None,
                hint: str = "") -> Iterator[tuple[object, dict]]:
    """Yield (device, description) for ``text``; ``create_size`` creates a missing image file;
    ``hint`` ends the refusal of a device path in use."""
    if is_lv_name(text):
        vg_name, lv_name = text.split("/")
        with VolumeGroup.open(reg, vg_name, partial=partial, hold=USE) as vg:
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
    if create_size is not None and not os.path.exists(text):
        ImageFileDevice(text, create_size, create=True).close()
    lock = device_lock(text, exclusive=True, hint=hint)
    try:
        if stat.S_ISBLK(os.stat(text).st_mode):
            dev, kind = BlockDevice(text), "block device"
        else:
            dev, kind = ImageFileDevice(text), "image file"
        try:
            yield dev, {"target": os.path.abspath(text), "kind": kind, "size": dev.size}
        finally:
            dev.close()
    finally:
        lock.release()
