"""Quadrangle dimensions from a zone's track size N and track skew H (Atropos §3.2.1).

The goal is to read one ``b``-sector block from each of ``d`` adjacent tracks within one
revolution. Two forms of that constraint:

* **linear** ``d·b + (d−1)·H ≤ N``: the d blocks and the d−1 head switches between them fit in
  one track's worth of rotation. This is the form the paper's numbers fit (Maxtor Atlas 10K III,
  N = 686, H = 139: D = 5, b(D) = 26, R = 10 sectors = 1.5 %), so it is the default.
* **cyclic** ``d·(b + H) ≤ N``: also leaves room to switch from the last track back to the
  first, so a batch costs at most one revolution whichever block the disk's scheduler serves
  first (Atlas: D = 4, b(D) = 32, R = 2.0 %). The simulator shows what the linear form gives up.

Everything is in sectors; the functions are pure so the calculator can be checked against the
paper's numbers and by property tests.
"""

from __future__ import annotations

from dataclasses import dataclass


def fits(n: int, h: int, b: int, d: int, cyclic: bool = False) -> bool:
    """Whether ``d`` blocks of ``b`` sectors on adjacent tracks are read in one revolution (Eq. 1)."""
    if cyclic:
        return d * (b + h) <= n
    return d * b + (d - 1) * h <= n


def max_depth(n: int, h: int, b: int, cyclic: bool = False) -> int:
    """D: the deepest quadrangle for blocks of ``b`` sectors (Eq. 4; Eq. 2 is ``b = 1``)."""
    _check(n, h)
    if b < 1:
        raise ValueError(f"block of {b} sectors: it must hold at least one sector")
    return n // (b + h) if cyclic else (n + h) // (b + h)


def max_block(n: int, h: int, d: int, cyclic: bool = False) -> int:
    """The largest ``b`` for a quadrangle of depth ``d`` (Eq. 3); ValueError if none fits."""
    _check(n, h)
    if d < 1:
        raise ValueError(f"depth {d}: a quadrangle has at least one track")
    b = n // d - h if cyclic else (n - (d - 1) * h) // d
    if b < 1:
        raise ValueError(f"no block fits {d} tracks in one revolution (N = {n}, H = {h}); "
                         f"the deepest possible is {max_depth(n, h, 1, cyclic)}")
    return b


def _check(n: int, h: int) -> None:
    if n < 1 or h < 0:
        raise ValueError(f"N = {n}, H = {h}: a track holds at least one sector and the skew is not negative")


@dataclass(frozen=True)
class Dimensions:
    """A zone's quadrangle: ``d`` tracks deep, ``w`` blocks of ``b`` sectors wide.

    ``R = N − w·b`` sectors of every track are left unused; ``D`` is the deepest quadrangle that
    meets the one-revolution constraint for this ``b`` (``d`` may be chosen larger, which the
    paper's Appendix B shows costs extra revolutions).
    """

    n: int
    h: int
    b: int
    d: int
    cyclic: bool = False

    @property
    def w(self) -> int:
        return self.n // self.b

    @property
    def r(self) -> int:
        return self.n - self.w * self.b

    @property
    def residual_share(self) -> float:
        """Share of the zone's capacity that R wastes."""
        return self.r / self.n

    @property
    def max_depth(self) -> int:
        return max_depth(self.n, self.h, self.b, self.cyclic)

    @property
    def one_revolution(self) -> bool:
        return fits(self.n, self.h, self.b, self.d, self.cyclic)


def dimensions(n: int, h: int, b: int | None = None, d: int | None = None, cyclic: bool = False) -> Dimensions:
    """Quadrangle dimensions for a zone: give ``b`` (then ``d = D``), ``d`` (then ``b`` is the
    largest that fits), or both (taken as given, even past the constraint)."""
    _check(n, h)
    if b is None and d is None:
        raise ValueError("give the block size b, the depth d, or both")
    if b is None:
        b = max_block(n, h, d, cyclic)
    if b < 1 or b > n:
        raise ValueError(f"block of {b} sectors does not fit a track of {n}")
    if d is None:
        d = max_depth(n, h, b, cyclic)
        if d < 1:
            raise ValueError(f"a block of {b} sectors and a skew of {h} leave no depth in a track of {n}")
    if d < 1:
        raise ValueError(f"depth {d}: a quadrangle has at least one track")
    return Dimensions(n, h, b, d, cyclic)
