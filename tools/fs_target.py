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

from ..volume.device import BlockDevice, ImageFileDevice
from ..volume.errors import VolumeError
from ..volume.group import USE, VolumeGroup, list_groups
from ..volume.locks import device_lock
from ..volume.model import NAME_RE
from ..volume.registry import Registry
from .cli_types import BadUsage


def is_lv_name(reg: Registry, text: str, *, creating: bool = False) -> bool:
    """Whether ``text`` means a logical volume rather than a path.

    Only ``NAME/NAME`` (two valid names, one slash) can be a volume; ``./x``, ``../x``, ``/x``
    and anything else is a path. ``NAME/NAME`` is a path if it exists (or, ``creating``, if its
    folder does) and a volume if the registry knows a group of that name. When both hold it is
    ambiguous (a usage error that says how to write each); when neither does, it names nothing."""
    vg, sep, lv = text.partition("/")
    if not sep or not NAME_RE.match(vg) or not NAME_RE.match(lv):
        return False
    as_path = os.path.exists(text) or (creating and os.path.isdir(vg))
    as_lv = vg in list_groups(reg)
    if as_path and as_lv:
        raise BadUsage(f"{text!r} is both a path and a logical volume of volume group {vg!r}: write "
                       f"'./{text}' for the path; for the volume, run trax from another folder")
    if not as_path and not as_lv:
        raise VolumeError(f"{text}: no such device or image file" + (" (nor its folder)" if creating else "")
                          + f", and no volume group named {vg!r}")
    return as_lv


@contextmanager
def open_target(reg: Registry, text: str, *, partial: bool = False, create_size: int | None = None,
                hint: str = "") -> Iterator[tuple[object, dict]]:
    """Yield (device, description) for ``text``; ``create_size`` creates a missing image file;
    ``hint`` ends the refusal of a device path in use."""
    if is_lv_name(reg, text, creating=create_size is not None):
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
        raise VolumeError(f"{text}: no such device or image file")
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
