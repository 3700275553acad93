"""Rerun the Atropos paper's evaluation on the disk model and set each number beside the paper's.

    python -m traxfs.tools.bench_atropos [--out DIR] [--quick] [--only fig7,fig8,...]

Experiments (Schindler et al., FAST '04, §5; single Maxtor Atlas 10K III outer zone unless said,
p = 4 disks where the paper used four, every disk on its own simulated clock):

* ``fig7``  access efficiency vs I/O size: traxtent, quadrangle primary order, semi-sequential
  other-major order (d = 4), naïve, unaligned;
* ``fig8``  a random 8 KB fetch: contiguous, quadrangle d = 2 and 4, naïve;
* ``fig9``  response time vs I/O size for d = 1..6, simulated and analytic (Appendix A/B);
* ``table2`` quadrangle dimensions (N, H, D, b, w, R) per disk profile and Atlas zone;
* ``fig10`` TPC-H-like trace replay on 64 KB, 256 KB and track-sized stripe units;
* ``fig11`` LINEITEM on NSM, DSM and AtroposDB: Q1/Q6 scans and random record fetches;
* ``integrity`` a PAX table through a real quadrangle volume, read row- and column-major.

Prints one table — the paper's value (or "lost in the source"), the measured value, the
tolerance it is held to (or why it is not held) and the verdict — and writes ``report.json``
and ``fig7.png`` … ``fig11.png`` to ``--out`` (default ``work/atropos``). ``--quick`` uses fewer
samples and smaller tables (under a minute); the default run takes a few minutes. Exits 1 if a
held check fails, 2 on bad arguments. All timing is simulated; wall time only says how long the
run took.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..volume.disk.profiles import atlas10k3
from .atropos import plots
from .atropos.integrity import integrity
from .atropos.layout_table import format_rows, layout_table
from .atropos.replay import fig10
from .atropos.report import table
from .atropos.shore import fig11
from .atropos.single_disk import Result, fig7, fig8, fig9


@dataclass(frozen=True)
class Sizes:
    fig7_samples: int
    fig8_samples: int
    fig9_samples: int
    replay_scale: float  # TPC-H scale factor of the traces
    shore_scale: float  # LINEITEM scale factor
    fetches: int
    integrity_rows: int


QUICK = Sizes(60, 1000, 100, 0.05, 0.1, 1000, 20_000)
FULL = Sizes(400, 5000, 500, 1.0, 1.0, 4000, 100_000)


def experiments(sizes: Sizes) -> dict[str, Callable[[], Result]]:
    spec = atlas10k3()
    return {
        "fig7": lambda: fig7(spec, sizes.fig7_samples),
        "fig8": lambda: fig8(spec, sizes.fig8_samples),
        "fig9": lambda: fig9(spec, sizes.fig9_samples),
        "table2": layout_table,
        "fig10": lambda: fig10(spec, sizes.replay_scale),
        "fig11": lambda: fig11(spec, sizes.shore_scale, sizes.fetches),
        "integrity": lambda: integrity(spec, sizes.integrity_rows),
    }


def run(out: Path, sizes: Sizes, only: list[str] | None = None, log=print) -> dict:
    """Run the experiments, write report.json and the figures, return the report."""
    out.mkdir(parents=True, exist_ok=True)
    todo = experiments(sizes)
    report: dict = {"disk": "atlas10k3", "sizes": sizes.__dict__, "checks": [], "experiments": {}, "wall_s": {}}
    for name, experiment in todo.items():
        if only and name not in only:
            continue
        log(f"[{name}] ...", end="", flush=True)
        t0 = time.monotonic()
        result = experiment()
        wall = time.monotonic() - t0
        log(f" {wall:.1f} s")
        report["wall_s"][name] = round(wall, 2)
        report["checks"] += result.checks
        report["experiments"][name] = result.data
        if name in plots.FIGURES:
            plots.FIGURES[name](result.data, out / f"{name}.png")
    checks = report["checks"]
    report["held"] = sum(c.held for c in checks)
    report["failed"] = [f"{c.experiment}: {c.name}" for c in checks if c.passed is False]
    report["checks"] = [c.to_doc() for c in checks]
    (out / "report.json").write_text(json.dumps(report, indent=1, default=str) + "\n")
    report["table"] = table(checks)
    return report


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m traxfs.tools.bench_atropos", description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="work/atropos", help="folder for report.json and the PNGs (default work/atropos)")
    ap.add_argument("--quick", action="store_true", help="fewer samples, smaller tables (under a minute)")
    ap.add_argument("--only", help="comma-separated experiments: " + ", ".join(experiments(QUICK)))
    args = ap.parse_args(argv)
    only = args.only.split(",") if args.only else None
    unknown = sorted(set(only or ()) - set(experiments(QUICK)))
    if unknown:
        ap.error(f"unknown experiment(s): {', '.join(unknown)}")
    out = Path(args.out)
    t0 = time.monotonic()
    report = run(out, QUICK if args.quick else FULL, only, log=lambda *a, **k: print(*a, **k, file=sys.stderr))
    print(report["table"])
    rows = report["experiments"].get("table2", {}).get("rows")
    if rows:
        print("\nQuadrangle dimensions (Table 2; R% = R / N)\n" + format_rows(rows))
    n_fail = len(report["failed"])
    print(f"\n{report['held']} held checks: {report['held'] - n_fail} pass, {n_fail} fail; "
          f"{'quick' if args.quick else 'full'} run, {time.monotonic() - t0:.0f} s wall; "
          f"report.json and figures in {out}/")
    return 1 if n_fail else 0


if __name__ == "__main__":
    sys.exit(main())
