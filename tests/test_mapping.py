"""Address mapping of the layouts (linear, striped, traxtent) and data through OpenLogicalVolume.

The pure-mapping properties are checked against an independent, byte-by-byte reading of the
layout rule in ``layout/mapping.py``: unit ``c`` of a segment lives in area ``c % k`` at row
``c // k`` (``k = 1`` is concatenation). The data tests then write random ranges through every
layout on real image-file PVs and read them back, also after closing and reopening the group.
"""

from __future__ import annotations

import random
from collections import defaultdict

import pytest
from conftest import IO_PHASES, MiB
from hypothesis import given, settings
from hypothesis import strategies as st

from traxfs.volume.errors import UsageError
from traxfs.volume.group import VolumeGroup
from traxfs.volume.layout.mapping import LegMap, runs
from traxfs.volume.logical import Request
from traxfs.volume.model import Area, Segment
from traxfs.volume.registry import Registry
from traxfs.volume.scan import pv_create

# ----- pure mapping: generated legs ----------------------------------------------------------------

PV_NAMES = ["pvA", "pvB", "pvC", "pvD", "pvE"]


@st.composite
def leg_maps(draw, layout: str):
    """A leg of 1-4 segments over up to 5 PVs with non-overlapping areas (gaps allowed)."""
    extent = draw(st.sampled_from([4096, 8192, 16384]))
    if layout == "linear":
        unit = draw(st.sampled_from([512, 4096]))  # reported unit; irrelevant for k = 1
    elif layout == "striped":
        unit = draw(st.sampled_from([512, 1024, 2048]))  # small fixed stripe unit
    else:  # traxtent: track-sized units, a large fraction of an extent
        unit = draw(st.sampled_from([extent // 4, extent // 2, extent]))
    n_pvs = draw(st.integers(1 if layout == "linear" else 2, len(PV_NAMES)))
    pvs = PV_NAMES[:n_pvs]
    pe_start = {p: draw(st.sampled_from([0, 4096, 2 * MiB])) for p in pvs}
    cursor = {p: draw(st.integers(0, 3)) for p in pvs}
    stripes = 1 if layout == "linear" else draw(st.integers(2, n_pvs))
    segments, le = [], 0
    for _ in range(draw(st.integers(1, 4))):
        k = stripes
        chosen = draw(st.permutations(pvs))[:k]
        per = draw(st.integers(1, 3))
        areas = []
        for p in chosen:
            cursor[p] += draw(st.integers(0, 2))  # an optional gap before the area
            areas.append(Area(p, cursor[p]))
            cursor[p] += per
        segments.append(Segment(le, per * k, areas))
        le += per * k
    return LegMap(segments, extent, unit, pe_start)


def ref_map(lm: LegMap, x: int) -> tuple[str, int]:
    """Where logical byte ``x`` of the leg lives: (pv, device byte), straight from the rule."""
    for seg in lm.segments:
        start = seg.le * lm.extent_size
        if start <= x < start + seg.count * lm.extent_size:
            chunk, within = divmod(x - start, lm.unit)
            row, col = divmod(chunk, seg.stripes)
            a = seg.areas[col]
            return a.pv, lm.pe_start[a.pv] + a.pe * lm.extent_size + row * lm.unit + within
    raise AssertionError(f"byte {x} outside the leg")


def area_intervals(lm: LegMap) -> dict[str, list[tuple[int, int]]]:
    """Per PV, the device byte ranges [start, end) of the leg's areas, adjacent ones merged."""
    out: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for seg in lm.segments:
        per = seg.count // seg.stripes * lm.extent_size
        for a in seg.areas:
            s = lm.pe_start[a.pv] + a.pe * lm.extent_size
            out[a.pv].append((s, s + per))
    for pv, iv in out.items():
        iv.sort()
        merged = [iv[0]]
        for s, e in iv[1:]:
            if s == merged[-1][1]:
                merged[-1] = (merged[-1][0], e)
            else:
                merged.append((s, e))
        out[pv] = merged
    return out


def check_pieces(lm: LegMap, offset: int, length: int):
    pieces = lm.pieces(offset, length)
    areas = area_intervals(lm)
    pos = 0
    for p in pieces:
        assert p.length > 0
        assert p.buf_offset == pos, "pieces must cover the request in order, without gaps or overlap"
        # every unit boundary inside the piece (and both ends) maps where the rule says
        x0 = offset + p.buf_offset
        probes = {x0, x0 + p.length - 1}
        probes.update(range(-(-x0 // lm.unit) * lm.unit, x0 + p.length, lm.unit))
        for x in probes:
            assert ref_map(lm, x) == (p.pv, p.dev_offset + (x - x0)), f"byte {x} mapped wrongly"
        # and the piece lies inside the physical extents the leg owns on that device
        assert any(s <= p.dev_offset and p.dev_offset + p.length <= e for s, e in areas[p.pv])
        pos += p.length
    assert pos == length
    for a, b in zip(pieces, pieces[1:], strict=False):
        assert not (a.pv == b.pv and a.dev_offset + a.length == b.dev_offset), "mergeable pieces left split"
    return pieces


@st.composite
def leg_and_range(draw, layout: str):
    lm = draw(leg_maps(layout))
    offset = draw(st.integers(0, lm.size))
    length = draw(st.integers(0, lm.size - offset))
    return lm, offset, length


LAYOUTS = ["linear", "striped", "traxtent"]


@pytest.mark.parametrize("layout", LAYOUTS)
@settings(max_examples=60)
@given(data=st.data())
def test_pieces_cover_request_exactly_once(layout, data):
    lm, offset, length = data.draw(leg_and_range(layout))
    check_pieces(lm, offset, length)


@pytest.mark.parametrize("layout", LAYOUTS)
@settings(max_examples=40)
@given(data=st.data())
def test_whole_leg_is_a_bijection_onto_its_areas(layout, data):
    lm = data.draw(leg_maps(layout))
    pieces = check_pieces(lm, 0, lm.size)
    per_pv: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for p in pieces:
        per_pv[p.pv].append((p.dev_offset, p.dev_offset + p.length))
    for pv, iv in per_pv.items():
        iv.sort()
        for (_, e1), (s2, _) in zip(iv, iv[1:], strict=False):
            assert s2 >= e1, f"two logical bytes map to the same byte of {pv}"
    # no overlap + every piece inside the areas + equal totals => the image is exactly the areas
    assert sum(p.length for p in pieces) == lm.size
    assert sum(e - s for iv in area_intervals(lm).values() for s, e in iv) == lm.size


@pytest.mark.parametrize("layout", LAYOUTS)
@settings(max_examples=60)
@given(data=st.data())
def test_runs_group_pieces_into_contiguous_device_ios(layout, data):
    lm, offset, length = data.draw(leg_and_range(layout))
    pieces = lm.pieces(offset, length)
    rs = runs(pieces)
    by_buf = {(p.buf_offset, p.length): p for p in pieces}
    seen = []
    for r in rs:
        dev = r.dev_offset
        for buf_off, n in r.parts:
            p = by_buf[(buf_off, n)]
            assert p.pv == r.pv and p.dev_offset == dev, "a run's parts must be contiguous on its device"
            dev += n
            seen.append((buf_off, n))
    assert sorted(seen) == sorted(by_buf), "every piece in exactly one run"
    # maximal: a run never ends exactly where a later-started run on the same device begins
    ends = {(r.pv, r.dev_offset + sum(n for _, n in r.parts)): i for i, r in enumerate(rs)}
    for j, r in enumerate(rs):
        i = ends.get((r.pv, r.dev_offset))
        assert i is None or i > j, "two runs that continue each other were not merged"
    # inside one segment, a request is exactly one I/O per device it touches
    if length and lm.segment_at(offset)[0] is lm.segment_at(offset + length - 1)[0]:
        assert len(rs) == len({p.pv for p in pieces}) == len({r.pv for r in rs})


@pytest.mark.parametrize("layout", LAYOUTS)
@settings(max_examples=60)
@given(data=st.data())
def test_fast_runs_equal_the_reference_mapping(layout, data):
    """LegMap.runs (what I/O uses) against runs(pieces(...)) (the rule, spelled out): the same
    device bytes for the same buffer bytes."""
    lm, offset, length = data.draw(leg_and_range(layout))

    def bytes_of(rs):
        """(pv, device offset, buffer offset, length) extents, maximally merged."""
        spans = []
        for r in rs:
            dev = r.dev_offset
            for buf, n in r.parts:
                spans.append((buf, r.pv, dev, n))
                dev += n
        merged: list[list] = []
        for buf, pv, dev, n in sorted(spans):
            last = merged[-1] if merged else None
            if last and last[0] == pv and last[1] + last[3] == dev and last[2] + last[3] == buf:
                last[3] += n
            else:
                merged.append([pv, dev, buf, n])
        return merged

    assert bytes_of(lm.runs(offset, length)) == bytes_of(runs(lm.pieces(offset, length)))


def test_pieces_examples_by_hand():
    """A tiny striped leg worked out on paper, so the rule itself is pinned down."""
    seg = Segment(0, 4, [Area("a", 1), Area("b", 0)])  # 2 stripes, 2 extents each
    lm = LegMap([seg], 4096, 1024, {"a": 100, "b": 0})
    ps = lm.pieces(1000, 2100)
    assert [(p.pv, p.dev_offset, p.buf_offset, p.length) for p in ps] == [
        ("a", 100 + 4096 + 1000, 0, 24),  # unit 0 -> a row 0
        ("b", 0, 24, 1024),  # unit 1 -> b row 0
        ("a", 100 + 4096 + 1024, 1048, 1024),  # unit 2 -> a row 1
        ("b", 1024, 2072, 28),  # unit 3 -> b row 1
    ]
    rs = runs(ps)
    assert [(r.pv, r.dev_offset, r.parts) for r in rs] == [
        ("a", 100 + 4096 + 1000, [(0, 24), (1048, 1024)]),
        ("b", 0, [(24, 1024), (2072, 28)]),
    ]
    # linear segments that continue each other on one device become one piece
    lin = LegMap([Segment(0, 2, [Area("a", 0)]), Segment(2, 1, [Area("a", 2)])], 4096, 4096, {"a": 0})
    assert [(p.pv, p.dev_offset, p.length) for p in lin.pieces(100, 3 * 4096 - 200)] == [("a", 100, 3 * 4096 - 200)]


# ----- data through every layout on image-file PVs -------------------------------------------------

VG = "mapvg"


@pytest.fixture(scope="module")
def layout_vg(tmp_path_factory):
    """A group over five image PVs of unequal size with multi-segment linear, striped and
    traxtent volumes (segments deliberately spread by growing the volumes in turns)."""
    d = tmp_path_factory.mktemp("layouts")
    reg = Registry(home=d / "home")
    paths = []
    for i in range(5):
        p = str(d / f"pv{i}.img")
        pv_create(reg, p, size=(10 + 3 * i) * MiB, unit=128 * 1024)
        paths.append(p)
    VolumeGroup.create(reg, VG, paths, extent_size=MiB)
    with VolumeGroup.open(reg, VG) as vg:
        vg.create_lv("lin", 5 * MiB)
        vg.create_lv("str", 6 * MiB, "striped", stripes=3, stripe_unit=64 * 1024)
        vg.create_lv("trx", 4 * MiB, "traxtent", stripes=2)
        vg.create_lv("fill", 4 * MiB)
        vg.extend_lv("lin", 20 * MiB)
        vg.extend_lv("str", 12 * MiB)
        vg.extend_lv("trx", 10 * MiB)
        for name in ("lin", "str", "trx"):
            assert len(vg.meta.lv(name).legs[0].segments) >= 2, f"{name} should span several segments"
        assert vg.meta.lv("trx").stripe_unit == 128 * 1024  # the devices' track unit
    return reg


def boundary_offsets(lv_meta, extent: int) -> list[int]:
    """Interesting offsets: segment starts and stripe-unit edges around them."""
    pts = {0, lv_meta.extents * extent}
    for seg in lv_meta.legs[0].segments:
        s = seg.le * extent
        pts.update({s, s + lv_meta.stripe_unit, s + lv_meta.stripe_unit * lv_meta.stripes})
    return sorted(pts)


@st.composite
def write_ops(draw, size: int, edges: list[int], max_len: int = 3 * MiB // 2):
    ops = []
    for _ in range(draw(st.integers(1, 6))):
        if draw(st.booleans()):
            off = draw(st.sampled_from(edges)) + draw(st.integers(-700, 700))
        else:
            off = draw(st.integers(0, size - 1))
        off = min(max(off, 0), size - 1)
        length = draw(st.integers(1, min(max_len, size - off)))
        ops.append((off, length, draw(st.integers(0, 2**32))))
    return ops


def pattern(seed: int, n: int) -> bytes:
    return random.Random(seed).randbytes(n)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("name", ["lin", "str", "trx"])
@settings(max_examples=12, phases=IO_PHASES)
@given(data=st.data())
def test_written_data_reads_back_through_every_layout(layout_vg, name, data):
    reg = layout_vg
    with VolumeGroup.open(reg, VG) as vg:
        lv_meta = vg.meta.lv(name)
        olv = vg.open_lv(name)
        shadow = bytearray(olv.read(0, olv.size))
        ops = data.draw(write_ops(olv.size, boundary_offsets(lv_meta, vg.meta.extent_size)))
        for off, length, seed in ops:
            buf = pattern(seed, length)
            olv.write(off, buf)
            shadow[off : off + length] = buf
        for off, length, _ in ops:  # read back each range, and a range straddling it
            assert olv.read(off, length) == shadow[off : off + length]
            lo, hi = max(0, off - 5000), min(olv.size, off + length + 5000)
            assert olv.read(lo, hi - lo) == shadow[lo:hi]
        olv.flush()
    with VolumeGroup.open(reg, VG) as vg:  # a fresh open: nothing came from memory
        olv = vg.open_lv(name)
        assert olv.read(0, olv.size) == bytes(shadow)


@pytest.mark.timeout(60)
def test_volumes_do_not_overlap_on_disk(layout_vg):
    """Fill every volume completely with its own pattern; each reads back whole and intact, so
    no byte of one volume is stored where another (or a metadata area) lives."""
    with VolumeGroup.open(layout_vg, VG) as vg:
        names = [lv.name for lv in vg.meta.lvs]
        contents = {}
        for i, name in enumerate(names):
            olv = vg.open_lv(name)
            contents[name] = pattern(1000 + i, olv.size)
            olv.write(0, contents[name])
            olv.flush()
    with VolumeGroup.open(layout_vg, VG) as vg:
        assert vg.warnings == []
        for name in names:
            olv = vg.open_lv(name)
            assert olv.read(0, olv.size) == contents[name], f"{name} was overwritten by another volume"


@st.composite
def batches(draw, size: int):
    """Non-overlapping requests, some reads, some writes, in random order."""
    cuts = sorted(draw(st.sets(st.integers(0, size), min_size=2, max_size=14)))
    spans = [(a, b) for a, b in zip(cuts[0::2], cuts[1::2], strict=False) if b > a]
    reqs = []
    for a, b in spans:
        b = min(b, a + 2 * MiB)
        if draw(st.booleans()):
            reqs.append(Request(a, data=pattern(draw(st.integers(0, 2**32)), b - a)))
        else:
            reqs.append(Request(a, length=b - a))
    return draw(st.permutations(reqs))


@pytest.mark.timeout(60)
@pytest.mark.parametrize("name", ["lin", "str", "trx"])
@settings(max_examples=10, phases=IO_PHASES)
@given(data=st.data())
def test_batch_equals_one_by_one(layout_vg, name, data):
    with VolumeGroup.open(layout_vg, VG) as vg:
        olv = vg.open_lv(name)
        reqs = data.draw(batches(olv.size))
        shadow = bytearray(olv.read(0, olv.size))
        singles = {r.offset: olv.read(r.offset, r.length) for r in reqs if not r.is_write}
        results = olv.batch(reqs)
        assert len(results) == len(reqs)
        for r, res in zip(reqs, results, strict=True):
            if r.is_write:
                assert res is None
                shadow[r.offset : r.offset + len(r.data)] = r.data
            else:
                assert res == singles[r.offset], "a batched read differs from the same read alone"
        olv.flush()
    with VolumeGroup.open(layout_vg, VG) as vg:
        olv = vg.open_lv(name)
        assert olv.read(0, olv.size) == bytes(shadow), "batched writes differ from sequential writes"
        # and the reverse: data written one by one is what a batch of reads returns
        reads = [Request(r.offset, length=len(r.data) if r.is_write else r.length) for r in reqs]
        assert olv.batch(reads) == [bytes(shadow[q.offset : q.offset + q.length]) for q in reads]


def test_batch_refuses_overlap_and_writes_nothing(layout_vg):
    with VolumeGroup.open(layout_vg, VG) as vg:
        olv = vg.open_lv("str")
        before = olv.read(0, 2 * MiB)
        with pytest.raises(UsageError, match="overlapping"):
            olv.batch([Request(0, data=b"\xff" * 100000), Request(99999, data=b"\xee" * 10)])
        with pytest.raises(UsageError, match="outside the volume"):
            olv.batch([Request(0, data=b"\xff" * 10), Request(olv.size - 1, length=2)])
        assert olv.read(0, 2 * MiB) == before


@pytest.mark.parametrize("name", ["lin", "str", "trx"])
def test_out_of_range_io_is_refused(layout_vg, name):
    with VolumeGroup.open(layout_vg, VG) as vg:
        olv = vg.open_lv(name)
        tail = olv.read(olv.size - 10, 10)
        with pytest.raises(UsageError, match="outside the volume"):
            olv.write(olv.size - 10, b"x" * 11)
        with pytest.raises(UsageError, match="outside the volume"):
            olv.read(olv.size - 10, 11)
        with pytest.raises(UsageError, match="outside the volume"):
            olv.read(-1, 1)
        assert olv.read(olv.size - 10, 10) == tail


@pytest.mark.parametrize("name, p, unit", [("lin", 1, 128 * 1024), ("str", 3, 64 * 1024), ("trx", 2, 128 * 1024)])
def test_atropos_interface(layout_vg, name, p, unit):
    with VolumeGroup.open(layout_vg, VG) as vg:
        olv = vg.open_lv(name)
        w = unit // 512
        assert olv.parallelism() == p
        assert olv.mode_sense() == (p, w)
        n_lbn = olv.size // 512
        for lbn in (0, 1, w - 1, w, 3 * w + 17, n_lbn // 2 + 5, n_lbn - 1):
            first, count = olv.boundaries(lbn)
            assert count == w and first % w == 0 and first <= lbn < first + count
            r_first, r_count = olv.rectangle(lbn)
            assert r_count == p * w and r_first <= lbn < r_first + r_count and r_first % w == 0
            assert olv.equivalent(lbn) == (lbn,)
        assert olv.align_up(1) == unit and olv.align_up(unit) == unit and olv.align_up(0) == 0
        for bad in (-1, n_lbn):
            with pytest.raises(UsageError):
                olv.boundaries(bad)
            with pytest.raises(UsageError):
                olv.equivalent(bad)
