"""Speed of the disk model's service loop: the compiled kernel against the Python reference.

    python -m traxfs.tools.bench_diskmodel [--requests 100000] [--model atlas10k3]

Replays the same random requests (sizes from one sector to a few tracks, the mix a trace replay
produces) through a SimulatedDisk twice, once with ``traxfs.ext.diskmodel`` and once with the
pure-Python ``Mechanics.reference_service``, checks that the simulated results are identical, and
prints wall time per request and the speed-up.
"""

from __future__ import annotations

import argparse
import random
import time

from ..volume.disk.mechanics import Mechanics
from ..volume.disk.profiles import PROFILES, profile
from ..volume.disk.simulator import SimulatedDisk


def replay(disk: SimulatedDisk, requests: list[tuple[int, int]]) -> tuple[float, float]:
    """(wall seconds, simulated completion time of the last request), closed loop."""
    t0 = time.perf_counter()
    end = 0.0
    for lbn, count in requests:
        end = disk.access(lbn, count, end).end
    return time.perf_counter() - t0, end


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--requests", type=int, default=100_000)
    p.add_argument("--model", choices=sorted(PROFILES), default="atlas10k3")
    a = p.parse_args(argv)
    spec = profile(a.model)
    rng = random.Random(1)
    cap = SimulatedDisk(spec).capacity
    requests = [(rng.randrange(cap - 2048), rng.choice((1, 16, 128, 512, 686, 2048))) for _ in range(a.requests)]
    fast = SimulatedDisk(spec)
    slow = SimulatedDisk(spec)
    slow.mechanics = Mechanics(slow.geometry, fast=False)
    t_fast, end_fast = replay(fast, requests)
    t_slow, end_slow = replay(slow, requests)
    if end_fast != end_slow:
        raise SystemExit(f"the kernels disagree: {end_fast} != {end_slow} ms")
    n = len(requests)
    print(f"{a.model}, {n} requests (simulated {end_fast / 1000:.1f} s of disk time)")
    print(f"  python reference  {t_slow * 1e6 / n:7.2f} us/request")
    print(f"  compiled kernel   {t_fast * 1e6 / n:7.2f} us/request")
    print(f"  speed-up          {t_slow / t_fast:7.1f}x")


if __name__ == "__main__":
    main()
