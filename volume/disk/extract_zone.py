"""Extraction of one zone: its sectors per track, its end, its skews and its slipped defects.

Everything here rests on one observation (see :mod:`.probe`): a lone one-sector read completes
when its slot has passed under the head, so the completion angle, in sectors of the zone's track,
is an integer — ``(slot + skew_offset(track) + 1) mod N`` — and in another zone it is off that grid.

* **N** is one revolution over the angle step between consecutive sectors of a track.
* **The zone's end** is found by galloping and bisection on "the local N is this zone's N", then
  walked sector by sector to the first completion that leaves the grid.
* **Skews and surfaces.** Sampling the sectors ``N`` apart from the zone's start lands once per
  track; the angle advances by H per head switch and by the cylinder skew at every ``surfaces``-th
  track (plus one per slipped defect in between; slips only ever add). The period and the two
  steps that leave the fewest sectors unexplained are the surfaces, H and the cylinder skew; the
  best few fits are handed to the defect search, which rejects fits that cannot be true.
* **Slipped defects.** Number the zone's physical slots ``p = track * N + slot``. LBN ``L`` sits at
  ``p = L - first + k(L)`` where ``k(L)`` is the number of slipped slots before it, a
  non-decreasing step function. Given bounds on ``k`` whose span is below N minus the largest skew,
  one angle pins ``k`` exactly (no two candidate slots share an angle), so ``k`` is bisected:
  ``K`` defects in a zone of ``L`` LBNs cost about ``K log2 L`` probes, and each leaf names the
  exact slipped slots. The zone's first LBN anchors it: every zone's first track starts at angle
  0, so that LBN's angle counts the slots slipped before it.
"""

from __future__ import annotations

from traxfs.volume.disk.probe import Probes
from traxfs.volume.errors import VolumeError

STEP_TOL = 1e-3  # sectors
CANDIDATES = 4  # skew fits tried per zone before giving up


class ExtractionError(VolumeError):
    """The timings do not fit a consistent geometry (or exceed what extraction can resolve)."""


class ZoneModel:
    """One zone's layout as extracted: ``n`` slots per track, track skew ``h``, cylinder skew
    ``c``, ``surfaces`` tracks per cylinder; tracks are counted from the zone's first one."""

    def __init__(self, first_lbn: int, n: int, h: int, c: int, surfaces: int):
        self.first_lbn, self.n, self.h, self.c, self.surfaces = first_lbn, n, h, c, surfaces
        steps = {c % n} | ({h % n} if surfaces > 1 else set())
        # two slots at most this far apart never complete at the same angle (see slots_at)
        self.span = min((n - s) if s else n for s in steps) - 1

    def offset(self, track: int) -> int:
        cyl, head = divmod(track, self.surfaces)
        return (cyl * ((self.surfaces - 1) * self.h + self.c) + head * self.h) % self.n

    def slots_at(self, end: int, lo: int, hi: int) -> list[int]:
        """Physical slots in ``[lo, hi]`` whose completion angle is ``end``.

        Slots ``m`` apart on one track differ by ``m`` in angle; across a switch to the next track
        by ``m + skew`` (mod N). So when ``hi - lo <= span`` at most one slot matches."""
        out = []
        for track in range(lo // self.n, hi // self.n + 1):
            p = track * self.n + (end - 1 - self.offset(track)) % self.n
            if lo <= p <= hi:
                out.append(p)
        return out


def local_n(probes: Probes, lbn: int, tries: int = 8) -> int | None:
    """Sectors per track around ``lbn``: four consecutive sectors, of which at least two steps
    must be exactly one sector (a track boundary or a slipped slot makes a longer step); moves
    on by four sectors when they do not agree. None near the disk's end or a zone change."""
    for start in range(lbn, lbn + 4 * tries, 4):
        if start + 3 >= probes.capacity:
            return None
        a = [probes.angle(start + i) for i in range(4)]
        steps = [(a[i + 1] - a[i]) % 1.0 for i in range(3)]
        small = min(steps)
        if small <= 0:
            continue
        n = round(1.0 / small)
        if n >= 2 and sum(abs(s * n - 1.0) < STEP_TOL for s in steps) >= 2:
            return n
    return None


def zone_end(probes: Probes, first: int, n: int) -> int:
    """The first LBN after the zone that starts at ``first`` with ``n`` sectors per track."""
    lo, step, hi = first, n, probes.capacity
    while lo + step < hi:  # gallop: cheap when zones are small beside the disk
        if local_n(probes, lo + step) != n:
            hi = lo + step
            break
        lo += step
        step *= 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if local_n(probes, mid) == n:
            lo = mid
        else:
            hi = mid
    end = lo + 1  # lo is in the zone; the zone ends where the completions leave its grid
    while end < probes.capacity and probes.slot_end(end, n) is not None:
        end += 1
    return end


def fit_skews(probes: Probes, first: int, end: int, n: int, surfaces: int | None) -> list[tuple[int, int, int]]:
    """Candidate (H, cylinder skew, surfaces) of the zone ``[first, end)``, best first;
    ``surfaces`` when already known (a candidate with equal skews says 1: it cannot tell). The
    caller keeps the first one the defect search accepts."""
    samples = min(48, (end - first) // n - 1)
    if samples < 2:
        raise ExtractionError(f"zone at LBN {first}: too few tracks ({(end - first) // n}) to measure skews")
    ends = []
    for j in range(samples + 1):
        e = probes.slot_end(first + j * n, n)
        if e is None:
            raise ExtractionError(f"zone at LBN {first}: sector {first + j * n} is off the zone's sector grid")
        ends.append(e)
    steps = [(ends[j] - ends[j - 1]) % n for j in range(1, samples + 1)]  # steps[j-1]: into track j

    def fit(values: list[int]) -> tuple[int, int]:
        """(skew, slipped slots it leaves unexplained): each slip adds one sector to a step."""
        return min(((v, sum((x - v) % n for x in values)) for v in set(values)), key=lambda f: f[1])

    ranked = []  # (score, surfaces, h, c)
    for s in [surfaces] if surfaces else range(1, max(1, samples // 3) + 1):
        cross = [x for j, x in enumerate(steps, 1) if j % s == 0]
        plain = [x for j, x in enumerate(steps, 1) if j % s]
        if not cross:
            continue
        c, c_left = fit(cross)
        h, h_left = fit(plain) if plain else (c, 0)
        # a second skew must pay for itself: slips alone can make one class of steps look
        # larger, so it is charged a sector per cylinder switch it claims
        ranked.append((c_left + h_left + (len(cross) if plain else 0), s, h, c))
    if not ranked:
        raise ExtractionError(f"zone at LBN {first}: fewer tracks than surfaces; cannot see its cylinders")
    fits = []  # equal skews look alike for any number of surfaces: keep those as one surface
    for _, s, h, c in sorted(ranked):
        if (h, c, 1 if h == c else s) not in fits:
            fits.append((h, c, 1 if h == c else s))
    return fits[:CANDIDATES]


def slipped_slots(probes: Probes, model: ZoneModel, end: int) -> tuple[int, list[int]]:
    """(tracks in the zone, its slipped physical slots ascending) for the zone ``[first, end)``."""
    first, n = model.first_lbn, model.n

    def slot_of(lbn: int, lo: int, hi: int) -> int:
        e = probes.slot_end(lbn, n)
        found = model.slots_at(e, lo, hi) if e is not None else []
        if len(found) != 1:
            raise ExtractionError(
                f"LBN {lbn}: completion angle fits {len(found)} slots of its zone (at LBN {first}); "
                "the zone has more slipped defects than extraction can resolve, or the disk is not "
                "what the timings suggested")
        return found[0]

    p_first = slot_of(first, 0, model.span)
    last = end - 1
    p_last = slot_of(last, last - first + p_first, last - first + p_first + model.span)
    tracks = p_last // n + 1
    if tracks % model.surfaces:
        raise ExtractionError(f"zone at LBN {first}: {tracks} tracks is not a whole number of "
                              f"{model.surfaces}-surface cylinders")
    slipped = list(range(p_first))
    todo = [(first, p_first, last, p_last)]
    while todo:
        l1, p1, l2, p2 = todo.pop()
        if p2 - p1 == l2 - l1:
            continue  # nothing slipped between them
        if l2 == l1 + 1:
            slipped.extend(range(p1 + 1, p2))
            continue
        mid = (l1 + l2) // 2
        pm = slot_of(mid, p1 + (mid - l1), p2 - (l2 - mid))
        todo += [(mid, pm, l2, p2), (l1, p1, mid, pm)]
    slipped.extend(range(p_last + 1, tracks * n))
    return tracks, sorted(slipped)
