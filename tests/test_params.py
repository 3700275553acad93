"""The quadrangle parameter calculator (Atropos Eqs. 1-4) against the paper's numbers, and its
defining properties: what it returns meets the one-revolution constraint and one more does not."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from traxfs.volume.layout.params import dimensions, fits, max_block, max_depth

pytestmark = pytest.mark.timeout(60)

ATLAS_N, ATLAS_H = 686, 139  # Maxtor Atlas 10K III, outer zone


def test_atlas_linear_form_gives_the_papers_numbers():
    assert max_depth(ATLAS_N, ATLAS_H, 1) == 5  # Eq. 2: the b = 1 bound
    assert max_block(ATLAS_N, ATLAS_H, 5) == 26  # Eq. 3
    assert max_depth(ATLAS_N, ATLAS_H, 26) == 5  # Eq. 4
    dims = dimensions(ATLAS_N, ATLAS_H, d=5)
    assert (dims.b, dims.d, dims.w, dims.r) == (26, 5, 26, 10)
    assert round(dims.residual_share * 100, 1) == 1.5  # "For that disk, the value is 1.5%"
    assert dims.one_revolution and dims.max_depth == 5


def test_atlas_cyclic_form():
    assert max_depth(ATLAS_N, ATLAS_H, 1, cyclic=True) == 4
    dims = dimensions(ATLAS_N, ATLAS_H, d=4, cyclic=True)
    assert (dims.b, dims.w, dims.r) == (32, 21, 14)
    assert round(dims.residual_share * 100, 1) == 2.0


def test_smaller_skew_deepens_the_quadrangle():
    assert max_depth(ATLAS_N, 136, 1) == 6  # Table 2's remark: a slightly smaller H grows D
    assert dimensions(ATLAS_N, 136, d=6).b == 1


def test_default_block_of_the_planner():
    dims = dimensions(ATLAS_N, ATLAS_H, b=8)
    assert (dims.d, dims.w, dims.r) == (5, 85, 6)


def test_both_given_are_taken_as_given_even_past_the_constraint():
    dims = dimensions(ATLAS_N, ATLAS_H, b=26, d=6)
    assert dims.d == 6 and not dims.one_revolution and dims.max_depth == 5


@pytest.mark.parametrize("args, match", [
    ({"n": 686, "h": 139}, "give the block size"),
    ({"n": 686, "h": 139, "d": 6}, "no block fits 6 tracks"),
    ({"n": 686, "h": 139, "b": 687}, "does not fit a track"),
    ({"n": 686, "h": 139, "b": 0}, "does not fit a track"),
    ({"n": 686, "h": 139, "b": 8, "d": 0}, "at least one track"),
    ({"n": 0, "h": 139, "b": 8}, "N = 0"),
    ({"n": 686, "h": -1, "b": 8}, "H = -1"),
])
def test_impossible_requests_are_refused(args, match):
    with pytest.raises(ValueError, match=match):
        dimensions(**args)


tracks = st.integers(1, 2000)
skews = st.integers(0, 600)


@settings(max_examples=300)
@given(n=tracks, h=skews, b=st.integers(1, 2000), cyclic=st.booleans())
def test_max_depth_is_the_deepest_that_fits(n, h, b, cyclic):
    d = max_depth(n, h, b, cyclic)
    assert d == 0 or fits(n, h, b, d, cyclic)
    assert not fits(n, h, b, d + 1, cyclic)


@settings(max_examples=300)
@given(n=tracks, h=skews, d=st.integers(1, 40), cyclic=st.booleans())
def test_max_block_is_the_largest_that_fits(n, h, d, cyclic):
    try:
        b = max_block(n, h, d, cyclic)
    except ValueError:
        assert not fits(n, h, 1, d, cyclic)
        return
    assert b >= 1 and fits(n, h, b, d, cyclic) and not fits(n, h, b + 1, d, cyclic)
    assert max_depth(n, h, b, cyclic) >= d


@settings(max_examples=300)
@given(n=tracks, h=skews, b=st.integers(1, 2000))
def test_width_and_residual(n, h, b):
    if b > n:
        return
    dims = dimensions(n, h, b=b)
    assert dims.w * b + dims.r == n and 0 <= dims.r < b and dims.w >= 1
    assert dims.one_revolution and dims.d == dims.max_depth
    assert fits(n, h, b, dims.d, cyclic=True) <= fits(n, h, b, dims.d)  # the cyclic form is stricter
