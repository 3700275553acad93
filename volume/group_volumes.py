"""The logical volumes of an open volume group: create, extend, rename, remove, open for I/O and
resync them. :class:`LogicalVolumes` is a part of :class:`~traxfs.volume.group.VolumeGroup`, kept
apart so each module holds one job; it uses the group's document (``meta``), its devices, and
its locking and committing (``_changing``, ``_lock_lv``, ``commit``; see that module for the
locks).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable

from .device import Device
from .disk.clock import SimClock
from .errors import MissingDeviceError, UsageError
from .layout.planner import allocate, allocate_tracks, stripe_plan, zoned_plan
from .logical import OpenLogicalVolume
from .model import Leg, LogicalVolume, VolumeGroupMeta, check_name
from .signature import identify

RESYNC_CHUNK = 4 * 1024 * 1024
LEG_FAILURE_WAIT = 60.0  # a mounted volume recording a failed mirror leg waits longer: I/O waits on it


class LogicalVolumes:
    """The logical-volume half of :class:`~traxfs.volume.group.VolumeGroup`."""

    meta: VolumeGroupMeta
    devices: dict[str, Device | None]
    sim_clock: SimClock | None
    _open_lvs: list[OpenLogicalVolume]

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
        with self._changing():
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
            self._wipe_new(lv)
            return lv

    def _wipe_new(self, lv: LogicalVolume) -> None:
        """Wipe what a new volume's first bytes still show of an earlier volume on the same
        extents (a filesystem, a label), as lvcreate does: a new volume identifies as empty, so
        a ``mkfs`` of it needs no ``--force``. Nobody else knows the new volume: no lock."""
        olv = OpenLogicalVolume(self.meta, lv, self.devices, clock=self.sim_clock)
        self.sim_clock = self.sim_clock or olv.clock  # its modelled disks now run on this clock
        try:
            for f in identify(olv, f"{self.meta.name}/{lv.name}"):
                for off, n in f.regions:
                    olv.write(off, bytes(n))
            olv.flush()
        finally:
            olv.close()

    def extend_lv(self, name: str, size: int) -> LogicalVolume:
        """Grow ``name`` to ``size`` bytes (never shrinks: shrinking would cut data). A zoned
        volume grows by whole quadrangle stripes inside its zone; existing blocks keep their place."""
        with self._changing():
            lv = self.meta.lv(name)
            self._lock_lv(lv)
            return self._extend_lv(lv, size)

    def _extend_lv(self, lv: LogicalVolume, size: int) -> LogicalVolume:
        name = lv.name
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
        with self._changing():
            lv = self.meta.lv(name)
            if any(o.name == new_name for o in self.meta.lvs):
                raise UsageError(f"volume group {self.meta.name} already has a logical volume {new_name!r}")
            self._lock_lv(lv)
            lv.name = new_name
            self.commit()

    def remove_lv(self, name: str) -> None:
        with self._changing():
            lv = self.meta.lv(name)
            self._lock_lv(lv)
            self.meta.lvs.remove(lv)
            self.commit()

    def open_lv(self, name: str) -> OpenLogicalVolume:
        """Open ``name`` for I/O. A mirror leg on a missing device is marked stale first (it will
        miss writes), so it is never read until ``resync`` brings it back."""
        lv = self.meta.lv(name)
        self._lock_lv(lv)  # refused while open elsewhere (a mount): from here on lv is ours alone
        complete = [i for i, leg in enumerate(lv.legs)
                    if all(self.devices.get(a.pv) is not None for s in leg.segments for a in s.areas)]
        if not any(lv.legs[i].state == "in_sync" for i in complete):
            gone = sorted(self.meta.pv(p).path for p in lv.pvs() if self.devices.get(p) is None)
            raise MissingDeviceError(
                f"{self.meta.name}/{name}: no complete in-sync copy"
                + (f" (missing {', '.join(gone)})" if gone else " (run 'trax lv resync')")
            )
        missed = [i for i, leg in enumerate(lv.legs) if i not in complete and leg.state != "stale"]
        if missed:
            with self._changing():
                for i in missed:
                    lv.legs[i].state = "stale"
                self.commit()
        olv = OpenLogicalVolume(self.meta, lv, self.devices, on_leg_failure=self._leg_failed(lv), clock=self.sim_clock)
        self.sim_clock = self.sim_clock or olv.clock
        self._open_lvs.append(olv)
        return olv

    def _leg_failed(self, lv: LogicalVolume) -> Callable[[int, Exception], None]:
        def mark(i: int, err: Exception) -> None:
            # another process may have committed (a new volume) since this one read the document:
            # _changing reads the newest first; lv itself is locked here, so it is still ours
            with self._changing(wait=LEG_FAILURE_WAIT):
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
        with self._changing():
            for t in targets:
                lv.legs[t].state = "in_sync"
            self.commit()
        return olv.size * len(targets)
