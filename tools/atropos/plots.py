"""PNG figures of the reproduction, drawn from the experiments' data (the same numbers as
report.json), with the paper's surviving values marked where there are any."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (the backend must be chosen first)

PAPER_FIG8 = {"contiguous": 5.93, "quadrangle d=2": 5.93 * 1.16, "quadrangle d=4": 5.93 * 1.38}
PAPER_FIG11_FETCH = {"NSM": 5.76, "AtroposDB d=2, one-disk page": 6.56, "AtroposDB d=4, one-disk page": 8.32}


def _save(fig, path: Path) -> None:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def fig7(data: dict, path: Path) -> None:
    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    for name, pts in data["efficiency"].items():
        ax.plot([x for x, _ in pts], [e for _, e in pts], marker="o", ms=3, label=name)
    ax.axvline(data["track_kb"], color="grey", ls=":", lw=1, label="track (343 KB)")
    ax.axvline(data["one_revolution_cyclic_kb"], color="tab:green", ls=":", lw=1, label="one revolution, cyclic form")
    ax.axvline(data["one_revolution_kb"], color="tab:green", ls="--", lw=1, label="one revolution, linear form")
    ax.set(xlabel="I/O size (KB)", ylabel="access efficiency",
           title=f"Fig. 7: efficiency vs I/O size, Atlas 10K III outer zone (d = {data['d']})")
    ax.legend(fontsize=8)
    _save(fig, path)


def fig8(data: dict, path: Path) -> None:
    bars = data["bars_ms"]
    fig, ax = plt.subplots(figsize=(7, 4))
    names = list(bars)
    ax.bar(names, [bars[n] for n in names], color="tab:blue", label="model")
    xs = [i for i, n in enumerate(names) if n in PAPER_FIG8]
    ax.scatter(xs, [PAPER_FIG8[names[i]] for i in xs], color="tab:red", zorder=3, label="paper")
    for i, n in enumerate(names):
        ax.text(i, bars[n], f"{bars[n]:.2f}", ha="center", va="bottom", fontsize=8)
    ax.set(ylabel="response time (ms)", title="Fig. 8: random 8 KB fetch")
    ax.tick_params(axis="x", labelrotation=20, labelsize=8)
    ax.legend(fontsize=8)
    _save(fig, path)


def fig9(data: dict, path: Path) -> None:
    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    for d, curves in data["curves"].items():
        sim, model = curves["simulated"], curves["analytic"]
        line, = ax.plot([x for x, _ in sim], [t for _, t in sim], marker="o", ms=3, label=f"d = {d}")
        ax.plot([x for x, _ in model], [t for _, t in model], ls="--", color=line.get_color(), lw=1)
    ax.axhline(10.8, color="grey", ls=":", lw=1)
    ax.text(0, 10.9, "paper: >= 10.8 ms past D", color="grey", fontsize=8)
    ax.set(xlabel="I/O size S = d·b (KB)", ylabel="response time minus seek and overhead (ms)",
           title="Fig. 9: quadrangle access, simulated (solid) vs analytic (dashed)")
    ax.legend(fontsize=8, ncol=2)
    _save(fig, path)


def fig10(data: dict, path: Path) -> None:
    depths = list(data["speedup"])
    fig, axes = plt.subplots(len(depths), 1, figsize=(10, 3.2 * len(depths)), squeeze=False)
    for ax, depth in zip(axes[:, 0], depths, strict=True):
        s = data["speedup"][depth]
        qs = list(s)
        xs = range(len(qs))
        ax.bar([x - 0.2 for x in xs], [s[q]["Approximate-RAID"] for q in qs], 0.4, label="Approximate-RAID (256 KB)")
        ax.bar([x + 0.2 for x in xs], [s[q]["Atropos-RAID"] for q in qs], 0.4, label="Atropos-RAID (343 KB)")
        ax.axhline(1.0, color="grey", lw=1)
        ax.set_xticks(list(xs), qs, fontsize=8)
        ax.set(ylabel="speedup over 64K-RAID",
               title=f"Fig. 10: TPC-H-like trace replay, {depth} outstanding I/O(s) per disk")
        ax.legend(fontsize=8)
    _save(fig, path)


def _short(store: str) -> str:
    """Tick label: "AtroposDB d=4" is the page spread over the disks, ", one-disk page" on one."""
    if not store.startswith("AtroposDB"):
        return store
    d = store.split()[1].rstrip(",")
    return f"Atropos {d}\n({'1 disk' if 'one-disk' in store else '4 disks'})"


def fig11(data: dict, path: Path) -> None:
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    stores = ["NSM", "DSM", "AtroposDB d=4"]
    queries = list(data["scan_s"])
    for i, q in enumerate(queries):
        vals = [data["scan_s"][q][s] for s in stores]
        left.bar([j + 0.35 * i for j in range(len(stores))], vals, 0.35, label=q)
    left.set_xticks([j + 0.175 for j in range(len(stores))], stores)
    left.set(ylabel="scan time (s)", title=f"Fig. 11: LINEITEM scans ({data['rows']:,} rows)")
    left.legend(fontsize=8)
    fetch = data["fetch_s_per_1000"]
    names = list(fetch)
    right.bar(range(len(names)), [fetch[n] for n in names], color="tab:blue", label="model")
    xs = [i for i, n in enumerate(names) if n in PAPER_FIG11_FETCH]
    right.scatter(xs, [PAPER_FIG11_FETCH[names[i]] for i in xs], color="tab:red", zorder=3, label="paper")
    right.set_xticks(range(len(names)), [_short(n) for n in names], fontsize=8)
    right.set(ylabel="seconds per 1,000 records", title="random record fetches")
    right.legend(fontsize=8)
    _save(fig, path)


FIGURES = {"fig7": fig7, "fig8": fig8, "fig9": fig9, "fig10": fig10, "fig11": fig11}
