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
  steps that leave the fewest sectors unexplained are the surfaces, H and the cylinder skew. A
  class's smallest step is its skew only if some window of that class holds no slip, so the zone
  is sampled until its slipped slots (known from its size) cannot fill every window; a zone too
  short for that also offers each smaller skew the slips could hide.
* **Choosing a fit.** A too-large skew puts each track's slots one more sector early per switch;
  slips near the switches can pay for that between sectors the defect search never reads, so a
  wrong fit can pass the search. Every candidate not refuted by the sectors already read gets a
  search, and survivors that disagree are told apart by reading a sector where they differ.
* **Slipped defects.** Number the zone's physical slots ``p = track * N + slot``. LBN ``L`` sits at
  ``p = L - first + k(L)`` where ``k(L)`` is the number of slipped slots before it, a
  non-decreasing step function. Given bounds on ``k`` whose span is below N minus the largest skew,
  one angle pins ``k`` exactly (no two candidate slots share an angle), so ``k`` is bisected:
  ``K`` defects in a zone of ``L`` LBNs cost about ``K log2 L`` probes, and each leaf names the
  exact slipped slots. The zone's first LBN anchors it: every zone's first track starts at angle
  0, so that LBN's angle counts the slots slipped before it.
"""

from __future__ import annotations

import bisect

from .probe import Probes

STEP_TOL = 1e-3  # sectors
CANDIDATES = 4  # numbers of surfaces tried for a zone whose surfaces are not yet known
SAMPLES = 48  # tracks sampled for the skews, at least


class ExtractionError(Exception):
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
    ``surfaces`` when already known (a candidate with equal skews says 1: it cannot tell).

    Slips only add to a step, so a class's smallest step is its skew only if one of its sampled
    windows holds no slip. Enough samples make that certain: ``K`` slipped slots cannot fill more
    than ``K`` windows, and ``K`` is known from the zone's size (see :func:`zone_slack`). Where the
    zone is too short for that, every smaller skew the slack could hide is a candidate as well;
    :func:`solve_zone` keeps the one the disk agrees with."""
    lbns = end - first
    most = lbns // n - 1
    if most < 2:
        raise ExtractionError(f"zone at LBN {first}: too few tracks ({lbns // n}) to measure skews")
    ends: list[int] = []
    samples = min(SAMPLES, most)
    while True:
        while len(ends) <= samples:
            lbn = first + len(ends) * n
            e = probes.slot_end(lbn, n)
            if e is None:
                raise ExtractionError(f"zone at LBN {first}: sector {lbn} is off the zone's sector grid")
            ends.append(e)
        steps = [(ends[j] - ends[j - 1]) % n for j in range(1, samples + 1)]  # steps[j-1]: into track j
        ranked = _rank_skews(steps, n, surfaces, samples)
        if not ranked:
            raise ExtractionError(f"zone at LBN {first}: fewer tracks than surfaces; cannot see its cylinders")
        _, s, h, c = ranked[0]  # more windows per class than slipped slots leave one unslipped
        want = min(most, s * (min(zone_slack(lbns, n, s), ZoneModel(first, n, h, c, s).span) + 1))
        if want <= samples:
            break
        samples = want
    fits: dict[tuple[int, int, int], None] = {}  # ordered, without repeats
    for score, s, h, c in ranked[:CANDIDATES]:
        cross = samples // s
        plain = samples - cross
        # the slips the fit leaves unexplained come out of the slack; what is left may hide in
        # every window of a class. A defect search resolves at most `span` slips between the
        # zone's first and last sectors, and the windows lie between them.
        span = ZoneModel(first, n, h, c, s).span
        budget = max(0, min(zone_slack(lbns, n, s), span) - score + (cross if plain else 0))
        for a in range(budget // plain + 1 if plain else 1):
            for b in range((budget - a * plain) // cross + 1):
                if min(h - a, c - b) >= 0:
                    fits[(h - a, c - b, 1 if h - a == c - b else s)] = None
    return list(fits)


def _rank_skews(steps: list[int], n: int, surfaces: int | None, samples: int) -> list[tuple[int, int, int, int]]:
    """(score, surfaces, H, cylinder skew) for each number of surfaces, best (lowest) first; the
    score counts the slipped slots the fit leaves unexplained, plus one per cylinder switch when
    the fit claims a second skew."""

    def fit(values: list[int]) -> tuple[int, int]:
        """(skew, slipped slots it leaves unexplained): each slip adds one sector to a step."""
        return min(((v, sum((x - v) % n for x in values)) for v in set(values)), key=lambda f: f[1])

    ranked = []
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
    out: list[tuple[int, int, int, int]] = []  # equal skews look alike for any number of surfaces
    for score, s, h, c in sorted(ranked):
        if all((h, c, 1 if h == c else s) != (h2, c2, 1 if h2 == c2 else s2) for _, s2, h2, c2 in out):
            out.append((score, s, h, c))
    return out


def zone_slack(lbns: int, n: int, surfaces: int) -> int:
    """The fewest slipped slots that let ``lbns`` LBNs fill whole ``surfaces``-track cylinders of
    ``n``-slot tracks: the zone's own count unless it slips a whole cylinder's worth more (far
    beyond the ``span`` a defect search resolves)."""
    tracks = -(-lbns // n)
    tracks += -tracks % surfaces
    return tracks * n - lbns


def _slot_of(probes: Probes, model: ZoneModel, lbn: int, lo: int, hi: int) -> int:
    """The one physical slot in ``[lo, hi]`` whose completion angle is ``lbn``'s."""
    e = probes.slot_end(lbn, model.n)
    found = model.slots_at(e, lo, hi) if e is not None else []
    if len(found) != 1:
        raise ExtractionError(
            f"LBN {lbn}: completion angle fits {len(found)} slots of its zone (at LBN {model.first_lbn}); "
            "the zone has more slipped defects than extraction can resolve, or the disk is not "
            "what the timings suggested")
    return found[0]


def check_seen(probes: Probes, model: ZoneModel, end: int) -> None:
    """Raise unless ``model`` places every sector of ``[first, end)`` read so far in ascending
    slots, with no more slipped between them than a defect search resolves (see
    :func:`slipped_slots`). Costs no probe: a model refuted here needs no defect search."""
    first = model.first_lbn
    p_first = p = _slot_of(probes, model, first, 0, model.span)
    seen = probes.seen(first + 1, end)
    if seen:  # the last sector read refutes most wrong models at once
        _slot_of(probes, model, seen[-1], seen[-1] - first + p_first, seen[-1] - first + p_first + model.span)
    prev = first
    for lbn in seen:
        p = _slot_of(probes, model, lbn, p + lbn - prev, lbn - first + p_first + model.span)
        prev = lbn


def slipped_slots(probes: Probes, model: ZoneModel, end: int) -> tuple[int, list[int]]:
    """(tracks in the zone, its slipped physical slots ascending) for the zone ``[first, end)``."""
    first, n = model.first_lbn, model.n

    def slot_of(lbn: int, lo: int, hi: int) -> int:
        return _slot_of(probes, model, lbn, lo, hi)

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


class ZoneLayout:
    """A solved zone: its model, ``tracks`` and slipped slots; predicts every sector's angle."""

    def __init__(self, model: ZoneModel, tracks: int, slipped: list[int]):
        self.model, self.tracks, self.slipped = model, tracks, slipped
        self.lbns = tracks * model.n - len(slipped)

    def slot(self, i: int) -> int:
        """Physical slot of the zone's ``i``-th LBN: ``i`` plus the slipped slots up to it."""
        k = bisect.bisect_right(self.slipped, i)
        while (k2 := bisect.bisect_right(self.slipped, i + k)) != k:
            k = k2
        return i + k

    def end(self, i: int) -> int:
        """Where the ``i``-th LBN's slot ends, in sectors (what :meth:`Probes.slot_end` sees)."""
        n = self.model.n
        p = self.slot(i)
        return (p % n + self.model.offset(p // n) + 1) % n

    def breaks(self) -> set[int]:
        """The LBNs (zone-relative) that begin a run of consecutive slots on one track: between
        two of them the angle advances by one sector per LBN."""
        n, out = self.model.n, {0}
        for p in [*(t * n for t in range(1, self.tracks)), *(s + 1 for s in self.slipped)]:
            i = p - bisect.bisect_left(self.slipped, p)  # the LBN at the first good slot from p
            if i < self.lbns:
                out.add(i)
        return out


def solve_zone(probes: Probes, first: int, end: int, n: int, surfaces: int | None) -> ZoneLayout:
    """The zone ``[first, end)`` solved: every skew candidate that the sectors read so far do not
    refute gets a defect search, and survivors that disagree are told apart by reading a sector
    where their predictions differ (the first survivor may be wrong: see the module docstring).

    Survivors that agree on every sector cannot be told apart by any read: slot 0 slipped on every
    track of one switch class reads exactly like the last slot slipped on each with that class's
    skew one sector larger. The slips are then placed at the tracks' starts."""
    failure: ExtractionError | None = None
    layouts: list[ZoneLayout] = []
    for h, c, s in fit_skews(probes, first, end, n, surfaces):
        model = ZoneModel(first, n, h, c, s)
        try:
            check_seen(probes, model, end)
            layouts.append(ZoneLayout(model, *slipped_slots(probes, model, end)))
        except ExtractionError as e:
            failure = failure or e
    if not layouts:
        assert failure is not None
        raise failure

    def agree(lbn: int) -> list[ZoneLayout]:
        e = probes.slot_end(lbn, n)
        return [x for x in layouts if x.end(lbn - first) == e]

    for lbn in probes.seen(first, end):  # what the later defect searches read refutes earlier fits
        layouts = agree(lbn)
    while len(layouts) > 1:
        a, b = layouts[0], layouts[1]
        differ = next((i for i in sorted(a.breaks() | b.breaks()) if a.end(i) != b.end(i)), None)
        if differ is None:
            layouts.remove(max(b, a, key=lambda x: sum(x.slipped)))  # see the docstring
        else:
            layouts = agree(first + differ)
    if not layouts:
        raise ExtractionError(f"zone at LBN {first}: no skew fit agrees with every sector read")
    return layouts[0]
