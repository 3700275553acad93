"""An open logical volume: the interface upper layers use.

I/O is in bytes: the whole device contract (``traxfs.volume.contract``: ``read``, ``readinto``,
``write``, ``writev``, ``flush``, ``write_durable``, the mirror's copies ...); the Atropos
calls are in LBNs of 512 bytes (``boundaries``, ``rectangle``, ``equivalent``, ``parallelism``,
``mode_sense``), as the paper's stub library has them. On flat devices these answer honestly:
``w`` is the stripe unit, ``p`` the number of stripes, and a block's semi-sequential set is
just itself — there is no track skew to exploit.

A request that touches several devices is issued to them in parallel, one vectored I/O per
contiguous run, from a small thread pool (one worker per device). A mirror writes every leg and
reads from an in-sync leg, alternating between legs so two streams use both sides. A reader
whose checksum fails on the bytes it got asks for every leg's copy (``read_copies``) and
rewrites a bad one from a good one (``repair_copy``): the volume cannot tell good bytes from
bad, the layers above can.

Modelled disks (:class:`~traxfs.volume.simdevice.SimulatedDevice`) run in simulated time: all
of a volume's disks share one :class:`~traxfs.volume.disk.clock.SimClock`, each device gets its
share of a request (or batch) as one batch issued at the clock's ``now`` — its first request
chosen on the host by SPTF from the predicted head position (:class:`HeadPredictor`), since an
idle disk serves the first request it receives — and the clock then settles: a request completes
when its slowest disk does, so p disks work in parallel.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from .device import SECTOR, Device
from .disk.clock import SimClock
from .disk.scheduler import HeadPredictor
from .errors import DeviceError, MetadataError, UsageError
from .layout.mapping import LegMap, Run
from .layout.quadrangle import QuadLegMap, geometries
from .model import LogicalVolume, VolumeGroupMeta
from .simdevice import SimulatedDevice

Item = tuple[int, list[memoryview], bool]  # (device byte offset, buffers, is_write)


@dataclass(frozen=True)
class Request:
    """One request of a batch: a read of ``length`` bytes, or a write of ``data``."""

    offset: int
    length: int = 0
    data: bytes | None = None

    @property
    def is_write(self) -> bool:
        return self.data is not None


class OpenLogicalVolume:
    """A logical volume open for I/O: implements the device contract (``DeviceContract``)."""

    def __init__(self, vg: VolumeGroupMeta, lv: LogicalVolume, devices: dict[str, Device | None],
                 on_leg_failure: Callable[[int, Exception], None] | None = None, clock: SimClock | None = None):
        """``clock``: the simulated clock to put the modelled disks on (the group shares one
        between its open volumes); a new one if None and the volume has modelled disks."""
        self.vg_name, self.name, self.meta = vg.name, lv.name, lv
        self.path = f"{vg.name}/{lv.name}"  # names the volume in messages, as a device's path does
        self.devices = devices
        self.clock = clock
        self._predictors: dict[str, HeadPredictor] = {}
        self.remap(vg)
        self._on_leg_failure = on_leg_failure
        self._rr = itertools.count()
        self._state_lock = threading.Lock()
        n_dev = max(1, len(lv.pvs()))
        self._pool = ThreadPoolExecutor(max_workers=min(n_dev, 16), thread_name_prefix=f"lv-{lv.name}")

    def remap(self, vg: VolumeGroupMeta) -> None:
        """Rebuild the mapping from the group's document (after extend or a replaced device)."""
        pe_start = {p.uuid: p.pe_start for p in vg.pvs}
        q = self.meta.quadrangle
        self.legs: list[LegMap | QuadLegMap]
        if q is None:
            self.legs = [LegMap(leg.segments, vg.extent_size, self.meta.stripe_unit, pe_start) for leg in self.meta.legs]
        else:
            geos = geometries(vg, self.meta.pvs())
            self.legs = [QuadLegMap(leg.segments, vg.extent_size, q, pe_start, geos) for leg in self.meta.legs]
            short = [i for i, m in enumerate(self.legs) if m.size < self.meta.size]
            if short:
                raise MetadataError(f"{vg.name}/{self.name}: leg {short[0]} holds {self.legs[short[0]].size} of "
                                    f"the volume's {self.meta.size} bytes (its devices' tracks changed?)")
        self.size = self.meta.size
        # a write may tear at the largest sector of any device under the volume
        self.block_size = max([SECTOR] + [d.block_size for pv in self.meta.pvs()
                                          if (d := self.devices.get(pv)) is not None])
        self._attach_models()

    def _attach_models(self) -> None:
        """Put the volume's modelled disks on one clock, each with the host's head predictor."""
        sims = {pv: d for pv in sorted(self.meta.pvs()) if isinstance(d := self.devices.get(pv), SimulatedDevice)}
        if sims and self.clock is None:
            self.clock = SimClock()
            self.clock.now = max(d.clock.now for d in sims.values())  # never before what a disk has seen
        for pv, dev in sims.items():
            dev.clock = self.clock
            if pv not in self._predictors:
                self._predictors[pv] = HeadPredictor(dev.spec)

    # ----- which legs may serve I/O -------------------------------------------------------------
    def _leg_present(self, i: int) -> bool:
        return all(self.devices.get(a.pv) is not None for s in self.meta.legs[i].segments for a in s.areas)

    def readable_legs(self) -> list[int]:
        return [i for i, leg in enumerate(self.meta.legs) if leg.state == "in_sync" and self._leg_present(i)]

    def writable_legs(self) -> list[int]:
        return [i for i in range(len(self.meta.legs)) if self._leg_present(i)]

    def _fail_leg(self, i: int, err: Exception) -> None:
        with self._state_lock:
            if self.meta.legs[i].state == "stale":
                return
            if self._on_leg_failure is None or len(self.readable_legs()) < 2:
                raise err
            self._on_leg_failure(i, err)  # marks the leg stale in the group's metadata

    # ----- plain I/O ----------------------------------------------------------------------------
    def _check(self, offset: int, length: int) -> None:
        if offset < 0 or length < 0 or offset + length > self.size:
            raise UsageError(
                f"{self.vg_name}/{self.name}: access [{offset}, {offset + length}) outside the volume (size {self.size})"
            )

    def _run_io(self, leg: int, run_list: list[Run], buf: memoryview, write: bool, settle: bool = True) -> None:
        shares: dict[str, list[Item]] = {}
        for run in run_list:
            shares.setdefault(run.pv, []).append((run.dev_offset, [buf[o : o + n] for o, n in run.parts], write))
        self._issue(shares, settle=settle)

    def _issue(self, shares: dict[str, list[Item]], *, elevator: bool = False, settle: bool = True) -> None:
        """Serve every device's share, devices in parallel. A modelled disk gets its share as one
        batch led by the request its head reaches soonest; other devices serve theirs in the
        given order, or in ascending device order with ``elevator``. With ``settle``, the
        simulated clock then moves to the slowest disk's completion."""
        def serve(pv: str) -> None:
            dev, items = self.devices[pv], shares[pv]
            predictor = self._predictors.get(pv)
            if predictor is None:
                for off, views, is_write in sorted(items, key=lambda t: t[0]) if elevator else items:
                    (dev.writev if is_write else dev.readinto)(off, views)
                return
            extents = [(off // SECTOR, -(-(off + sum(map(len, views))) // SECTOR) - off // SECTOR)
                       for off, views, _ in items]
            dev.batch([items[k] for k in predictor.order(extents, self.clock.now)])
            done = max(dev.last, key=lambda b: b.end)
            predictor.observe(done.lbn, done.count, done.end)

        pvs = list(shares)
        futures = [self._pool.submit(serve, pv) for pv in pvs[1:]]  # the first one runs here
        try:
            if pvs:
                serve(pvs[0])
        finally:
            for f in futures:
                f.result()
            if settle and self.clock is not None:
                self.clock.settle()

    def readinto(self, offset: int, views: list[memoryview]) -> None:
        """Fill ``views`` from consecutive bytes starting at ``offset`` (vectored read)."""
        self._check(offset, sum(len(v) for v in views))
        for view in views:
            self._read_one(offset, view)
            offset += len(view)

    def _read_one(self, offset: int, buf: memoryview) -> None:
        legs = self.readable_legs()
        if not legs:
            raise DeviceError(f"{self.vg_name}/{self.name}: no complete, in-sync copy is available")
        start = next(self._rr) % len(legs)
        for attempt in range(len(legs)):
            i = legs[(start + attempt) % len(legs)]
            try:
                self._run_io(i, self.legs[i].runs(offset, len(buf)), buf, write=False)
                return
            except OSError as e:  # a failing device: try the other side of a mirror
                self._fail_leg(i, DeviceError(f"{self.vg_name}/{self.name} leg {i}: read failed: {e}"))
        raise DeviceError(f"{self.vg_name}/{self.name}: every copy failed to read [{offset}, +{len(buf)})")

    def read(self, offset: int, length: int) -> bytes:
        buf = bytearray(length)
        self._check(offset, length)
        self._read_one(offset, memoryview(buf))
        return bytes(buf)

    def read_copies(self, offset: int, length: int) -> list[tuple[int, bytes]]:
        """Every readable leg's copy of ``[offset, offset+length)``: (leg, bytes) per leg, for a
        caller whose checksum failed on the copy :meth:`read` gave it (a mirror serves the good
        copy and rewrites the bad one with :meth:`repair_copy`). A leg whose device fails the
        read is left out (and marked stale, as for any failed read)."""
        self._check(offset, length)
        out = []
        for i in self.readable_legs():
            buf = bytearray(length)
            try:
                self._run_io(i, self.legs[i].runs(offset, length), memoryview(buf), write=False)
            except OSError as e:
                self._fail_leg(i, DeviceError(f"{self.vg_name}/{self.name} leg {i}: read failed: {e}"))
                continue
            out.append((i, bytes(buf)))
        return out

    def repair_copy(self, leg: int, offset: int, data: bytes | bytearray | memoryview) -> None:
        """Write ``data`` over leg ``leg``'s copy only (its bytes failed a checksum the other
        legs' copy passed)."""
        view = memoryview(data).cast("B")
        self._check(offset, len(view))
        if not 0 <= leg < len(self.legs):
            raise UsageError(f"{self.vg_name}/{self.name}: no leg {leg}")
        self._run_io(leg, self.legs[leg].runs(offset, len(view)), view, write=True)

    def write(self, offset: int, data: bytes | bytearray | memoryview) -> None:
        view = memoryview(data).cast("B")
        self._check(offset, len(view))
        legs = self.writable_legs()
        if not legs:
            raise DeviceError(f"{self.vg_name}/{self.name}: no copy is writable (devices missing)")
        try:
            for i in legs:  # legs live on disjoint disks: in simulated time they write in parallel
                try:
                    self._run_io(i, self.legs[i].runs(offset, len(view)), view, write=True, settle=False)
                except OSError as e:
                    self._fail_leg(i, DeviceError(f"{self.vg_name}/{self.name} leg {i}: write failed: {e}"))
        finally:
            if self.clock is not None:
                self.clock.settle()

    def writev(self, offset: int, views: list[memoryview]) -> None:
        """Write ``views`` to consecutive bytes starting at ``offset`` (vectored write)."""
        self._check(offset, sum(len(v) for v in views))
        for view in views:
            self.write(offset, view)
            offset += len(view)

    def write_durable(self, offset: int, data: bytes | bytearray | memoryview) -> None:
        """Write and make durable these bytes only (the engine's log appends): each device gets
        its runs through its own ``write_durable`` (``O_DIRECT|O_DSYNC`` on image files) instead
        of a write followed by a flush of every device of the group. Modelled disks keep the
        scheduled path (``write``, then ``flush``), whose timing the simulated clock accounts."""
        if self._predictors:
            self.write(offset, data)
            self.flush()
            return
        view = memoryview(data).cast("B")
        self._check(offset, len(view))
        legs = self.writable_legs()
        if not legs:
            raise DeviceError(f"{self.vg_name}/{self.name}: no copy is writable (devices missing)")
        for i in legs:
            try:
                for run in self.legs[i].runs(offset, len(view)):
                    parts = [view[o : o + n] for o, n in run.parts]
                    self.devices[run.pv].write_durable(run.dev_offset, parts[0] if len(parts) == 1 else b"".join(parts))
            except OSError as e:
                self._fail_leg(i, DeviceError(f"{self.vg_name}/{self.name} leg {i}: write failed: {e}"))

    def flush(self) -> None:
        for pv in sorted(self.meta.pvs()):
            dev = self.devices.get(pv)
            if dev is not None:
                dev.flush()

    def direct_sync_fd(self) -> None:
        """None: a volume spreads its bytes over devices, so no one descriptor writes them
        (:meth:`write_durable` gives each device's runs to that device's own durable write)."""
        return None

    def refuse_direct(self) -> None:
        """Nothing to stop: :meth:`direct_sync_fd` offers no descriptor."""
        return

    # ----- the Atropos interface (LBN = 512-byte sector) ----------------------------------------
    def _lbn(self, lbn: int) -> int:
        if not 0 <= lbn < self.size // SECTOR:
            raise UsageError(f"{self.vg_name}/{self.name}: LBN {lbn} outside the volume")
        return lbn * SECTOR

    def boundaries(self, lbn: int) -> tuple[int, int]:
        """The efficient extent around ``lbn``: (first LBN, count) of its stripe unit (track)."""
        off = self._lbn(lbn)
        unit = self.meta.stripe_unit
        return off // unit * unit // SECTOR, unit // SECTOR

    def locate(self, offset: int, length: int) -> list[tuple[int, str, int, int, int]]:
        """Each leg's pieces of the range: (leg, its device's path, offset on it, length,
        offset within the range); a device that is missing is named by its PV UUID."""
        self._check(offset, length)
        out = []
        for i, leg in enumerate(self.legs):
            for p in leg.pieces(offset, length):
                dev = self.devices.get(p.pv)
                out.append((i, dev.path if dev is not None else p.pv, p.dev_offset, p.length, p.buf_offset))
        return out

    def rectangle(self, lbn: int) -> tuple[int, int]:
        """The contiguous LBNs of one row across all disks: (first LBN, p·w)."""
        start, length = self.legs[0].row(self._lbn(lbn))
        return start // SECTOR, length // SECTOR

    def parallelism(self) -> int:
        """p: how many devices a row of stripe units spans."""
        return self.meta.stripes

    def equivalent(self, lbn: int) -> tuple[int, ...]:
        """The semi-sequential set of ``lbn`` (a labelled convenience: the paper's stub library has
        no such call, its applications access every (p·w)-th VLBN): on a quadrangle volume the
        same sector of each of the d blocks of its quadrangle column, ascending. Without
        quadrangles no other block is reachable for free after ``lbn`` (no skew to ride on), so
        the set is ``lbn`` alone."""
        self._lbn(lbn)
        q = self.meta.quadrangle
        if q is None or q.depth == 1:
            return (lbn,)
        v, within = divmod(lbn, q.block)
        return tuple(u * q.block + within for u in self.legs[0].equivalent(v))

    def mode_sense(self) -> tuple[int, int]:
        """(p, w): parallelism and stripe unit in LBNs, the paper's proposed mode page."""
        return self.meta.stripes, self.meta.stripe_unit // SECTOR

    def align_up(self, offset: int) -> int:
        """Allocation hint: the first stripe-unit (track) boundary at or after ``offset`` bytes."""
        unit = self.meta.stripe_unit
        return -(-offset // unit) * unit

    def batch(self, requests: Sequence[Request]) -> list[bytes | None]:
        """Issue requests together (the paper's linked commands): every device gets its share at
        once, devices in parallel. A flat device serves its share in ascending device order (an
        elevator); a modelled disk gets it as one batch, pre-scheduled on the host (SPTF from the
        predicted head position) and then ordered by the disk's own SPTF queue. Returns read
        data in request order (None for writes), the same bytes as the requests one by one.
        Requests must not overlap."""
        spans = sorted((r.offset, r.offset + (len(r.data) if r.is_write else r.length)) for r in requests)
        for s, e in spans:
            self._check(s, e - s)
        for (_, e1), (s2, _) in itertools.pairwise(spans):
            if s2 < e1:
                raise UsageError(f"{self.vg_name}/{self.name}: overlapping requests in one batch")
        read_legs, write_legs = self.readable_legs(), self.writable_legs()
        if not read_legs or not write_legs:
            raise DeviceError(f"{self.vg_name}/{self.name}: no complete copy is available")
        read_leg = read_legs[next(self._rr) % len(read_legs)]
        results: list[bytes | None] = [None] * len(requests)
        buffers: list[bytearray | None] = [None] * len(requests)
        per_device: dict[str, list[Item]] = {}
        for k, r in enumerate(requests):
            if r.is_write:
                buf, legs = memoryview(r.data).cast("B"), write_legs
            else:
                buffers[k] = bytearray(r.length)
                buf, legs = memoryview(buffers[k]), [read_leg]
            for i in legs:
                for run in self.legs[i].runs(r.offset, len(buf)):
                    views = [buf[o : o + n] for o, n in run.parts]
                    per_device.setdefault(run.pv, []).append((run.dev_offset, views, r.is_write))
        self._issue(per_device, elevator=True)
        for k, b in enumerate(buffers):
            if b is not None:
                results[k] = bytes(b)
        return results

    def read_batch(self, ranges: list[tuple[int, int]]) -> list[bytes]:
        """The device contract's batch of reads: :meth:`batch` of read requests."""
        return [bytes(b) for b in self.batch([Request(o, n) for o, n in ranges])]

    def close(self) -> None:
        self._pool.shutdown(wait=True)
