"""Volume groups: creating, opening, changing and removing them, and their logical volumes.

Every change follows one pattern: check everything first (so a refused request changes
nothing), change the in-memory document, then :meth:`VolumeGroup.commit` writes it with the next
sequence number to both metadata copies of every present device.

Opening a group picks the newest intact copy across its devices and then checks each device the
document lists: a missing device, a device with an older sequence number (stale: it missed a
commit) or a device whose copies are all damaged is refused with an error naming it, unless the
caller asked for ``partial`` (run without missing devices) or ``repair`` (rewrite the copies).
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Callable, Iterator

from traxfs.volume.device import Device
from traxfs.volume.disk.clock import SimClock
from traxfs.volume.errors import (
    DeviceError,
    ForeignDeviceError,
    MetadataError,
    MissingDeviceError,
    NoSpaceError,
    StaleDeviceError,
    UsageError,
)
from traxfs.volume.label import DATA_OFFSET, Label, write_label
from traxfs.volume.layout.planner import allocate, allocate_tracks, replacement_holds, stripe_plan, zoned_plan
from traxfs.volume.logical import OpenLogicalVolume
from traxfs.volume.metadata_area import clear_slots, write_slots
from traxfs.volume.model import (
    Geometry,
    Leg,
    LogicalVolume,
    PhysicalVolume,
    VolumeGroupMeta,
    check_name,
)
from traxfs.volume.registry import Registry
from traxfs.volume.scan import ScannedDevice, pv_create, scan, scan_one

DEFAULT_EXTENT = 4 * 1024 * 1024
RESYNC_CHUNK = 4 * 1024 * 1024


def list_groups(registry: Registry) -> dict[str, VolumeGroupMeta]:
    """Every group found on the registered devices, by name, from its newest intact copy."""
    found: dict[str, VolumeGroupMeta] = {}
    scanned = scan(registry)
    try:
        for sd in scanned:
            if sd.vg_name is None:
                continue
            meta = VolumeGroupMeta.from_doc(sd.copy.doc, sd.path)
            if meta.name not in found or found[meta.name].seq < meta.seq:
                found[meta.name] = meta
    finally:
        for sd in scanned:
            sd.close()
    return found


class VolumeGroup:
    """An open volume group holding its devices (and, for changes, its lock)."""

    def __init__(self, registry: Registry, meta: VolumeGroupMeta, scanned: list[ScannedDevice],
                 devices: dict[str, Device | None], stale: list[str], warnings: list[str]):
        self.registry = registry
        self.meta = meta
        self._scanned = scanned
        self.devices = devices  # pv uuid -> device, None when missing
        self.stale = stale  # pv uuids whose copies are older or damaged
        self.warnings = warnings
        self._open_lvs: list[OpenLogicalVolume] = []
        self.sim_clock: SimClock | None = None  # shared by the modelled disks of every open volume

    # ----- opening ------------------------------------------------------------------------------
    @classmethod
    @contextlib.contextmanager
    def open(cls, registry: Registry, name: str, *, partial: bool = False, repair: bool = False,
             lock: bool = True) -> Iterator[VolumeGroup]:
        check_name("volume group", name)
        ctx = registry.lock(f"vg-{name}", f"volume group {name}") if lock else contextlib.nullcontext()
        with ctx:
            vg = cls._load(registry, name, partial=partial, repair=repair)
            try:
                yield vg
            finally:
                vg.close()

    @classmethod
    def _load(cls, registry: Registry, name: str, *, partial: bool, repair: bool) -> VolumeGroup:
        scanned = scan(registry)
        try:
            return cls._assemble(registry, name, scanned, partial=partial, repair=repair)
        except BaseException:
            for sd in scanned:
                sd.close()
            raise

    @classmethod
    def _assemble(cls, registry: Registry, name: str, scanned: list[ScannedDevice], *,
                  partial: bool, repair: bool) -> VolumeGroup:
        members = [sd for sd in scanned if sd.vg_name == name]
        if not members:
            damaged = [sd for sd in scanned if sd.label is not None and sd.copy is None and sd.problems]
            hint = "".join(f"; {'; '.join(sd.problems)}" for sd in damaged)
            raise MetadataError(f"no volume group named {name!r}{hint}")
        uuids = {sd.vg_uuid for sd in members}
        if len(uuids) > 1:
            raise MetadataError(f"two different volume groups are named {name!r}: {', '.join(sorted(uuids))}")
        best = max(members, key=lambda sd: sd.copy.seq)
        meta = VolumeGroupMeta.from_doc(best.copy.doc, best.path)
        by_pv: dict[str, ScannedDevice] = {}
        for sd in scanned:
            if sd.label is None:
                continue
            twin = by_pv.setdefault(sd.label.pv_uuid, sd)
            if twin is not sd and sd.label.pv_uuid in {p.uuid for p in meta.pvs}:
                raise MetadataError(f"{twin.path} and {sd.path} carry the same PV {sd.label.pv_uuid} "
                                    "(a cloned device?); unregister one of them")
        devices: dict[str, Device | None] = {}
        stale: list[str] = []
        warnings: list[str] = []
        missing: list[str] = []
        for pv in meta.pvs:
            sd = by_pv.get(pv.uuid)
            if sd is None:
                devices[pv.uuid] = None
                unreadable = [s.error for s in scanned if s.label is None and s.error
                              and os.path.realpath(s.path) == os.path.realpath(pv.path)]
                missing.append(f"{pv.path} (PV {pv.uuid}{''.join(f': {e}' for e in unreadable)})")
                continue
            devices[pv.uuid] = sd.device
            copy = sd.copy
            if copy is None:
                stale.append(pv.uuid)
                problem = f"{sd.path}: every metadata copy is damaged ({'; '.join(sd.problems)})"
            elif copy.doc.get("uuid") != meta.uuid:
                raise ForeignDeviceError(
                    f"{sd.path}: listed as PV {pv.uuid} of {name!r} but its metadata belongs to "
                    f"group {copy.doc.get('name')!r}"
                )
            elif copy.seq < meta.seq:
                stale.append(pv.uuid)
                problem = f"{sd.path}: stale metadata (sequence {copy.seq}, the group is at {meta.seq})"
            else:
                warnings.extend(sd.problems)
                warnings.extend(sd.label_problems)
                pv.path = sd.path
                continue
            if not repair:
                raise StaleDeviceError(f"{problem}; run 'trax vg repair {name}' to rewrite it")
            warnings.append(problem)
            pv.path = sd.path
        if missing and not partial:
            raise MissingDeviceError(
                f"volume group {name}: missing device(s) {', '.join(missing)}; "
                "use --partial to run without them, or 'trax vg replace'"
            )
        warnings.extend(f"missing device {m}" for m in missing)
        return cls(registry, meta, scanned, devices, stale, warnings)

    def close(self) -> None:
        for lv in self._open_lvs:
            lv.close()
        self._open_lvs.clear()
        for sd in self._scanned:
            sd.close()

    # ----- committing ---------------------------------------------------------------------------
    def _label(self, pv_uuid: str) -> Label:
        for sd in self._scanned:
            if sd.label is not None and sd.label.pv_uuid == pv_uuid:
                return sd.label
        raise MetadataError(f"volume group {self.meta.name}: no label for PV {pv_uuid}")

    def commit(self, tolerate_failed_devices: bool = False) -> None:
        """Write the document, next sequence number, to both copies on every present device.

        With ``tolerate_failed_devices`` (recording a failed mirror leg, whose device may refuse
        the metadata write too), a device that fails is skipped — it is left with an older
        sequence number, so the next open names it as stale — as long as one device took it."""
        self.meta.seq += 1
        self.meta.validate()
        doc = self.meta.to_doc()
        failed: list[str] = []
        written = 0
        for pv in sorted(self.meta.pvs, key=lambda p: p.path):
            dev = self.devices.get(pv.uuid)
            if dev is not None:
                try:
                    write_slots(dev, self._label(pv.uuid), self.meta.seq, doc)
                    written += 1
                except OSError as e:
                    if not tolerate_failed_devices:
                        raise
                    failed.append(pv.uuid)
                    self.warnings.append(f"{pv.path}: metadata write failed ({e}); it is stale now")
        if failed and not written:
            raise DeviceError(f"volume group {self.meta.name}: no device took the metadata: "
                              + "; ".join(self.warnings[-len(failed):]))
        self.stale = failed

    def repair(self) -> list[str]:
        """Rewrite every present device's metadata copies from the newest, and both label copies
        of any device whose label is damaged; return what was repaired."""
        fixed = [self.meta.pv(u).path for u in self.stale] + [w for w in self.warnings if "copy" in w]
        for sd in self._scanned:
            if sd.label is not None and sd.label_problems and sd.label.pv_uuid in self.devices:
                write_label(sd.device, sd.label)
                sd.label_problems = []
        self.commit()
        return fixed

    # ----- the group itself ---------------------------------------------------------------------
    @staticmethod
    def _claim(registry: Registry, paths: list[str], taken: set[str], extent_size: int) -> list[ScannedDevice]:
        """Scan ``paths`` for use in a group: each must be unlabelled or an orphan PV, and big
        enough for one extent — all checked before anything is labelled."""
        out = []
        seen: set[str] = set()
        try:
            for path in paths:
                if os.path.realpath(path) in seen:  # before anything is labelled (_new_pvs)
                    raise UsageError(f"{path}: given twice")
                seen.add(os.path.realpath(path))
                sd = scan_one(path)
                out.append(sd)
                if sd.device is None:
                    raise DeviceError(sd.error or f"{path}: cannot open")
                if sd.label is not None and not sd.orphan:
                    if sd.vg_name:
                        raise ForeignDeviceError(f"{path}: already belongs to volume group {sd.vg_name!r}")
                    raise MetadataError(f"{path}: labelled but its metadata is unreadable ({'; '.join(sd.problems)})")
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

    @staticmethod
    def _new_pvs(registry: Registry, claimed: list[ScannedDevice]) -> list[ScannedDevice]:
        """Label the unlabelled devices (implicit ``pv create``) and rescan all of them."""
        out = []
        for sd in claimed:
            if sd.label is None:
                sd.close()
                pv_create(registry, sd.path)
                sd = scan_one(sd.path)
            else:
                registry.add(sd.path)
            out.append(sd)
        return out

    @staticmethod
    def _pv_entry(sd: ScannedDevice, extent_size: int) -> PhysicalVolume:
        geometry = Geometry(**sd.copy.doc["geometry"])
        if geometry.kind == "flat" and extent_size % min(geometry.unit, extent_size):
            raise UsageError(f"{sd.path}: track unit {geometry.unit} does not divide the extent size {extent_size}")
        return PhysicalVolume(sd.label.pv_uuid, sd.path, sd.label.data_offset,
                              (sd.device.size - sd.label.data_offset) // extent_size, geometry)

    @classmethod
    def create(cls, registry: Registry, name: str, paths: list[str], extent_size: int = DEFAULT_EXTENT) -> None:
        check_name("volume group", name)
        if not paths:
            raise UsageError("a volume group needs at least one device")
        if extent_size < 1024 * 1024 or extent_size & (extent_size - 1):
            raise UsageError(f"extent size {extent_size} must be a power of two of at least 1 MiB")
        if name in list_groups(registry):
            raise UsageError(f"a volume group named {name!r} already exists")
        with registry.lock(f"vg-{name}", f"volume group {name}"):
            claimed = cls._claim(registry, paths, set(), extent_size)
            try:
                claimed = cls._new_pvs(registry, claimed)
                meta = VolumeGroupMeta(name, str(uuid.uuid4()), 0, extent_size,
                                       [cls._pv_entry(sd, extent_size) for sd in claimed])
                vg = cls(registry, meta, claimed, {sd.label.pv_uuid: sd.device for sd in claimed}, [], [])
                vg.commit()
            finally:
                for sd in claimed:
                    sd.close()

    def extend(self, paths: list[str]) -> None:
        """Add devices to the group (``vgextend``)."""
        claimed = self._claim(self.registry, paths, set(self.devices), self.meta.extent_size)
        self._scanned.extend(claimed)
        claimed = self._new_pvs(self.registry, claimed)
        self._scanned.extend(claimed)
        for sd in claimed:
            self.meta.pvs.append(self._pv_entry(sd, self.meta.extent_size))
            self.devices[sd.label.pv_uuid] = sd.device
        self.commit()

    def rename(self, new_name: str) -> None:
        check_name("volume group", new_name)
        if new_name in list_groups(self.registry):
            raise UsageError(f"a volume group named {new_name!r} already exists")
        self._require_complete("rename")
        self.meta.name = new_name
        self.commit()

    def remove(self, force: bool = False) -> None:
        """Dissolve the group: its devices become unused physical volumes again."""
        if self.meta.lvs and not force:
            names = ", ".join(lv.name for lv in self.meta.lvs)
            raise UsageError(f"volume group {self.meta.name} still holds logical volumes ({names}); use --force")
        self._require_complete("remove")
        for pv in self.meta.pvs:
            dev = self.devices[pv.uuid]
            label = self._label(pv.uuid)
            clear_slots(dev, label)
            write_slots(dev, label, 0, {"format": "traxfs-orphan/1", "geometry": pv.geometry.__dict__})

    def _require_complete(self, what: str) -> None:
        missing = [p.path for p in self.meta.pvs if self.devices.get(p.uuid) is None]
        if missing:
            raise MissingDeviceError(f"cannot {what} volume group {self.meta.name}: missing {', '.join(missing)}")

    # ----- logical volumes ----------------------------------------------------------------------
    def _pv_uuids(self, paths: list[str] | None) -> list[str]:
        present = [p for p in self.meta.pvs if self.devices.get(p.uuid) is not None]
        if not paths:
            return [p.uuid for p in present]
        out = []
        for path in paths:
            real = os.path.realpath(path)
            match = [p.uuid for p in present if os.path.realpath(p.path) == real]
            if not match:
                raise UsageError(f"{path} is not a present device of volume group {self.meta.name}")
            out.append(match[0])
        return out

    def _extents(self, size: int, stripes: int) -> int:
        if size <= 0:
            raise UsageError(f"size must be positive (got {size})")
        n = -(-size // self.meta.extent_size)
        return -(-n // stripes) * stripes

    def create_lv(self, name: str, size: int, layout: str = "linear", *, stripes: int | None = None,
                  stripe_unit: int | None = None, mirror: bool = False, pvs: list[str] | None = None,
                  zone: int | None = None, block: int | None = None, depth: int | None = None,
                  linear: bool = False) -> LogicalVolume:
        """Create a volume of at least ``size`` bytes.

        ``quadrangle`` volumes, and ``traxtent`` volumes on devices with tracks, are zoned: they
        live on the tracks of one ``zone`` and take ``block`` (b, sectors per VLBN), ``depth`` (d)
        and ``linear`` (the default d from the paper's form of the one-revolution constraint
        instead of the cyclic one), see
        :func:`~traxfs.volume.layout.planner.zoned_plan`; their size is what the whole usable
        tracks of the allocated extents hold. Refused, with nothing changed, on flat devices
        (quadrangle) or when the options do not fit the layout.
        """
        check_name("logical volume", name)
        if any(lv.name == name for lv in self.meta.lvs):
            raise UsageError(f"volume group {self.meta.name} already has a logical volume {name!r}")
        if size <= 0:
            raise UsageError(f"size must be positive (got {size})")
        cands = self._pv_uuids(pvs)
        if mirror and stripes is None and layout != "linear":
            stripes = max(1, len(cands) // 2)
        zoned = layout == "quadrangle" or (
            layout == "traxtent" and any(self.meta.pv(p).geometry.kind == "zoned" for p in cands))
        quad = None
        if zoned:
            if stripe_unit is not None:
                raise UsageError(f"a zoned {layout} volume's stripe unit is its track row; --stripe-unit does not apply")
            n, quad = zoned_plan(self.meta, layout, cands, stripes, zone=zone, block=block, depth=depth,
                                 linear=linear)
            unit = quad.row_sectors * 512
        else:
            if zone is not None or block is not None or depth is not None or linear:
                raise UsageError("zone, block size and depth apply to quadrangle and zoned traxtent volumes only")
            n, unit = stripe_plan(self.meta, layout, stripes, stripe_unit, cands)
        if mirror and len(cands) < 2 * n:
            raise UsageError(f"a mirror of {n} stripe(s) needs {2 * n} devices; {len(cands)} available")
        if mirror:  # two halves of similar free space: each leg lives on its own devices
            free = self.meta.free_runs()
            ranked = sorted(cands, key=lambda p: -sum(c for _, c in free[p]))
            pools = [ranked[0::2], ranked[1::2]]
        else:
            pools = [cands]
        if quad is not None:
            extents, new, size = allocate_tracks(self.meta, quad, n, pools, size, [[] for _ in pools], 0)
            legs = [Leg(segs) for segs in new]
        else:
            extents = self._extents(size, n)
            legs = [Leg(allocate(self.meta, 0, extents, n, pool)) for pool in pools]
            size = extents * self.meta.extent_size
        lv = LogicalVolume(name, str(uuid.uuid4()), extents, layout, n, unit, legs, size, quad)
        self.meta.lvs.append(lv)
        self.commit()
        return lv

    def extend_lv(self, name: str, size: int) -> LogicalVolume:
        """Grow ``name`` to ``size`` bytes (never shrinks: shrinking would cut data). A zoned
        volume grows by whole quadrangle stripes inside its zone; existing blocks keep their place."""
        lv = self.meta.lv(name)
        if size < lv.size:
            raise UsageError(f"{self.meta.name}/{name}: shrinking from {lv.size} bytes is not supported")
        if lv.quadrangle is None:
            extents = self._extents(size, lv.stripes)
            if extents == lv.extents:
                return lv
        elif size == lv.size:
            return lv
        self._require_lv_complete(lv, "extend")
        leg_pvs = [{a.pv for seg in leg.segments for a in seg.areas} for leg in lv.legs]
        unused = [p for p in self._pv_uuids(None) if not any(p in mine for mine in leg_pvs)]
        pools = [sorted(mine) + unused[k :: len(lv.legs)] for k, mine in enumerate(leg_pvs)]
        if lv.quadrangle is not None:
            add, new, size = allocate_tracks(self.meta, lv.quadrangle, lv.stripes, pools, size,
                                             [leg.segments for leg in lv.legs], lv.extents)
        else:
            add = extents - lv.extents
            new = [allocate(self.meta, lv.extents, add, lv.stripes, pool) for pool in pools]
            size = extents * self.meta.extent_size
        for leg, segs in zip(lv.legs, new, strict=True):
            leg.segments.extend(segs)
        lv.extents += add
        lv.size = size
        self.commit()
        for olv in self._open_lvs:
            if olv.meta is lv:
                olv.remap(self.meta)
        return lv

    def _require_lv_complete(self, lv: LogicalVolume, what: str) -> None:
        gone = sorted(self.meta.pv(p).path for p in lv.pvs() if self.devices.get(p) is None)
        if gone:
            raise MissingDeviceError(f"cannot {what} {self.meta.name}/{lv.name}: missing {', '.join(gone)}")

    def rename_lv(self, name: str, new_name: str) -> None:
        check_name("logical volume", new_name)
        lv = self.meta.lv(name)
        if any(o.name == new_name for o in self.meta.lvs):
            raise UsageError(f"volume group {self.meta.name} already has a logical volume {new_name!r}")
        lv.name = new_name
        self.commit()

    def remove_lv(self, name: str) -> None:
        self.meta.lvs.remove(self.meta.lv(name))
        self.commit()

    def open_lv(self, name: str) -> OpenLogicalVolume:
        """Open ``name`` for I/O. A mirror leg on a missing device is marked stale first (it will
        miss writes), so it is never read until ``resync`` brings it back."""
        lv = self.meta.lv(name)
        complete = [i for i, leg in enumerate(lv.legs)
                    if all(self.devices.get(a.pv) is not None for s in leg.segments for a in s.areas)]
        if not any(lv.legs[i].state == "in_sync" for i in complete):
            gone = sorted(self.meta.pv(p).path for p in lv.pvs() if self.devices.get(p) is None)
            raise MissingDeviceError(
                f"{self.meta.name}/{name}: no complete in-sync copy"
                + (f" (missing {', '.join(gone)})" if gone else " (run 'trax lv resync')")
            )
        changed = False
        for i, leg in enumerate(lv.legs):
            if i not in complete and leg.state != "stale":
                leg.state, changed = "stale", True
        if changed:
            self.commit()
        olv = OpenLogicalVolume(self.meta, lv, self.devices, on_leg_failure=self._leg_failed(lv), clock=self.sim_clock)
        self.sim_clock = self.sim_clock or olv.clock
        self._open_lvs.append(olv)
        return olv

    def _leg_failed(self, lv: LogicalVolume) -> Callable[[int, Exception], None]:
        def mark(i: int, err: Exception) -> None:
            lv.legs[i].state = "stale"
            self.commit(tolerate_failed_devices=True)
        return mark

    def resync_lv(self, name: str, progress: Callable[[int, int], None] | None = None) -> int:
        """Copy an in-sync leg over every stale leg that is present; return bytes copied."""
        lv = self.meta.lv(name)
        if not lv.mirrored:
            raise UsageError(f"{self.meta.name}/{name} is not a mirror")
        olv = self.open_lv(name)
        targets = [i for i, leg in enumerate(lv.legs) if leg.state == "stale" and olv._leg_present(i)]
        if not targets:
            if any(leg.state == "stale" for leg in lv.legs):
                raise MissingDeviceError(f"{self.meta.name}/{name}: the stale copy's device is missing; "
                                         "attach it or 'trax vg replace' it first")
            return 0
        src = olv.readable_legs()[0]
        buf = bytearray(RESYNC_CHUNK)
        for off in range(0, olv.size, RESYNC_CHUNK):
            n = min(RESYNC_CHUNK, olv.size - off)
            view = memoryview(buf)[:n]
            olv._run_io(src, olv.legs[src].runs(off, n), view, write=False)
            for t in targets:
                olv._run_io(t, olv.legs[t].runs(off, n), view, write=True)
            if progress:
                progress(off + n, olv.size)
        olv.flush()
        for t in targets:
            lv.legs[t].state = "in_sync"
        self.commit()
        return olv.size * len(targets)

    def replace_pv(self, old: str, new_path: str) -> list[str]:
        """Put the unused device ``new_path`` in the place of the missing device ``old`` (a path or
        PV uuid). Mirror legs that lived on it become stale; a non-mirrored volume that lived on it
        has lost data, so the replacement is refused until that volume is removed."""
        olds = [p for p in self.meta.pvs if p.uuid == old or os.path.realpath(p.path) == os.path.realpath(old)]
        if not olds:
            raise UsageError(f"{old} is not a device of volume group {self.meta.name}")
        pv = olds[0]
        if self.devices.get(pv.uuid) is not None:
            raise UsageError(f"{pv.path} is present; only a missing device can be replaced")
        lost = [lv.name for lv in self.meta.lvs if pv.uuid in lv.pvs() and not lv.mirrored]
        if lost:
            raise UsageError(f"{pv.path} held non-mirrored volume(s) {', '.join(lost)}; remove them first")
        used_end = max((first + n for first, n in self.meta.used()[pv.uuid]), default=0)
        (sd,) = self._claim(self.registry, [new_path], set(self.devices), self.meta.extent_size)
        self._scanned.append(sd)
        (sd,) = self._new_pvs(self.registry, [sd])
        self._scanned.append(sd)
        entry = self._pv_entry(sd, self.meta.extent_size)
        if entry.pe_count < used_end:
            raise NoSpaceError(f"{new_path}: {entry.pe_count} extents, the missing device had {used_end} in use")
        for lv in self.meta.lvs:
            why = replacement_holds(self.meta, lv, pv.uuid, entry) if lv.quadrangle and pv.uuid in lv.pvs() else None
            if why:
                raise UsageError(f"{new_path} cannot replace {pv.path}: {why}")
        touched = []
        for lv in self.meta.lvs:
            for leg in lv.legs:
                hit = False
                for seg in leg.segments:
                    for a in seg.areas:
                        if a.pv == pv.uuid:
                            a.pv, hit = entry.uuid, True
                if hit:
                    leg.state = "stale"
                    touched.append(lv.name)
        self.meta.pvs[self.meta.pvs.index(pv)] = entry
        del self.devices[pv.uuid]
        self.devices[entry.uuid] = sd.device
        self.commit()
        for olv in self._open_lvs:  # volumes open in this process now map to the new device
            olv.remap(self.meta)
        return sorted(set(touched))
