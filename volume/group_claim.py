"""Taking devices into a volume group (``vg create``, ``vg extend``, ``vg replace``): lock and
identify each device, refuse what must not be taken — all before anything is written —, then
label the unlabelled ones and describe each as a physical volume of the group.
"""

from __future__ import annotations

import contextlib
import os

from .errors import DeviceError, ForeignDeviceError, MetadataError, NoSpaceError, UsageError
from .label import DATA_OFFSET
from .locks import WRITE_HINT, device_lock
from .model import Geometry, PhysicalVolume
from .registry import Registry
from .scan import ScannedDevice, label_device, scan_one
from .signature import PV_KIND, identify, refuse_unless_forced, wipe_leftovers


def claim(paths: list[str], taken: set[str], extent_size: int, force: bool,
           locks: contextlib.ExitStack) -> list[ScannedDevice]:
    """Lock ``paths`` exclusively (into ``locks``) and scan and identify them for use in a
    group: each must be unlabelled or an unused physical volume, and big enough for one
    extent — all checked before anything is labelled. Anything else found on a device (a
    traxfs filesystem, a foreign signature) is refused by name unless ``force``; a device of
    another group is refused even then (destroying it is 'trax pv create --force' alone)."""
    out = []
    seen: set[str] = set()
    try:
        for path in paths:
            if os.path.realpath(path) in seen:  # before anything is labelled (new_pvs)
                raise UsageError(f"{path}: given twice")
            seen.add(os.path.realpath(path))
            if not os.path.exists(path):
                raise DeviceError(f"{path}: no such device or image file")
            locks.callback(device_lock(path, exclusive=True, hint=WRITE_HINT).release)
            sd = scan_one(path)
            out.append(sd)
            if sd.device is None:
                raise DeviceError(sd.error or f"{path}: cannot open")
            sd.findings = identify(sd.device, path, path)
            if sd.label is not None and not sd.orphan:
                pv = next((f for f in sd.findings if f.kind == PV_KIND), None)
                what = pv.text if pv is not None else "traxfs physical volume"
                if sd.vg_name:
                    raise ForeignDeviceError(
                        f"{path}: {what}; a device of another group is not taken, even with --force "
                        f"('trax pv create --force {path}' destroys it first, if that is meant)")
                raise MetadataError(f"{path}: labelled but its metadata is unreadable ({'; '.join(sd.problems)}); "
                                    f"'trax pv create --force {path}' labels it anew")
            refuse_unless_forced(path, [f for f in sd.findings if f.kind != PV_KIND], force)
            if sd.label is not None and sd.label.pv_uuid in taken:
                raise UsageError(f"{path}: given twice")
            if sd.label is not None:
                taken.add(sd.label.pv_uuid)
            data_offset = sd.label.data_offset if sd.label is not None else DATA_OFFSET
            if (sd.device.size - data_offset) // extent_size < 1:
                raise NoSpaceError(f"{path}: {sd.device.size} bytes hold no extent of {extent_size} bytes")
    except BaseException:  # refused: close what was opened (the caller never sees it)
        for sd in out:
            sd.close()
        raise
    return out

def new_pvs(registry: Registry, claimed: list[ScannedDevice]) -> list[ScannedDevice]:
    """Label the unlabelled devices (implicit ``pv create``) and rescan all of them; wipe what
    is left of foreign signatures that ``--force`` overrode."""
    out = []
    for sd in claimed:
        erase = any(f.kind != PV_KIND for f in sd.findings)
        if sd.label is None:
            dev, sd.device = sd.device, None
            label_device(registry, sd.path, dev, Geometry(), erase=erase)
            sd = scan_one(sd.path)
        else:
            if erase:
                wipe_leftovers(sd.device, sd.path, sd.path)
                sd.device.flush()
            registry.add(sd.path)
        out.append(sd)
    return out

def pv_entry(sd: ScannedDevice, extent_size: int) -> PhysicalVolume:
    geometry = Geometry(**sd.copy.doc["geometry"])
    if geometry.kind == "flat" and extent_size % min(geometry.unit, extent_size):
        raise UsageError(f"{sd.path}: track unit {geometry.unit} does not divide the extent size {extent_size}")
    return PhysicalVolume(sd.label.pv_uuid, sd.path, sd.label.data_offset,
                          (sd.device.size - sd.label.data_offset) // extent_size, geometry)
