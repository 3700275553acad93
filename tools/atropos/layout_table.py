"""Table 2 of the paper (values lost in the source): quadrangle dimensions per disk and zone.

For each zone the calculator (:mod:`traxfs.volume.layout.params`) gives, in the linear form
``d·b + (d−1)·H ≤ N`` and the cyclic form ``d·(b + H) ≤ N``: the deepest quadrangle ``D`` for
one-sector blocks (Eq. 2), the largest block ``b`` at ``d = D`` (Eq. 3), the width
``w = ⌊N/b⌋`` and the residual ``R = N − w·b`` as a share of the track. The surviving text fixes
the Atlas 10K III outer zone (D = 5, b = 26, R = 1.5 %), says b stays below 10 and R below 1 %
for the other disks, and that a slightly smaller H would deepen the Atlas quadrangle.
"""

from __future__ import annotations

from dataclasses import replace

from ...volume.disk.geometry import Zone
from ...volume.disk.profiles import PROFILES, atlas10k3
from ...volume.layout.params import dimensions, max_depth
from .report import Check, near, shown
from .single_disk import Result


def row(disk: str, zone: int, z: Zone) -> dict:
    out: dict = {"disk": disk, "zone": zone, "N": z.sectors_per_track, "H": z.track_skew}
    for form, cyclic in (("linear", False), ("cyclic", True)):
        d = max_depth(z.sectors_per_track, z.track_skew, 1, cyclic)
        dims = dimensions(z.sectors_per_track, z.track_skew, d=d, cyclic=cyclic)
        out[form] = {"D": d, "b": dims.b, "w": dims.w, "R": dims.r, "R%": 100 * dims.residual_share}
    return out


def layout_table() -> Result:
    rows = [row(name, 0, make().zones[0]) for name, make in PROFILES.items()]
    rows += [row("atlas10k3", zi, z) for zi, z in enumerate(atlas10k3().zones) if zi > 0]
    atlas = rows[0]["linear"]
    others = [r["linear"] for r in rows[1:len(PROFILES)]]
    h136 = row("atlas10k3 with H = 136", 0, replace(atlas10k3().zones[0], track_skew=136))["linear"]
    checks: list[Check] = [
        near("table2", "Atlas 10K III outer zone: D (linear)", 5, atlas["D"], "", 0),
        near("table2", "Atlas 10K III outer zone: b at d = D", 26, atlas["b"], "sectors", 0),
        near("table2", "Atlas 10K III outer zone: R share", 1.5, atlas["R%"], "%", 0.05),
        shown("table2", "other profiles: largest b at d = D", "below 10", max(o["b"] for o in others), "sectors",
              "not held: the other profiles approximate data sheets"),
        shown("table2", "other profiles: largest R share", "below 1 %", max(o["R%"] for o in others), "%",
              "not held: the other profiles approximate data sheets"),
        shown("table2", "Atlas with H = 136: D", None, h136["D"], "", "reconstructed: 'with a smaller H, D grows'"),
    ]
    return Result(checks, {"rows": rows, "atlas_h136": h136})


def format_rows(rows: list[dict]) -> str:
    """The table as text: one line per disk zone, linear then cyclic form."""
    head = f"{'disk':<12} {'zone':>4} {'N':>4} {'H':>4} | {'D':>2} {'b':>3} {'w':>4} {'R':>3} {'R%':>5} | " \
           f"{'D':>2} {'b':>3} {'w':>4} {'R':>3} {'R%':>5}"
    lines = [f"{'':<27}| {'linear d·b+(d−1)H ≤ N':<22}| cyclic d(b+H) ≤ N", head]
    for r in rows:
        cells = [f"{f['D']:>2} {f['b']:>3} {f['w']:>4} {f['R']:>3} {f['R%']:>5.2f}" for f in (r["linear"], r["cyclic"])]
        lines.append(f"{r['disk']:<12} {r['zone']:>4} {r['N']:>4} {r['H']:>4} | {cells[0]} | {cells[1]}")
    return "\n".join(lines)
