"""Volume groups: creating, opening, changing and removing them; their logical volumes are in
:mod:`traxfs.volume.group_volumes`, the survey of what the devices hold in
:mod:`traxfs.volume.group_survey`, the taking of new devices in :mod:`traxfs.volume.group_claim`.

Every change follows one pattern: check everything first (so a refused request changes
nothing), change the in-memory document, then :meth:`VolumeGroup.commit` writes it with the next
sequence number to both metadata copies of every present device.

Opening a group picks the newest intact copy across its devices and then checks each device the
document lists: a missing device, a device with an older sequence number (stale: it missed a
commit) or a device whose copies are all damaged is refused with an error naming it, unless the
caller asked for ``partial`` (run without missing devices) or ``repair`` (rewrite the copies).

Locks (flock, see :mod:`traxfs.volume.locks`; all but the device locks are files in
``$TRAX_HOME/locks`` named by the group's and volumes' uuids, so a rename cannot dodge them):

* the **metadata lock** of a group, exclusive, is held by whoever reads the document to change
  it, until the change is committed: a command for its whole (short) run; a process that keeps
  a volume open only while it commits (a mirror leg that failed), re-reading the newest
  document first, so it never writes over a change committed meanwhile;
* the **use lock** of a group is shared by every process that has one of its logical volumes
  open (``mount``, ``lv expose``, ``fsck``, ``mkfs`` of ``VG/LV``) and taken exclusively by
  changes to the whole group (``vg extend``, ``rename``, ``remove``, ``repair``, ``replace``):
  those wait for no volume of the group to be open anywhere;
* each **logical volume's lock**, exclusive, is held by the process that has it open and by
  commands that change it (``lv extend``, ``rename``, ``remove``, ``resync``): two volumes of one
  group can be mounted at once, and a new volume can be created beside a mounted one;
* every process with the group open holds a **shared lock on each of its devices**, so no
  whole-device writer (``mkfs``, ``pv create``, … each takes the device's lock exclusively) can
  write one of them meanwhile, whatever its ``--force``.

Locks that are held for long (use, volume, device) are refused at once, naming the holder; the
metadata lock, held only for moments, is waited for (up to ``META_WAIT`` seconds).
"""

from __future__ import annotations

import contextlib
import os
import threading
import uuid
from collections.abc import Iterator

from .device import Device
from .disk.clock import SimClock
from .errors import (
    DeviceError,
    ForeignDeviceError,
    MetadataError,
    MissingDeviceError,
    NoSpaceError,
    StaleDeviceError,
    UsageError,
)
from .group_claim import claim, new_pvs, pv_entry
from .group_survey import devices_by_pv, list_groups, pv_state
from .group_volumes import LogicalVolumes
from .label import Label, write_label
from .layout.planner import replacement_holds
from .locks import HeldLock, device_lock
from .logical import OpenLogicalVolume
from .metadata_area import ORPHAN_FORMAT, clear_slots, newest, read_slots, write_slots
from .model import LogicalVolume, VolumeGroupMeta, check_name
from .registry import Registry
from .scan import ScannedDevice, scan

DEFAULT_EXTENT = 4 * 1024 * 1024
META_WAIT = 3.0  # seconds to wait for another command's metadata change to finish

# What an open holds for its whole life (see the module docstring).
READ = "read"  # nothing: a look at the document (a commit still takes the metadata lock)
CHANGE = "change"  # the metadata lock: a command that changes the group or its volumes
GROUP = "group"  # the use lock exclusively too: a change to the whole group
USE = "use"  # the use lock shared: a process keeping volumes open (locks each volume it opens)
HOLDS = (READ, CHANGE, GROUP, USE)


def _meta_key(vg_uuid: str) -> str:
    return f"vg-{vg_uuid}.meta"


def _use_key(vg_uuid: str) -> str:
    return f"vg-{vg_uuid}.use"


def _lv_key(vg_uuid: str, lv_uuid: str) -> str:
    return f"lv-{vg_uuid}-{lv_uuid}"


def _name_key(name: str) -> str:
    return f"vg-name-{name}"


class VolumeGroup(LogicalVolumes):
    """An open volume group holding its devices and the locks its ``hold`` asks for."""

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
        self.hold = READ
        self._locks = contextlib.ExitStack()  # released at close: use, device and volume locks
        self._meta_lock: HeldLock | None = None  # held from open to close (CHANGE, GROUP)
        self._meta_depth = 0  # > 0 inside _changing()
        self._use_exclusive = False
        self._locked_lvs: set[str] = set()  # uuids of the volumes whose locks this open holds
        self._mutex = threading.RLock()  # one change at a time (a failed leg commits from an I/O thread)

    # ----- opening ------------------------------------------------------------------------------
    @classmethod
    @contextlib.contextmanager
    def open(cls, registry: Registry, name: str, *, partial: bool = False, repair: bool = False,
             hold: str = CHANGE) -> Iterator[VolumeGroup]:
        """Open ``name`` holding what ``hold`` says (READ, CHANGE, GROUP or USE; see the module
        docstring) until the ``with`` block ends."""
        check_name("volume group", name)
        if hold not in HOLDS:
            raise ValueError(f"hold must be one of {HOLDS}, not {hold!r}")
        vg = cls._load(registry, name, partial=partial, repair=repair) if hold == READ else \
            cls._load_held(registry, name, partial=partial, repair=repair, hold=hold)
        try:
            yield vg
        finally:
            vg.close()

    @classmethod
    def _load_held(cls, registry: Registry, name: str, *, partial: bool, repair: bool, hold: str) -> VolumeGroup:
        """Lock (by the group's uuid, found by a first look), then read the group under the
        metadata lock and take a shared lock on each of its present devices."""
        vg_uuid = cls._uuid_of(registry, name)
        what = f"volume group {name}"
        locks = contextlib.ExitStack()
        try:
            if hold in (GROUP, USE):
                locks.callback(registry.take_lock(_use_key(vg_uuid), what, shared=hold == USE).release)
            meta_lock = registry.take_lock(_meta_key(vg_uuid), what, wait=META_WAIT)
            try:
                vg = cls._load(registry, name, partial=partial, repair=repair)
                try:
                    if vg.meta.uuid != vg_uuid:
                        raise MetadataError(f"volume group {name} was renamed or replaced while it was opened; "
                                            "try again")
                    for pv in vg.meta.pvs:
                        dev = vg.devices.get(pv.uuid)
                        if dev is not None:
                            locks.callback(device_lock(dev.path, exclusive=False).release)
                except BaseException:
                    vg.close()
                    raise
            except BaseException:
                meta_lock.release()
                raise
        except BaseException:
            locks.close()
            raise
        vg.hold, vg._locks, vg._use_exclusive = hold, locks, hold == GROUP
        if hold == USE:
            meta_lock.release()  # taken again for each commit
        else:
            vg._meta_lock = meta_lock
        return vg

    @classmethod
    def _uuid_of(cls, registry: Registry, name: str) -> str:
        scanned = scan(registry)
        try:
            uuids = {sd.vg_uuid for sd in scanned if sd.vg_name == name}
            if len(uuids) != 1:  # none, or two groups of one name: the full check says which
                cls._assemble(registry, name, scanned, partial=True, repair=True)
                raise MetadataError(f"no single volume group named {name!r}")
            return uuids.pop()
        finally:
            for sd in scanned:
                sd.close()

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
        by_pv = devices_by_pv(scanned)
        for pv in meta.pvs:
            twins = by_pv.get(pv.uuid, [])
            if len(twins) > 1:
                raise MetadataError(
                    f"{twins[0].path} and {twins[1].path} carry the same PV {pv.uuid} (a cloned device?); "
                    f"remove the copy's line from {registry.devices_file}, or give the copy an identity of "
                    f"its own with 'trax pv create --force {twins[1].path}' (which destroys what it holds)")
        devices: dict[str, Device | None] = {}
        stale: list[str] = []
        warnings: list[str] = []
        missing: list[str] = []
        for pv in meta.pvs:
            sd = by_pv.get(pv.uuid, [None])[0]
            state, problem = pv_state(meta, pv, sd)
            if state == "missing":
                devices[pv.uuid] = None
                unreadable = [s.error for s in scanned if s.label is None and s.error
                              and os.path.realpath(s.path) == os.path.realpath(pv.path)]
                missing.append(problem[:-1] + "".join(f": {e}" for e in unreadable) + ")")
                continue
            devices[pv.uuid] = sd.device
            if state == "foreign":
                raise ForeignDeviceError(problem)
            pv.path = sd.path
            if state == "ok":
                warnings.extend(sd.problems)
                warnings.extend(sd.label_problems)
                continue
            stale.append(pv.uuid)
            if not repair:
                raise StaleDeviceError(f"{problem}; run 'trax vg repair {name}' to rewrite it")
            warnings.append(problem)
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
        self._locks.close()  # after the devices are closed: everything written is flushed
        self._locked_lvs.clear()
        if self._meta_lock is not None:
            self._meta_lock.release()
            self._meta_lock = None

    # ----- locks --------------------------------------------------------------------------------
    @contextlib.contextmanager
    def _changing(self, wait: float = META_WAIT) -> Iterator[None]:
        """One read-modify-commit under the group's metadata lock: taken here (waiting up to
        ``wait`` s) when this open does not hold it throughout, and then the newest document is
        read first (:meth:`_refresh`), so a change committed meanwhile by another process is
        kept, never overwritten."""
        with self._mutex:
            if self._meta_lock is not None or self._meta_depth:
                self._meta_depth += 1
                try:
                    yield
                finally:
                    self._meta_depth -= 1
                return
            lock = self.registry.take_lock(_meta_key(self.meta.uuid), f"volume group {self.meta.name}", wait=wait)
            self._meta_depth += 1
            try:
                self._refresh()
                yield
            finally:
                self._meta_depth -= 1
                lock.release()

    def _refresh(self) -> None:
        """Adopt the newest document on the group's devices if it is newer than ours. The
        volumes this open holds locked keep their in-memory objects (nobody else may change
        them), so volumes open here keep mapping through them; a device that cannot be read is
        skipped (it is failing, and will be named stale)."""
        best = None
        for pv in self.meta.pvs:
            dev = self.devices.get(pv.uuid)
            if dev is None:
                continue
            try:
                copy = newest(read_slots(dev, self._label(pv.uuid)))
            except (OSError, DeviceError):
                continue
            if copy is not None and copy.doc.get("uuid") == self.meta.uuid and (best is None or copy.seq > best.seq):
                best = copy
        if best is None or best.seq <= self.meta.seq:
            return
        fresh = VolumeGroupMeta.from_doc(best.doc, f"volume group {self.meta.name}")
        if {p.uuid for p in fresh.pvs} != {p.uuid for p in self.meta.pvs}:
            raise MetadataError(f"volume group {self.meta.name}: its devices changed while it was open here; "
                                "nothing written (close it and open it again)")
        for p in fresh.pvs:
            p.path = self.meta.pv(p.uuid).path
        mine = {lv.uuid: lv for lv in self.meta.lvs if lv.uuid in self._locked_lvs}
        fresh.lvs = [mine.pop(lv.uuid, lv) for lv in fresh.lvs]
        if mine:
            raise MetadataError(f"volume group {self.meta.name}: logical volume(s) {', '.join(v.name for v in mine.values())} "
                                "open here were removed by another process; nothing written")
        self.meta = fresh

    def _lock_lv(self, lv: LogicalVolume) -> None:
        """Hold ``lv``'s lock until this open closes (it is open for I/O here, or changed)."""
        if lv.uuid not in self._locked_lvs:
            key, what = _lv_key(self.meta.uuid, lv.uuid), f"logical volume {self.meta.name}/{lv.name}"
            self._locks.callback(self.registry.take_lock(key, what).release)
            self._locked_lvs.add(lv.uuid)

    def _whole_group(self) -> None:
        """A change to the whole group (its name, devices, existence) needs no volume of it open
        anywhere: hold the group's use lock exclusively until this open closes."""
        if not self._use_exclusive:
            what = f"volume group {self.meta.name}"
            self._locks.callback(self.registry.take_lock(_use_key(self.meta.uuid), what).release)
            self._use_exclusive = True

    # ----- committing ---------------------------------------------------------------------------
    def _label(self, pv_uuid: str) -> Label:
        for sd in self._scanned:
            if sd.label is not None and sd.label.pv_uuid == pv_uuid:
                return sd.label
        raise MetadataError(f"volume group {self.meta.name}: no label for PV {pv_uuid}")

    def commit(self, tolerate_failed_devices: bool = False) -> None:
        """Write the document, next sequence number, to both copies on every present device.

        Only under the metadata lock (inside :meth:`_changing`, or an open that holds it).
        With ``tolerate_failed_devices`` (recording a failed mirror leg, whose device may refuse
        the metadata write too), a device that fails is skipped — it is left with an older
        sequence number, so the next open names it as stale — as long as one device took it."""
        if self._meta_lock is None and not self._meta_depth:
            raise RuntimeError(f"volume group {self.meta.name}: commit outside the metadata lock")
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
        self._whole_group()
        with self._changing():
            fixed = [self.meta.pv(u).path for u in self.stale] + [w for w in self.warnings if "copy" in w]
            for sd in self._scanned:
                if sd.label is not None and sd.label_problems and sd.label.pv_uuid in self.devices:
                    write_label(sd.device, sd.label)
                    sd.label_problems = []
            self.commit()
        return fixed

    # ----- the group itself ---------------------------------------------------------------------
    @classmethod
    def create(cls, registry: Registry, name: str, paths: list[str], extent_size: int = DEFAULT_EXTENT,
               force: bool = False) -> None:
        """Create ``name`` on ``paths`` (unused physical volumes, or devices it labels; see
        :func:`~traxfs.volume.group_claim.claim` for what ``force`` overrides)."""
        check_name("volume group", name)
        if not paths:
            raise UsageError("a volume group needs at least one device")
        if extent_size < 1024 * 1024 or extent_size & (extent_size - 1):
            raise UsageError(f"extent size {extent_size} must be a power of two of at least 1 MiB")
        with registry.lock(_name_key(name), f"volume group name {name}", wait=META_WAIT), \
                contextlib.ExitStack() as locks:
            if name in list_groups(registry):
                raise UsageError(f"a volume group named {name!r} already exists")
            claimed = claim(paths, set(), extent_size, force, locks)
            try:
                claimed = new_pvs(registry, claimed)
                meta = VolumeGroupMeta(name, str(uuid.uuid4()), 0, extent_size,
                                       [pv_entry(sd, extent_size) for sd in claimed])
                vg = cls(registry, meta, claimed, {sd.label.pv_uuid: sd.device for sd in claimed}, [], [])
                with vg._changing():
                    vg.commit()
            finally:
                for sd in claimed:
                    sd.close()

    def _not_members(self, paths: list[str]) -> None:
        mine = {os.path.realpath(p.path) for p in self.meta.pvs}
        for path in paths:
            if os.path.realpath(path) in mine:
                raise ForeignDeviceError(f"{path}: already belongs to volume group {self.meta.name!r}")

    def extend(self, paths: list[str], force: bool = False) -> None:
        """Add devices to the group (``vgextend``)."""
        self._not_members(paths)
        self._whole_group()
        with self._changing():
            claimed = claim(paths, set(self.devices), self.meta.extent_size, force, self._locks)
            self._scanned.extend(claimed)
            claimed = new_pvs(self.registry, claimed)
            self._scanned.extend(claimed)
            for sd in claimed:
                self.meta.pvs.append(pv_entry(sd, self.meta.extent_size))
                self.devices[sd.label.pv_uuid] = sd.device
            self.commit()

    def rename(self, new_name: str) -> None:
        check_name("volume group", new_name)
        if new_name == self.meta.name:
            raise UsageError(f"volume group {new_name} is already named {new_name!r}; nothing to do")
        self._whole_group()
        with self._changing(), \
                self.registry.lock(_name_key(new_name), f"volume group name {new_name}", wait=META_WAIT):
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
        self._whole_group()
        with self._changing():
            for pv in self.meta.pvs:
                dev = self.devices[pv.uuid]
                label = self._label(pv.uuid)
                clear_slots(dev, label)
                write_slots(dev, label, 0, {"format": ORPHAN_FORMAT, "geometry": pv.geometry.__dict__})

    def _require_complete(self, what: str) -> None:
        missing = [p.path for p in self.meta.pvs if self.devices.get(p.uuid) is None]
        if missing:
            raise MissingDeviceError(f"cannot {what} volume group {self.meta.name}: missing {', '.join(missing)}")


    def replace_pv(self, old: str, new_path: str, force: bool = False) -> list[str]:
        """Put the unused device ``new_path`` in the place of the missing device ``old`` (a path or
        PV uuid). Mirror legs that lived on it become stale; a non-mirrored volume that lived on it
        has lost data, so the replacement is refused until that volume is removed."""
        with self._changing():
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
            self._not_members([new_path])
            self._whole_group()
            (sd,) = claim([new_path], set(self.devices), self.meta.extent_size, force, self._locks)
            self._scanned.append(sd)
            (sd,) = new_pvs(self.registry, [sd])
            self._scanned.append(sd)
            entry = pv_entry(sd, self.meta.extent_size)
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
