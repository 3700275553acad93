"""``trax pv extract``: measure a physical volume's geometry and record it in its metadata.

The geometry is stored where the volume manager reads it: in the group's document (through the
group's normal commit, under its lock) when the device belongs to a group, or in the device's own
orphan metadata when it does not. Extraction reads the whole device's timing for seconds to
minutes, so it refuses a device in use — a group with a volume open anywhere (mounted,
exposed), or a device locked by a filesystem mounted on it directly — and, because a zoned volume's blocks are
placed by its devices' track layout, a new track layout for a device holding zoned volumes.
Any refusal, or an extraction whose timings do not fit one geometry, changes nothing.
"""

from __future__ import annotations

from collections.abc import Callable

from traxfs.volume.device import Device
from traxfs.volume.disk.extract import Extraction, ExtractionError, extract
from traxfs.volume.disk.geometry import SECTOR
from traxfs.volume.disk.probe import prober_for
from traxfs.volume.errors import MetadataError, UsageError, VolumeError
from traxfs.volume.group import GROUP, VolumeGroup
from traxfs.volume.locks import device_lock
from traxfs.volume.metadata_area import write_slots
from traxfs.volume.model import Geometry
from traxfs.volume.registry import Registry
from traxfs.volume.scan import ORPHAN_FORMAT, scan_one

Progress = Callable[[int, int], None]


def extract_pv(registry: Registry, path: str, progress: Progress | None = None) -> tuple[Extraction, Geometry, str | None]:
    """Extract ``path``'s geometry and store it; return (extraction, geometry, its group or None)."""
    sd = scan_one(path)
    try:
        if sd.label is None:
            raise UsageError(f"{path}: not a traxfs physical volume ({sd.error or 'no label'}); "
                             "label it with 'trax pv create' first")
        if sd.copy is None:
            raise MetadataError(f"{path}: labelled but its metadata is unreadable ({'; '.join(sd.problems)})")
        pv_uuid, group = sd.label.pv_uuid, sd.vg_name
        if sd.orphan:
            with device_lock(path, exclusive=True):
                ex, geometry = _measure(sd.device, Geometry(**sd.copy.doc["geometry"]), progress)
                again = scan_one(path)  # nobody took the device into a group meanwhile
                try:
                    if not again.orphan or again.label != sd.label or again.copy != sd.copy:
                        raise VolumeError(f"{path}: its metadata changed during extraction; nothing stored")
                finally:
                    again.close()
                write_slots(sd.device, sd.label, sd.copy.seq, {"format": ORPHAN_FORMAT, "geometry": geometry.__dict__})
            return ex, geometry, None
        if group is None:
            raise MetadataError(f"{path}: its metadata names no volume group")
    finally:
        sd.close()
    with VolumeGroup.open(registry, group, hold=GROUP) as vg:  # no volume open anywhere; its devices locked
        pv = vg.meta.pv(pv_uuid)
        dev = vg.devices.get(pv_uuid)
        if dev is None:
            raise VolumeError(f"{path}: not present in volume group {group}")
        ex, geometry = _measure(dev, pv.geometry, progress)
        users = sorted(lv.name for lv in vg.meta.lvs if lv.quadrangle is not None and pv_uuid in lv.pvs())
        if users and _layout(geometry) != _layout(pv.geometry):
            raise UsageError(f"{path}: the extracted track layout differs from the recorded one, and "
                             f"logical volume(s) {', '.join(users)} of {group} are placed by it; remove "
                             "them first (nothing changed)")
        pv.geometry = geometry
        vg.commit()
    return ex, geometry, group


def _measure(dev: Device, old: Geometry, progress: Progress | None) -> tuple[Extraction, Geometry]:
    try:
        ex = extract(prober_for(dev), dev.size // SECTOR, progress=progress)
    except ExtractionError as e:
        raise ExtractionError(f"{dev.path}: geometry extraction failed, nothing stored: {e}") from None
    if ex.spec is not None:
        return ex, Geometry.zoned(ex.spec, "extracted")
    return ex, Geometry(unit=old.unit if old.kind == "flat" else Geometry.unit, source="extracted")


def _layout(g: Geometry) -> tuple:
    """What places data on the device: its kind and, for tracks, zones, surfaces and defects."""
    if g.disk is None:
        return (g.kind, g.unit)
    return (g.kind, g.disk["surfaces"], [list(z) for z in g.disk["zones"]], sorted(map(list, g.disk["defects"])))

