"""The volume-group metadata document: what a group holds, as plain data.

This is the text stored (as JSON) in every metadata copy on every device of a group. It is
validated when read, so a hand-edited or damaged-but-checksummed document is refused with a
message instead of being trusted. Sizes are in bytes; extents are counted in units of the
group's ``extent_size``.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import asdict, dataclass, field

from .disk.geometry import SECTOR, DiskSpec
from .errors import MetadataError, UsageError

FORMAT = "traxfs-vg/2"
OLD_FORMATS = ("traxfs-vg/1",)  # read and upgraded in memory; the next commit writes FORMAT
LAYOUTS = ("linear", "striped", "traxtent", "quadrangle")
NAME_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.+-]{0,63}$")


def check_name(kind: str, name: str) -> str:
    """Names are what users type on command lines: short, no slashes, no leading dash."""
    if not isinstance(name, str) or not NAME_RE.match(name):
        raise UsageError(
            f"invalid {kind} name {name!r}: use 1-64 characters from A-Z a-z 0-9 _ . + -, "
            "not starting with . + or -"
        )
    return name


@dataclass
class Geometry:
    """What the volume manager knows of a device's tracks.

    ``kind`` is ``flat`` for devices without tracks (SSD, loop, image file): there the "track"
    is the configured unit ``unit`` (bytes). ``zoned`` devices carry a whole disk description in
    ``disk`` (a :class:`~traxfs.volume.disk.geometry.DiskSpec` document: zones with N, skews,
    surfaces, slipped defects, switch and seek times) taken from a named model profile or from
    black-box extraction (``source``); ``unit`` is then the outer zone's track size in bytes.
    """

    kind: str = "flat"
    unit: int = 256 * 1024
    source: str = "flat"  # flat | profile | extracted
    disk: dict | None = None

    def disk_spec(self) -> DiskSpec:
        if self.kind != "zoned" or self.disk is None:
            raise UsageError("the device has no zoned geometry (it is flat)")
        return DiskSpec.from_doc(self.disk)

    def has_zone(self, zone: int, sectors: int, skew: int) -> bool:
        """Whether the device has tracks and a zone ``zone`` of N = ``sectors``, H = ``skew`` —
        only such a device can hold a zoned volume made for that shape."""
        zones = self.disk["zones"] if self.kind == "zoned" and self.disk is not None else []
        return 0 <= zone < len(zones) and tuple(zones[zone][1:3]) == (sectors, skew)

    @classmethod
    def zoned(cls, spec: DiskSpec, source: str) -> Geometry:
        return cls("zoned", spec.zones[0].sectors_per_track * SECTOR, source, spec.to_doc())


@dataclass
class PhysicalVolume:
    uuid: str
    path: str  # where it was last seen; the label's UUID is what identifies it
    pe_start: int  # byte offset of extent 0 on the device
    pe_count: int
    geometry: Geometry = field(default_factory=Geometry)


@dataclass
class Area:
    """A run of physical extents on one device holding one stripe of a segment."""

    pv: str
    pe: int


@dataclass
class Segment:
    """Logical extents [le, le + count) striped over ``len(areas)`` devices.

    Each area holds ``count // len(areas)`` physical extents.
    """

    le: int
    count: int
    areas: list[Area]

    @property
    def stripes(self) -> int:
        return len(self.areas)


@dataclass
class Leg:
    """One complete copy of a logical volume's data. A mirror has two legs."""

    segments: list[Segment]
    state: str = "in_sync"  # or "stale": misses writes, must not be read until resynced


@dataclass(frozen=True)
class Quadrangle:
    """How a zoned volume maps onto tracks (Atropos §3): quadrangles of ``depth`` tracks, each
    track row holding ``width`` blocks (VLBNs) of ``block`` sectors, on tracks of one ``zone``
    whose N and H were ``sectors`` and ``skew`` when the volume was made.

    A zoned ``traxtent`` volume is the same mapping with depth 1 and 1-sector blocks: its stripe
    unit is a whole track of exactly N sectors.
    """

    zone: int
    sectors: int  # N
    skew: int  # H
    depth: int  # d
    block: int  # b, sectors per VLBN
    width: int  # w = N // b

    @property
    def row_sectors(self) -> int:
        """Sectors of a track a row uses: ``w·b`` (the rest, R, is left unused)."""
        return self.width * self.block

    def validate(self) -> None:
        if self.zone < 0 or self.skew < 0 or self.depth < 1 or not 1 <= self.block <= self.sectors:
            raise ValueError(f"quadrangle {self}: zone, N, H, d and b out of range")
        if self.width != self.sectors // self.block:
            raise ValueError(f"quadrangle width {self.width} is not N // b = {self.sectors // self.block}")


@dataclass
class LogicalVolume:
    """A volume's document. ``size`` is the bytes it exposes: ``extents × extent size`` for the
    flat layouts; for zoned ones (``quadrangle`` set) what the whole usable tracks inside the
    allocated extents hold, which is less (partial and defective tracks, R sectors per track)."""

    name: str
    uuid: str
    extents: int
    layout: str  # linear | striped | traxtent | quadrangle
    stripes: int
    stripe_unit: int  # bytes; linear: the devices' flat unit; zoned: one track row (w·b sectors)
    legs: list[Leg]
    size: int
    quadrangle: Quadrangle | None = None

    @property
    def mirrored(self) -> bool:
        return len(self.legs) > 1

    def pvs(self) -> set[str]:
        return {a.pv for leg in self.legs for s in leg.segments for a in s.areas}


@dataclass
class VolumeGroupMeta:
    name: str
    uuid: str
    seq: int
    extent_size: int
    pvs: list[PhysicalVolume]
    lvs: list[LogicalVolume] = field(default_factory=list)

    def pv(self, pv_uuid: str) -> PhysicalVolume:
        for p in self.pvs:
            if p.uuid == pv_uuid:
                return p
        raise MetadataError(f"volume group {self.name}: no physical volume {pv_uuid}")

    def lv(self, name: str) -> LogicalVolume:
        for lv in self.lvs:
            if lv.name == name:
                return lv
        raise UsageError(f"volume group {self.name} has no logical volume {name!r}")

    def used(self) -> dict[str, list[tuple[int, int]]]:
        """Per PV, the sorted list of (first PE, count) runs in use."""
        out: dict[str, list[tuple[int, int]]] = {p.uuid: [] for p in self.pvs}
        for lv in self.lvs:
            for leg in lv.legs:
                for seg in leg.segments:
                    per = seg.count // seg.stripes
                    for a in seg.areas:
                        out[a.pv].append((a.pe, per))
        for runs in out.values():
            runs.sort()
        return out

    def free_runs(self) -> dict[str, list[tuple[int, int]]]:
        """Per PV, the sorted list of free (first PE, count) runs."""
        out = {}
        used = self.used()
        for p in self.pvs:
            runs, cur = [], 0
            for first, n in used[p.uuid]:
                if first > cur:
                    runs.append((cur, first - cur))
                cur = max(cur, first + n)
            if cur < p.pe_count:
                runs.append((cur, p.pe_count - cur))
            out[p.uuid] = runs
        return out

    def free_extents(self) -> int:
        return sum(n for runs in self.free_runs().values() for _, n in runs)

    def to_doc(self) -> dict:
        return {"format": FORMAT, **asdict(self)}

    @classmethod
    def from_doc(cls, doc: dict, where: str) -> VolumeGroupMeta:
        """Read a document of this format, or of an older one (upgraded here: format 1 had no
        zoned volumes, so every size is extents × extent size)."""
        try:
            fmt = doc.get("format")
            if fmt != FORMAT and fmt not in OLD_FORMATS:
                raise ValueError(f"format {fmt!r}, expected {FORMAT!r}")
            extent = int(doc["extent_size"])
            vg = cls(
                name=doc["name"], uuid=doc["uuid"], seq=int(doc["seq"]), extent_size=extent,
                pvs=[PhysicalVolume(p["uuid"], p["path"], int(p["pe_start"]), int(p["pe_count"]),
                                    Geometry(**p["geometry"])) for p in doc["pvs"]],
                lvs=[LogicalVolume(
                    lv["name"], lv["uuid"], int(lv["extents"]), lv["layout"], int(lv["stripes"]),
                    int(lv["stripe_unit"]),
                    [Leg([Segment(int(s["le"]), int(s["count"]), [Area(a["pv"], int(a["pe"])) for a in s["areas"]])
                          for s in leg["segments"]], leg["state"]) for leg in lv["legs"]],
                    int(lv["size"]) if fmt == FORMAT else int(lv["extents"]) * extent,
                    Quadrangle(**{k: int(v) for k, v in lv["quadrangle"].items()})
                    if fmt == FORMAT and lv["quadrangle"] is not None else None,
                ) for lv in doc["lvs"]],
            )
            vg.validate()
            return vg
        except (KeyError, TypeError, ValueError, AttributeError, MetadataError, UsageError) as e:
            raise MetadataError(f"{where}: invalid volume-group metadata: {e}") from None

    def _validate_shape(self, lv: LogicalVolume) -> None:
        """Stripe unit, size and track parameters agree with the layout: a flat layout's units
        tile its extents; a zoned one's unit is a track row and its size whole VLBNs."""
        q = lv.quadrangle
        if q is None:
            if lv.layout == "quadrangle":
                raise ValueError(f"logical volume {lv.name}: a quadrangle volume without its track parameters")
            if lv.stripe_unit < 512 or self.extent_size % lv.stripe_unit:
                raise ValueError(f"logical volume {lv.name}: stripe unit {lv.stripe_unit} does not divide "
                                 f"the extent size {self.extent_size}")
            if lv.size != lv.extents * self.extent_size:
                raise ValueError(f"logical volume {lv.name}: size {lv.size} is not its {lv.extents} extents")
            return
        if lv.layout not in ("traxtent", "quadrangle"):
            raise ValueError(f"logical volume {lv.name}: a {lv.layout} volume has no track parameters")
        q.validate()
        if lv.stripe_unit != q.row_sectors * 512:
            raise ValueError(f"logical volume {lv.name}: stripe unit {lv.stripe_unit} is not a track row "
                             f"of {q.row_sectors} sectors")
        if not 0 < lv.size <= lv.extents * self.extent_size or lv.size % (q.block * 512):
            raise ValueError(f"logical volume {lv.name}: size {lv.size} is not whole blocks inside its extents")
        for pv in sorted(lv.pvs()):
            if not self.pv(pv).geometry.has_zone(q.zone, q.sectors, q.skew):
                raise ValueError(f"logical volume {lv.name}: physical volume {pv} has no zone {q.zone} "
                                 f"with N = {q.sectors}, H = {q.skew}")

    def validate(self) -> None:
        """Refuse documents that would map one physical extent twice or point nowhere."""
        check_name("volume group", self.name)
        uuid.UUID(self.uuid)
        if self.extent_size <= 0 or self.extent_size % 4096:
            raise ValueError(f"extent size {self.extent_size} is not a positive multiple of 4096")
        pv_ids = {p.uuid for p in self.pvs}
        if len(pv_ids) != len(self.pvs):
            raise ValueError("a physical volume is listed twice")
        names = [lv.name for lv in self.lvs]
        if len(set(names)) != len(names):
            raise ValueError("a logical volume name is used twice")
        for lv in self.lvs:
            check_name("logical volume", lv.name)
            if lv.layout not in LAYOUTS:
                raise ValueError(f"logical volume {lv.name}: unknown layout {lv.layout!r}")
            for leg in lv.legs:
                if leg.state not in ("in_sync", "stale"):
                    raise ValueError(f"logical volume {lv.name}: unknown leg state {leg.state!r}")
                le = 0
                for seg in leg.segments:
                    if seg.le != le or seg.count <= 0 or not seg.areas or seg.count % seg.stripes:
                        raise ValueError(f"logical volume {lv.name}: segments do not tile its extents")
                    for a in seg.areas:
                        if a.pv not in pv_ids:
                            raise ValueError(f"logical volume {lv.name}: unknown physical volume {a.pv}")
                    le += seg.count
                if le != lv.extents:
                    raise ValueError(f"logical volume {lv.name}: segments cover {le} of {lv.extents} extents")
            self._validate_shape(lv)
        for p in self.pvs:
            if p.geometry.kind not in ("flat", "zoned") or (p.geometry.kind == "zoned") != (p.geometry.disk is not None):
                raise ValueError(f"physical volume {p.uuid}: geometry kind {p.geometry.kind!r} does not match its disk")
            end = 0
            for first, n in self.used()[p.uuid]:
                if first < end or first + n > p.pe_count:
                    raise ValueError(f"physical volume {p.uuid}: extents overlap or run past its end")
                end = first + n
