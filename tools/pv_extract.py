"""``trax pv extract DEVICE`` (man page: trax-pv(8)): measure a physical volume's geometry by
black-box extraction, record it, and report it.

The geometry is stored where the volume manager reads it: in the group's document (through the
group's normal commit, under its lock) when the device belongs to a group, or in the device's own
orphan metadata when it does not. Extraction reads the whole device's timing for seconds to
minutes, so it refuses a device in use — a group with a volume open anywhere (mounted,
exposed), or a device locked by a filesystem mounted on it directly — and, because a zoned volume's blocks are
placed by its devices' track layout, a new track layout for a device holding zoned volumes.
Any refusal, or an extraction whose timings do not fit one geometry, changes nothing.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

from ..volume.device import Device
from ..volume.disk.extract import Extraction, ExtractionError, extract
from ..volume.disk.geometry import SECTOR
from ..volume.disk.probe import prober_for
from ..volume.errors import MetadataError, UsageError, VolumeError
from ..volume.group import GROUP, VolumeGroup
from ..volume.locks import device_lock
from ..volume.metadata_area import ORPHAN_FORMAT, write_slots
from ..volume.model import Geometry
from ..volume.registry import Registry
from ..volume.scan import scan_one

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
        raise VolumeError(f"{dev.path}: geometry extraction failed, nothing stored: {e}") from None
    if ex.spec is not None:
        return ex, Geometry.zoned(ex.spec, "extracted")
    return ex, Geometry(unit=old.unit if old.kind == "flat" else Geometry.unit, source="extracted")


def _layout(g: Geometry) -> tuple:
    """What places data on the device: its kind and, for tracks, zones, surfaces and defects."""
    if g.disk is None:
        return (g.kind, g.unit)
    return (g.kind, g.disk["surfaces"], [list(z) for z in g.disk["zones"]], sorted(map(list, g.disk["defects"])))


def run(a: argparse.Namespace, reg: Registry, out) -> None:
    from tqdm import tqdm

    bar = tqdm(total=0, unit="sector", unit_scale=True, desc="extract",
               disable=out.as_json or not sys.stderr.isatty())

    def progress(done: int, total: int) -> None:
        bar.total = total
        bar.update(done - bar.n)

    try:
        ex, geometry, group = extract_pv(reg, a.device, progress)
    finally:
        bar.close()
    doc = {"device": a.device, "vg": group, **ex.to_doc(), "stored": {"kind": geometry.kind, "source": geometry.source,
                                                                      "unit": geometry.unit}}
    out.emit(doc, lambda: _text(doc))


def _text(d: dict) -> str:
    where = f"volume group {d['vg']}" if d["vg"] else "its own metadata (unused physical volume)"
    cost = f"{d['probes']} probes in {d['seconds']:.2f} s"
    if d["kind"] == "flat":
        return (f"{d['device']}: no rotational structure: flat (track unit {d['stored']['unit']} bytes), "
                f"stored in {where}\n  {cost}")
    rows = [[str(i), str(z["first_lbn"]), str(z["first_track"]), str(z["sectors_per_track"]), str(z["tracks"]),
             str(z["cylinders"]), str(z["track_skew"]), str(z["cylinder_skew"])] for i, z in enumerate(d["zones"])]
    header = ["ZONE", "FIRST LBN", "FIRST TRACK", "N", "TRACKS", "CYLINDERS", "H", "CYL SKEW"]
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    table = ["  " + "  ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)) for r in [header, *rows]]
    return "\n".join([
        f"{d['device']}: zoned geometry extracted, stored in {where}",
        f"  {d['rpm']} RPM ({d['revolution_ms']:.4f} ms per revolution), {d['surfaces']} surfaces, "
        f"{len(d['zones'])} zones, {d['capacity']} sectors, {d['defects']} slipped defects",
        *table,
        f"  head switch {d['head_switch_ms']:.4f} ms, command overhead {d['overhead_ms']:.4f} ms",
        f"  seek: track-to-track {d['track_to_track_ms']:.3f} ms, average (outer zone) "
        f"{d['average_seek_ms']:.3f} ms, full stroke {d['full_stroke_ms']:.3f} ms",
        f"  {cost}",
    ])
