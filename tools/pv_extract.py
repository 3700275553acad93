"""``trax pv extract DEVICE``: run black-box geometry extraction and show what was stored
(man page: trax-pv(8)). The measuring and storing is :func:`traxfs.volume.pv_geometry.extract_pv`;
this module is its report."""

from __future__ import annotations

import argparse
import sys

from traxfs.volume.pv_geometry import extract_pv
from traxfs.volume.registry import Registry


def run(a: argparse.Namespace, reg: Registry, out) -> None:
    from tqdm import tqdm

    bar = tqdm(total=0, unit="sector", unit_scale=True, desc="extract",
               disable=out.as_json or not sys.stderr.isatty())

    def progress(done: int, total: int) -> None:
        bar.total = total
        bar.update(done - bar.n)

    try:
        ex, geometry, group = extract_pv(reg, a.device, progress)
    finally:
        bar.close()
    doc = {"device": a.device, "vg": group, **ex.to_doc(), "stored": {"kind": geometry.kind, "source": geometry.source,
                                                                      "unit": geometry.unit}}
    out.emit(doc, lambda: _text(doc))


def _text(d: dict) -> str:
    where = f"volume group {d['vg']}" if d["vg"] else "its own metadata (unused physical volume)"
    cost = f"{d['probes']} probes in {d['seconds']:.2f} s"
    if d["kind"] == "flat":
        return (f"{d['device']}: no rotational structure: flat (track unit {d['stored']['unit']} bytes), "
                f"stored in {where}\n  {cost}")
    rows = [[str(i), str(z["first_lbn"]), str(z["first_track"]), str(z["sectors_per_track"]), str(z["tracks"]),
             str(z["cylinders"]), str(z["track_skew"]), str(z["cylinder_skew"])] for i, z in enumerate(d["zones"])]
    header = ["ZONE", "FIRST LBN", "FIRST TRACK", "N", "TRACKS", "CYLINDERS", "H", "CYL SKEW"]
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    table = ["  " + "  ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)) for r in [header, *rows]]
    return "\n".join([
        f"{d['device']}: zoned geometry extracted, stored in {where}",
        f"  {d['rpm']} RPM ({d['revolution_ms']:.4f} ms per revolution), {d['surfaces']} surfaces, "
        f"{len(d['zones'])} zones, {d['capacity']} sectors, {d['defects']} slipped defects",
        *table,
        f"  head switch {d['head_switch_ms']:.4f} ms, command overhead {d['overhead_ms']:.4f} ms",
        f"  seek: track-to-track {d['track_to_track_ms']:.3f} ms, average (outer zone) "
        f"{d['average_seek_ms']:.3f} ms, full stroke {d['full_stroke_ms']:.3f} ms",
        f"  {cost}",
    ])
