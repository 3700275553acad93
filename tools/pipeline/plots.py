"""The pipeline's figures (PNG, matplotlib's Agg backend: no display needed), drawn from the
report alone, so a saved ``report.json`` can be drawn again."""

from __future__ import annotations

from pathlib import Path


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(plt, fig, out: Path) -> Path:
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out


def _per_second(series: list, end: float) -> list[int]:
    """Records added in each second ``[s, s+1)`` of a cumulative ``(time, count)`` series."""
    out = [0] * (int(end) + 1)
    prev = 0
    for t, n in series:
        out[int(t)] += n - prev
        prev = n
    return out


def throughput(report: dict, out: Path) -> Path:
    """Records appended (all producers) and consumed by the stream over the run, per second,
    and the stream's lag (appended − consumed) in records."""
    plt = _plt()
    tl = report["timeline"]
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(8, 6), sharex=True)
    end = max(t for key in ("appended", "consumed") for t, _ in tl[key])
    for key, label in (("appended", "appended"), ("consumed", "consumed by the stream")):
        per_second = _per_second(tl[key], end)
        ax1.step(range(1, len(per_second) + 1), per_second, where="pre", label=label)
    for t, what in tl["marks"]:
        ax1.axvline(t, color="grey", ls=":", lw=1)
        ax1.annotate(what, (t, 0), rotation=90, fontsize=7, va="bottom")
    ax1.set_ylabel("records/s")
    ax1.legend()
    ax1.set_title("/queues/events: append and consume throughput")
    ax2.plot([t for t, _ in tl["lag"]], [n for _, n in tl["lag"]], color="tab:red")
    ax2.set_ylabel("lag (records)")
    ax2.set_xlabel("seconds since the producers started")
    return _save(plt, fig, out)


def query_bytes(report: dict, out: Path) -> Path:
    plt = _plt()
    qs = report["queries"]
    fig, ax = plt.subplots(figsize=(7, 4))
    labels = list(qs)
    width = 0.38
    for i, how in enumerate(("projection", "rows.csv")):
        ax.bar([k + (i - 0.5) * width for k in range(len(labels))],
               [qs[q][how]["volume_bytes_read"] / 2**20 for q in labels], width, label=how)
    ax.set_xticks(range(len(labels)), [f"{q} ({len(qs[q]['columns'])} columns)" for q in labels])
    ax.set_ylabel("MiB read from the volume")
    ax.set_title("/tables/lineitem: bytes read per query (Spark through the mount)")
    ax.legend()
    return _save(plt, fig, out)


def disk_time(report: dict, out: Path) -> Path:
    plt = _plt()
    scans = report["disks"]["scans"]
    parts = ("overhead", "seek", "rotation", "switches", "transfer")
    fig, ax = plt.subplots(figsize=(7, 4))
    bottom = [0.0] * len(scans)
    for p in parts:
        vals = [s[p] for s in scans.values()]
        ax.bar(list(scans), vals, bottom=bottom, label=p)
        bottom = [b + v for b, v in zip(bottom, vals, strict=True)]
    ax.set_ylabel("simulated disk time (ms, summed over disks)")
    ax.set_title("Scans of /tables/lineitem on simulated Atlas 10K III disks")
    ax.legend()
    return _save(plt, fig, out)


def minipage_map(report: dict, out: Path) -> Path:
    """Each minipage as a bar over the tracks it covers: one panel per disk, one row per column."""
    plt = _plt()
    d = report["disks"]
    cols = d["columns"]
    disks = sorted({m["disk"] for m in d["minipages"]})
    fig, axes = plt.subplots(len(disks), 1, figsize=(9, 1.6 + 1.4 * len(disks)), sharex=True, squeeze=False)
    cmap = plt.get_cmap("tab20")
    for ax, disk in zip(axes[:, 0], disks, strict=True):
        for m in d["minipages"]:
            if m["disk"] == disk:
                c = cols.index(m["column"])
                ax.broken_barh([(m["first_track"], m["last_track"] - m["first_track"] + 1)], (c - 0.4, 0.8),
                               color=cmap(c % 20))
        ax.set_ylabel(f"disk {disk}\ncolumn")
        ax.set_yticks(range(len(cols)), [str(i) for i in range(len(cols))], fontsize=6)
    axes[-1, 0].set_xlabel("track")
    axes[0, 0].set_title(f"/tables/lineitem minipages on the disks' tracks ({d['placement']})", fontsize=9)
    return _save(plt, fig, out)


def draw_all(report: dict, folder: Path) -> list[str]:
    folder.mkdir(parents=True, exist_ok=True)
    made = [throughput(report, folder / "throughput.png"), query_bytes(report, folder / "query_bytes.png")]
    if report.get("disks"):
        made += [disk_time(report, folder / "disk_time.png"), minipage_map(report, folder / "minipage_map.png")]
    return [str(p) for p in made]
