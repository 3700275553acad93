"""Where the table's minipages sit on the disks, and what its scans cost the simulated disks.

Run after the mount stopped, on the same volume, in this process: the filesystem and its table
store opened on the quadrangle volume of simulated disks, whose devices keep per-request time
totals (``volume/simdevice.DiskStats``). For ``rows.csv`` and the projections Q1 and Q6 read, the
view is rendered whole (its minipage reads go to the disks, nothing cached) and the disks'
overhead, seek, rotation, head-switch and transfer time are taken before and after — simulated
milliseconds, summed over the disks, beside the volume clock's elapsed time (the disks work in
parallel). The map lists, per PAX page and column, the disk and the tracks its minipage covers.
"""

from __future__ import annotations

from ...fs.engine.page import PAGE_SIZE
from ...fs.filesystem import FileSystem
from ...fs.tables.render import ViewReader
from ...fs.tables.store import TableStore
from ...volume.disk.geometry import DiskGeometry
from ...volume.group import VolumeGroup
from ..atropos.lineitem import QUERY_ATTRIBUTES

PARTS = ("overhead", "seek", "rotation", "switches", "transfer")


def _totals(disks) -> dict[str, float]:
    out = {p: sum(getattr(d.stats, p) for d in disks) for p in PARTS}
    out["read_bytes"] = sum(d.stats.read_bytes for d in disks)
    return out


def analyse(registry, vg_name: str, lv_name: str, table_name: str = "lineitem") -> dict:
    with VolumeGroup.open(registry, vg_name) as vg:
        lv = vg.meta.lv(lv_name)
        olv = vg.open_lv(lv_name)
        devices = [vg.devices[pv] for pv in lv.pvs()]
        index = {d.path: i for i, d in enumerate(devices)}
        geoms = [DiskGeometry(d.spec) for d in devices]
        fs = FileSystem.open(olv)
        store = TableStore(fs.e)
        try:
            table = store.get(table_name.encode())
            names = [c.name for c in table.schema.columns]
            views = {"rows.csv": list(range(len(names)))}
            for q, cols in QUERY_ATTRIBUTES.items():
                views[f"{q} projection"] = [names.index(c) for c in cols]
            scans = {}
            for label, cols in views.items():
                before, t0 = _totals(devices), olv.clock.now
                reader = ViewReader(store, table, table.snapshot(), cols, "csv", label)
                reader.read(0, reader.size)
                after = _totals(devices)
                scans[label] = {"columns": len(cols), "elapsed_ms": round(olv.clock.now - t0, 2),
                                **{p: round(after[p] - before[p], 2) for p in PARTS},
                                "volume_bytes": after["read_bytes"] - before["read_bytes"]}
            placements = []
            for entry in table.pages:
                for col, mini in enumerate(entry.minis):
                    _vol, _at, pieces = store.io.raw.locate(entry.page * PAGE_SIZE + mini.offset, mini.length)
                    for _copy, device, dev_off, length, _within in pieces:
                        disk = index[device]
                        g = geoms[disk]
                        placements.append({"page": entry.page, "column": names[col], "disk": disk,
                                           "first_track": g.track_of(dev_off // 512),
                                           "last_track": g.track_of((dev_off + length - 1) // 512)})
            return {"table": table_name, "placement": store.placement(), "pax_pages": len(table.pages),
                    "columns": names, "scans": scans, "minipages": placements}
        finally:
            store.close()
            fs.close()
