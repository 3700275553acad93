"""What the registered devices say about volume groups, with nothing locked or written: each
group's newest intact metadata copy and how each device it lists stands (``vg list``, and the
first look :class:`~traxfs.volume.group.VolumeGroup` takes when it opens a group).
"""

from __future__ import annotations

from dataclasses import dataclass

from .model import PhysicalVolume, VolumeGroupMeta
from .registry import Registry
from .scan import ScannedDevice, scan


def devices_by_pv(scanned: list[ScannedDevice]) -> dict[str, list[ScannedDevice]]:
    """Labelled devices by PV uuid (more than one: cloned devices)."""
    out: dict[str, list[ScannedDevice]] = {}
    for sd in scanned:
        if sd.label is not None:
            out.setdefault(sd.label.pv_uuid, []).append(sd)
    return out


def pv_state(meta: VolumeGroupMeta, pv: PhysicalVolume, sd: ScannedDevice | None) -> tuple[str, str]:
    """How a device the document lists stands: ``ok``, ``missing``, ``damaged`` (no intact
    copy), ``foreign`` (another group's metadata) or ``stale`` (an older copy), and why."""
    if sd is None:
        return "missing", f"{pv.path} (PV {pv.uuid})"
    copy = sd.copy
    if copy is None:
        return "damaged", f"{sd.path}: every metadata copy is damaged ({'; '.join(sd.problems)})"
    if copy.doc.get("uuid") != meta.uuid:
        return "foreign", (f"{sd.path}: listed as PV {pv.uuid} of {meta.name!r} but its metadata belongs to "
                           f"group {copy.doc.get('name')!r}")
    if copy.seq < meta.seq:
        return "stale", f"{sd.path}: stale metadata (sequence {copy.seq}, the group is at {meta.seq})"
    return "ok", ""


@dataclass
class GroupSummary:
    """A group as ``vg list`` shows it: its newest document and the devices it lacks."""

    meta: VolumeGroupMeta
    missing: list[str]  # listed devices not found
    stale: list[str]  # found with an older or damaged copy: 'trax vg repair' rewrites them

    @property
    def state(self) -> str:
        return "degraded" if self.missing or self.stale else "ok"


def survey(registry: Registry) -> list[GroupSummary]:
    """Every group found on the registered devices, from its newest intact copy, with what it
    lacks; nothing is locked or written."""
    found: dict[str, VolumeGroupMeta] = {}
    scanned = scan(registry)
    try:
        for sd in scanned:
            if sd.vg_name is None:
                continue
            meta = VolumeGroupMeta.from_doc(sd.copy.doc, sd.path)
            if meta.name not in found or found[meta.name].seq < meta.seq:
                found[meta.name] = meta
        by_pv = devices_by_pv(scanned)
        out = []
        for meta in found.values():
            states = [(pv_state(meta, pv, by_pv.get(pv.uuid, [None])[0]), pv) for pv in meta.pvs]
            out.append(GroupSummary(meta, [pv.path for (st, _), pv in states if st == "missing"],
                                    [pv.path for (st, _), pv in states if st in ("stale", "damaged", "foreign")]))
        return out
    finally:
        for sd in scanned:
            sd.close()


def list_groups(registry: Registry) -> dict[str, VolumeGroupMeta]:
    """Every group found on the registered devices, by name, from its newest intact copy."""
    return {g.meta.name: g.meta for g in survey(registry)}
