"""The allocator's search (``traxfs.fs.engine.alloc``): the first glance at the run where a search
starts (its bits' bytes only) agrees with the full test of a run against whole maps, for runs
inside a map and across two, with pages allocated and pages quarantined after a free."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from traxfs.fs.engine.alloc import _GLANCE
from traxfs.fs.engine.engine import Engine
from traxfs.volume.device import create_image

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def eng(tmp_path_factory):
    dev = create_image(str(tmp_path_factory.mktemp("alloc") / "a.img"), 320 << 20)  # three maps
    Engine.format(dev, log_size=16 << 20)
    e = Engine.open(dev)
    assert e.sb.page_count > 2 * e.alloc.bits_per_map
    yield e
    e.close()
    dev.close()


RUNS = st.lists(st.tuples(st.integers(-40, 40), st.integers(1, 70)), max_size=6)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(near=st.sampled_from([0, 1, 2]), taken=RUNS, held=RUNS,
       probes=st.lists(st.tuples(st.integers(-80, 80), st.integers(1, _GLANCE)), min_size=1, max_size=12))
def test_the_glance_agrees_with_the_full_test(eng, near, taken, held, probes):
    a = eng.alloc
    base = max(a.first_data + 100, near * a.bits_per_map)  # around a map boundary (or the first map)
    tx = eng.begin()
    holds = []
    try:
        for off, n in taken:
            eng.alloc_at(tx, base + off, n)  # False (nothing set) where any page is taken already
        with a._qlock:
            for off, n in held:
                a._hold_bits(base + off, n, True)
                holds.append((base + off, n))
        for off, n in probes:
            first = base + off
            assert a._used_bits(first, n, None) == a._used_bits(first, n, {}), (first, n)
    finally:
        with a._qlock:
            for first, n in holds:
                a._hold_bits(first, n, False)
        eng.abort(tx)


def test_a_search_returns_the_pages_the_full_search_would(eng):
    """Single pages and short runs come from the cursor when it is free, past a taken page when not."""
    a = eng.alloc
    tx = eng.begin()
    try:
        start = a._cursor
        assert eng.alloc_at(tx, start, 1)  # the page the cursor points at: taken
        got = eng.alloc_region(tx, 1)
        assert got == start + 1 and a._used_bits(start, 1, None)
        assert eng.alloc_region(tx, 4, align=4) == -(-(start + 2) // 4) * 4
    finally:
        eng.abort(tx)
