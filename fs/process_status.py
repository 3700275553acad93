"""What one process costs the machine, for ``/.trax/filesystem.json`` (the mount's server) and
the benchmarks (their tables print the server's peak memory): resident and virtual memory now,
resident memory at its peak, CPU time, threads and open descriptors.

The figures come from psutil, except the peak resident size, which psutil does not report on
Linux: that is the kernel's own high-water mark (``VmHWM`` in ``/proc/PID/status``), exact,
where sampling the resident size would miss short peaks.
"""

from __future__ import annotations

import psutil


def process_status(pid: int | None = None) -> dict:
    """The figures of process ``pid`` (this process if None). Raises ProcessLookupError naming
    the pid if there is no such process (or it ended meanwhile)."""
    try:
        p = psutil.Process(pid)
        with p.oneshot():
            mem = p.memory_info()
            cpu = p.cpu_times()
            return {"pid": p.pid, "rss_bytes": mem.rss, "peak_rss_bytes": max(mem.rss, _peak_rss(p.pid)),
                    "vms_bytes": mem.vms, "cpu_user_s": round(cpu.user, 3), "cpu_system_s": round(cpu.system, 3),
                    "threads": p.num_threads(), "open_fds": p.num_fds()}
    except (psutil.NoSuchProcess, FileNotFoundError, ProcessLookupError):
        raise ProcessLookupError(f"no process {pid} (it is not running, or it ended)") from None


def _peak_rss(pid: int) -> int:
    """The kernel's high-water mark of the resident size, bytes (0 where it does not keep one)."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return 0
