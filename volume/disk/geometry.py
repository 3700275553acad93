"""Where a disk's logical blocks physically are: zones, tracks, skews and slipped defects.

This is the ground truth of a modelled disk (the simulator times requests against it) and the
shape the black-box extraction must recover. Terms follow the Atropos paper:

* a **zone** is a run of cylinders whose tracks hold the same number ``N`` of sector slots;
* tracks are numbered cylinder-major (``t = cylinder * surfaces + surface``), outermost zone first;
* the **track skew** ``H`` is the angular offset, in sectors, between the first slot of a track and
  that of the next track of the same cylinder (the rotation that passes during a head switch);
  the **cylinder skew** is the same across a cylinder switch;
* a **slipped defect** is a physical slot that holds no LBN: LBNs fill the good slots of a track in
  order, so a track with ``k`` defects holds ``N - k`` LBNs and every later track boundary moves.

Angles are fractions of a revolution in ``[0, 1)``; the platter is at angle ``(t / T_rev) mod 1``
at simulated time ``t``, and slot ``s`` of track ``t`` starts under the head at angle
``((s + skew_offset(t)) mod N) / N``.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field, replace
from itertools import accumulate

SECTOR = 512


@dataclass(frozen=True)
class Zone:
    cylinders: int
    sectors_per_track: int  # N: physical sector slots per track
    track_skew: int  # H, sectors
    cylinder_skew: int  # sectors


@dataclass(frozen=True)
class DiskSpec:
    """A disk model's parameters: geometry and mechanics (times in milliseconds).

    ``defects`` are physical slots ``(cylinder, surface, slot)`` that are slipped.
    """

    name: str
    rpm: int
    surfaces: int
    zones: tuple[Zone, ...]
    head_switch_ms: float
    track_to_track_ms: float  # a one-cylinder seek (includes settle)
    average_seek_ms: float  # mean seek over random pairs of cylinders inside the outer zone
    full_stroke_ms: float
    overhead_ms: float  # fixed command / bus overhead per request
    defects: tuple[tuple[int, int, int], ...] = field(default=())

    @property
    def revolution_ms(self) -> float:
        return 60_000.0 / self.rpm

    @property
    def cylinders(self) -> int:
        return sum(z.cylinders for z in self.zones)

    def with_defects(self, defects: tuple[tuple[int, int, int], ...]) -> DiskSpec:
        return replace(self, defects=tuple(sorted(set(defects))))

    def to_doc(self) -> dict:
        return {
            "name": self.name, "rpm": self.rpm, "surfaces": self.surfaces,
            "zones": [[z.cylinders, z.sectors_per_track, z.track_skew, z.cylinder_skew] for z in self.zones],
            "head_switch_ms": self.head_switch_ms, "track_to_track_ms": self.track_to_track_ms,
            "average_seek_ms": self.average_seek_ms, "full_stroke_ms": self.full_stroke_ms,
            "overhead_ms": self.overhead_ms, "defects": [list(d) for d in self.defects],
        }

    @classmethod
    def from_doc(cls, doc: dict) -> DiskSpec:
        return cls(
            name=str(doc["name"]), rpm=int(doc["rpm"]), surfaces=int(doc["surfaces"]),
            zones=tuple(Zone(*map(int, z)) for z in doc["zones"]),
            head_switch_ms=float(doc["head_switch_ms"]), track_to_track_ms=float(doc["track_to_track_ms"]),
            average_seek_ms=float(doc["average_seek_ms"]), full_stroke_ms=float(doc["full_stroke_ms"]),
            overhead_ms=float(doc["overhead_ms"]), defects=tuple(tuple(map(int, d)) for d in doc["defects"]),
        )


class DiskGeometry:
    """LBN ↔ physical position for one :class:`DiskSpec` (tracks, slots, angles)."""

    def __init__(self, spec: DiskSpec):
        self.spec = spec
        s = spec.surfaces
        self.surfaces = s
        self.zone_first_track: list[int] = []
        t = 0
        for z in spec.zones:
            self.zone_first_track.append(t)
            t += z.cylinders * s
        self.tracks = t
        self._zone_cyl0 = [ft // s for ft in self.zone_first_track]
        self._defects: dict[int, tuple[int, ...]] = {}
        for cyl, surf, slot in spec.defects:
            tr = cyl * s + surf
            if not (0 <= surf < s and 0 <= tr < t and 0 <= slot < self.zone(self.zone_of_track(tr)).sectors_per_track):
                raise ValueError(f"defect {(cyl, surf, slot)} is outside the disk {spec.name}")
            self._defects[tr] = tuple(sorted(set(self._defects.get(tr, ())) | {slot}))
        lens = []
        for zi, z in enumerate(spec.zones):
            first = self.zone_first_track[zi]
            lens.extend([z.sectors_per_track] * (z.cylinders * s))
            for tr in (tr for tr in self._defects if first <= tr < first + z.cylinders * s):
                lens[tr] -= len(self._defects[tr])
        self._lens = lens
        self._starts = [0, *accumulate(lens)]
        self.capacity = self._starts[-1]  # LBNs

    # ----- zones and tracks ---------------------------------------------------------------------
    def zone(self, z: int) -> Zone:
        return self.spec.zones[z]

    def zone_of_track(self, t: int) -> int:
        return bisect.bisect_right(self.zone_first_track, t) - 1

    def zone_tracks(self, z: int) -> range:
        first = self.zone_first_track[z]
        return range(first, first + self.spec.zones[z].cylinders * self.surfaces)

    def cylinder(self, t: int) -> int:
        return t // self.surfaces

    def surface(self, t: int) -> int:
        return t % self.surfaces

    def track_start(self, t: int) -> int:
        """LBN of the first sector on track ``t`` (``track_start(tracks)`` is the capacity)."""
        return self._starts[t]

    def track_lbns(self, t: int) -> int:
        """LBNs held by track ``t``: N minus its slipped defects."""
        return self._lens[t]

    def track_of(self, lbn: int) -> int:
        if not 0 <= lbn < self.capacity:
            raise ValueError(f"LBN {lbn} outside the disk (capacity {self.capacity})")
        return bisect.bisect_right(self._starts, lbn) - 1

    def defects_on(self, t: int) -> tuple[int, ...]:
        """Slipped slots of track ``t``, ascending."""
        return self._defects.get(t, ())

    def defective_tracks(self) -> dict[int, tuple[int, ...]]:
        return dict(self._defects)

    # ----- physical positions -------------------------------------------------------------------
    def skew_offset(self, t: int) -> int:
        """Angular offset (sectors, mod N) of track ``t``'s slot 0 from its zone's first track."""
        zi = self.zone_of_track(t)
        z = self.spec.zones[zi]
        rel = t - self.zone_first_track[zi]
        cyl, head = divmod(rel, self.surfaces)
        return (cyl * ((self.surfaces - 1) * z.track_skew + z.cylinder_skew) + head * z.track_skew) % z.sectors_per_track

    def slot_of(self, lbn: int) -> tuple[int, int]:
        """(track, physical slot) holding ``lbn``."""
        t = self.track_of(lbn)
        i = lbn - self._starts[t]
        for d in self._defects.get(t, ()):  # slots before i's slot that are skipped push it on
            if d <= i:
                i += 1
            else:
                break
        return t, i

    def slot_angle(self, t: int, slot: int) -> float:
        """Angle (fraction of a revolution) at which ``slot`` of track ``t`` starts under the head."""
        n = self.spec.zones[self.zone_of_track(t)].sectors_per_track
        return ((slot + self.skew_offset(t)) % n) / n

    def sectors_per_track(self, t: int) -> int:
        """N (physical slots) of track ``t``'s zone."""
        return self.spec.zones[self.zone_of_track(t)].sectors_per_track
