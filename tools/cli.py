"""The ``trax`` command: one entry point, subcommands per object (LVM2's pv/vg/lv family).

Exit codes (also in man/trax.1): 0 success; 1 the request was refused or failed and nothing
was changed (the message says why and names the device or object); 2 bad command-line usage;
130 interrupted.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable

from traxfs import __version__
from traxfs.tools.sizes import format_size, parse_size
from traxfs.volume.disk.geometry import SECTOR
from traxfs.volume.disk.profiles import PROFILES, profile, scaled
from traxfs.volume.errors import UsageError, VolumeError
from traxfs.volume.group import DEFAULT_EXTENT, VolumeGroup, list_groups
from traxfs.volume.label import erase_label
from traxfs.volume.layout.params import dimensions, max_depth
from traxfs.volume.model import LAYOUTS, LogicalVolume, VolumeGroupMeta, check_name
from traxfs.volume.registry import Registry
from traxfs.volume.scan import pv_create, scan, scan_one

EXIT_OK, EXIT_FAIL, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130


def _size(text: str) -> int:
    try:
        return parse_size(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _vg_lv(text: str) -> tuple[str, str]:
    vg, sep, lv = text.partition("/")
    if not sep or not vg or not lv:
        raise argparse.ArgumentTypeError(f"expected VG/LV, got {text!r}")
    return vg, lv


class Output:
    """Tables for people, JSON (``--json``) for scripts."""

    def __init__(self, as_json: bool):
        self.as_json = as_json

    def emit(self, doc: object, text: Callable[[], str]) -> None:
        print(json.dumps(doc, indent=2, sort_keys=True) if self.as_json else text())

    def message(self, text: str) -> None:
        if not self.as_json:
            print(text)


def _table(rows: list[list[str]], header: list[str]) -> str:
    rows = [header] + rows
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows)


def _indent(text: str) -> str:
    return "\n".join("  " + line for line in text.splitlines())


def _tracks_doc(lv: LogicalVolume) -> dict | None:
    """A zoned volume's track parameters, with what the calculator says of them (D, R)."""
    q = lv.quadrangle
    if q is None:
        return None
    dims = dimensions(q.sectors, q.skew, b=q.block, d=q.depth, cyclic=True)
    return {"zone": q.zone, "N": q.sectors, "H": q.skew, "p": lv.stripes, "w": q.width, "d": q.depth,
            "b": q.block, "D": dims.max_depth, "D_linear": max_depth(q.sectors, q.skew, q.block),
            "R": dims.r, "R_share": round(dims.residual_share, 4), "one_revolution": dims.one_revolution}


def _lv_doc(vg: VolumeGroupMeta, lv: LogicalVolume) -> dict:
    return {
        "name": lv.name, "vg": vg.name, "uuid": lv.uuid, "size": lv.size, "tracks": _tracks_doc(lv),
        "layout": lv.layout, "mirror": lv.mirrored, "stripes": lv.stripes, "stripe_unit": lv.stripe_unit,
        "legs": [{"state": leg.state, "segments": [
            {"first_extent": s.le, "extents": s.count,
             "areas": [{"device": vg.pv(a.pv).path, "pv": a.pv, "first_pe": a.pe} for a in s.areas]}
            for s in leg.segments]} for leg in lv.legs],
    }


def _vg_doc(vg: VolumeGroupMeta) -> dict:
    used = vg.used()
    return {
        "name": vg.name, "uuid": vg.uuid, "seq": vg.seq, "extent_size": vg.extent_size,
        "size": sum(p.pe_count for p in vg.pvs) * vg.extent_size, "free": vg.free_extents() * vg.extent_size,
        "devices": [{"path": p.path, "pv": p.uuid, "extents": p.pe_count,
                     "used_extents": sum(n for _, n in used[p.uuid]), "geometry": p.geometry.__dict__}
                    for p in vg.pvs],
        "lvs": [lv.name for lv in vg.lvs],
    }


# ----- pv -------------------------------------------------------------------------------------
def cmd_pv_create(a: argparse.Namespace, reg: Registry, out: Output) -> None:
    model = None
    if a.model is not None:
        model = profile(a.model)
        if a.cylinders_per_zone is not None:
            if a.cylinders_per_zone < 1:
                raise UsageError(f"--cylinders-per-zone must be at least 1 (got {a.cylinders_per_zone})")
            model = scaled(model, a.cylinders_per_zone)
    elif a.cylinders_per_zone is not None:
        raise UsageError("--cylinders-per-zone applies to simulated disks (--model)")
    for path in a.devices:
        label = pv_create(reg, path, size=a.size, unit=a.unit, model=model)
        kind = f" on a simulated {model.name} disk" if model else ""
        out.message(f"{path}: physical volume {label.pv_uuid} created{kind}")


def _pv_geometry(sd) -> dict | None:
    """The geometry recorded for a scanned device: its orphan metadata's, or its group's entry."""
    if sd.label is None or sd.copy is None:
        return None
    if sd.orphan:
        return sd.copy.doc.get("geometry")
    return next((p.get("geometry") for p in sd.copy.doc.get("pvs", []) if p.get("uuid") == sd.label.pv_uuid), None)


def cmd_pv_list(a: argparse.Namespace, reg: Registry, out: Output) -> None:
    rows, docs = [], []
    for sd in scan(reg):
        state = sd.error or ("unused" if sd.orphan else f"in {sd.vg_name}" if sd.vg_name else
                             "; ".join(sd.problems) or "no metadata")
        size = sd.device.size if sd.device else 0
        docs.append({"path": sd.path, "pv": sd.label.pv_uuid if sd.label else None, "size": size, "state": state,
                     "geometry": _pv_geometry(sd)})
        rows.append([sd.path, docs[-1]["pv"] or "-", format_size(size), state])
        sd.close()
    out.emit(docs, lambda: _table(rows, ["DEVICE", "PV", "SIZE", "STATE"]))


def cmd_pv_remove(a: argparse.Namespace, reg: Registry, out: Output) -> None:
    sd = scan_one(a.device)
    try:
        if sd.label is None:
            raise UsageError(sd.error or f"{a.device}: not a traxfs physical volume")
        if not sd.orphan:
            raise UsageError(f"{a.device}: belongs to volume group {sd.vg_name!r}; remove it from the group first")
        erase_label(sd.device, sd.label)
    finally:
        sd.close()
    reg.remove(a.device)
    out.message(f"{a.device}: label removed")


def cmd_pv_extract(a: argparse.Namespace, reg: Registry, out: Output) -> None:
    from traxfs.tools.pv_extract import run

    run(a, reg, out)


# ----- vg -------------------------------------------------------------------------------------
def cmd_vg_create(a: argparse.Namespace, reg: Registry, out: Output) -> None:
    VolumeGroup.create(reg, a.name, a.devices, extent_size=a.extent_size)
    out.message(f"volume group {a.name} created on {len(a.devices)} device(s)")


def cmd_vg_list(a: argparse.Namespace, reg: Registry, out: Output) -> None:
    groups = list_groups(reg)
    docs = [_vg_doc(g) for g in groups.values()]
    rows = [[d["name"], str(len(d["devices"])), str(len(d["lvs"])), format_size(d["size"]), format_size(d["free"])]
            for d in docs]
    out.emit(docs, lambda: _table(rows, ["VG", "DEVICES", "LVS", "SIZE", "FREE"]))


def cmd_vg_show(a: argparse.Namespace, reg: Registry, out: Output) -> None:
    with VolumeGroup.open(reg, a.name, partial=True, repair=True, lock=False) as vg:
        doc = _vg_doc(vg.meta)
        doc["warnings"] = vg.warnings
        doc["missing"] = [p.path for p in vg.meta.pvs if vg.devices.get(p.uuid) is None]

    def text() -> str:
        lines = [f"volume group {doc['name']}  uuid {doc['uuid']}  seq {doc['seq']}",
                 f"  size {format_size(doc['size'])}, free {format_size(doc['free'])}, "
                 f"extent {format_size(doc['extent_size'])}",
                 _indent(_table([[d["path"], str(d["extents"]), str(d["used_extents"]), d["geometry"]["kind"],
                                  format_size(d["geometry"]["unit"]), "missing" if d["path"] in doc["missing"] else "ok"]
                                 for d in doc["devices"]], ["DEVICE", "EXTENTS", "USED", "GEOMETRY", "UNIT", "STATE"])),
                 "  logical volumes: " + (", ".join(doc["lvs"]) or "none")]
        lines += [f"  warning: {w}" for w in doc["warnings"]]
        return "\n".join(lines)

    out.emit(doc, text)


def cmd_vg_extend(a: argparse.Namespace, reg: Registry, out: Output) -> None:
    with VolumeGroup.open(reg, a.name) as vg:
        vg.extend(a.devices)
    out.message(f"volume group {a.name} extended by {len(a.devices)} device(s)")


def cmd_vg_rename(a: argparse.Namespace, reg: Registry, out: Output) -> None:
    check_name("volume group", a.new_name)  # before it names a lock file
    with VolumeGroup.open(reg, a.name) as vg, reg.lock(f"vg-{a.new_name}", f"volume group {a.new_name}"):
        vg.rename(a.new_name)
    out.message(f"volume group {a.name} renamed to {a.new_name}")


def cmd_vg_remove(a: argparse.Namespace, reg: Registry, out: Output) -> None:
    with VolumeGroup.open(reg, a.name) as vg:
        vg.remove(force=a.force)
    out.message(f"volume group {a.name} removed; its devices are unused physical volumes again")


def cmd_vg_repair(a: argparse.Namespace, reg: Registry, out: Output) -> None:
    with VolumeGroup.open(reg, a.name, partial=True, repair=True) as vg:
        fixed = vg.repair()
    out.emit({"repaired": fixed}, lambda: "\n".join(f"repaired: {f}" for f in fixed) or "nothing to repair")


def cmd_vg_replace(a: argparse.Namespace, reg: Registry, out: Output) -> None:
    with VolumeGroup.open(reg, a.name, partial=True) as vg:
        stale = vg.replace_pv(a.old, a.new)
    out.message(f"{a.new} replaces {a.old} in {a.name}; resync: {', '.join(stale) or 'nothing'}")


# ----- lv -------------------------------------------------------------------------------------
def cmd_lv_create(a: argparse.Namespace, reg: Registry, out: Output) -> None:
    vg_name, lv_name = a.target
    with VolumeGroup.open(reg, vg_name) as vg:
        block = a.vlbn_sectors
        if a.block_size is not None:
            if a.block_size % SECTOR or not a.block_size:
                raise UsageError(f"block size {a.block_size} is not a positive multiple of {SECTOR} bytes")
            block = a.block_size // SECTOR
        lv = vg.create_lv(lv_name, a.size, a.layout, stripes=a.stripes, stripe_unit=a.stripe_unit,
                          mirror=a.mirror, pvs=a.pv, zone=a.zone, block=block, depth=a.depth, linear=a.linear)
        doc = _lv_doc(vg.meta, lv)
    out.emit(doc, lambda: f"logical volume {vg_name}/{lv_name} created: {format_size(doc['size'])}, "
             f"{doc['layout']}{' mirror' if doc['mirror'] else ''}, {doc['stripes']} stripe(s) of "
             f"{format_size(doc['stripe_unit'])}")


def cmd_lv_list(a: argparse.Namespace, reg: Registry, out: Output) -> None:
    groups = list_groups(reg)
    if a.vg and a.vg not in groups:
        raise UsageError(f"no volume group named {a.vg!r}")
    docs = [_lv_doc(g, lv) for g in groups.values() if not a.vg or g.name == a.vg for lv in g.lvs]
    rows = [[f"{d['vg']}/{d['name']}", format_size(d["size"]), d["layout"] + ("+mirror" if d["mirror"] else ""),
             str(d["stripes"]), format_size(d["stripe_unit"]), ",".join(leg["state"] for leg in d["legs"])]
            for d in docs]
    out.emit(docs, lambda: _table(rows, ["LV", "SIZE", "LAYOUT", "STRIPES", "UNIT", "LEGS"]))


def cmd_lv_show(a: argparse.Namespace, reg: Registry, out: Output) -> None:
    vg_name, lv_name = a.target
    with VolumeGroup.open(reg, vg_name, partial=True, repair=True, lock=False) as vg:
        doc = _lv_doc(vg.meta, vg.meta.lv(lv_name))

    def text() -> str:
        lines = [f"logical volume {vg_name}/{lv_name}  uuid {doc['uuid']}",
                 f"  size {format_size(doc['size'])}, layout {doc['layout']}{' (mirror)' if doc['mirror'] else ''}, "
                 f"p = {doc['stripes']}, stripe unit {format_size(doc['stripe_unit'])}"]
        t = doc["tracks"]
        if t is not None and doc["layout"] == "traxtent":
            lines.append(f"  zone {t['zone']} (N = {t['N']}, H = {t['H']}): whole tracks as stripe units "
                         "(tracks with a slipped defect skipped)")
        elif t is not None:
            lines.append(f"  zone {t['zone']} (N = {t['N']}, H = {t['H']}): p = {t['p']}, w = {t['w']}, d = {t['d']}, "
                         f"b = {t['b']} sectors, D = {t['D']} (linear form {t['D_linear']}), R = {t['R']} "
                         f"({t['R_share']:.1%})" + ("" if t["one_revolution"] else "; d > D: a semi-sequential "
                                                    "set takes more than one revolution"))
        for i, leg in enumerate(doc["legs"]):
            lines.append(f"  leg {i}: {leg['state']}")
            for s in leg["segments"]:
                areas = ", ".join(f"{x['device']}@{x['first_pe']}" for x in s["areas"])
                lines.append(f"    extents {s['first_extent']}..{s['first_extent'] + s['extents'] - 1}: {areas}")
        return "\n".join(lines)

    out.emit(doc, text)


def cmd_lv_extend(a: argparse.Namespace, reg: Registry, out: Output) -> None:
    vg_name, lv_name = a.target
    with VolumeGroup.open(reg, vg_name) as vg:
        lv = vg.extend_lv(lv_name, a.size)
        size = lv.size
    out.message(f"logical volume {vg_name}/{lv_name} is now {format_size(size)}")


def cmd_lv_rename(a: argparse.Namespace, reg: Registry, out: Output) -> None:
    vg_name, lv_name = a.target
    with VolumeGroup.open(reg, vg_name) as vg:
        vg.rename_lv(lv_name, a.new_name)
    out.message(f"logical volume {vg_name}/{lv_name} renamed to {a.new_name}")


def cmd_lv_remove(a: argparse.Namespace, reg: Registry, out: Output) -> None:
    vg_name, lv_name = a.target
    with VolumeGroup.open(reg, vg_name) as vg:
        vg.remove_lv(lv_name)
    out.message(f"logical volume {vg_name}/{lv_name} removed")


def cmd_lv_resync(a: argparse.Namespace, reg: Registry, out: Output) -> None:
    from tqdm import tqdm

    vg_name, lv_name = a.target
    with VolumeGroup.open(reg, vg_name, partial=True) as vg:
        bar = tqdm(total=0, unit="B", unit_scale=True, unit_divisor=1024, desc="resync",
                   disable=out.as_json or not sys.stderr.isatty())

        def progress(done: int, total: int) -> None:
            bar.total = total
            bar.update(done - bar.n)

        copied = vg.resync_lv(lv_name, progress)
        bar.close()
    out.emit({"copied": copied}, lambda: f"{vg_name}/{lv_name}: {format_size(copied) if copied else 'already in sync'}"
             + (" copied; every leg in sync" if copied else ""))


def cmd_lv_expose(a: argparse.Namespace, reg: Registry, out: Output) -> None:
    from traxfs.tools.expose import serve

    vg_name, lv_name = a.target
    with VolumeGroup.open(reg, vg_name, partial=a.partial) as vg:
        for w in vg.warnings:
            print(f"warning: {w}", file=sys.stderr)
        lv = vg.open_lv(lv_name)
        path = os.path.join(a.mountpoint, a.name)
        serve(lv, a.mountpoint, a.name, allow_other=a.allow_other,
              ready=lambda: print(f"{vg_name}/{lv_name} exposed as {path}", flush=True))


def cmd_demo(a: argparse.Namespace, reg: Registry, out: Output) -> None:
    from traxfs.tools.demo import run_demo

    run_demo(a.workdir, size=a.size, as_json=out.as_json, rows=a.rows, volumes=a.volumes)


# ----- parser ---------------------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="trax", description="traxfs: volumes, filesystem and tools (see trax(1))")
    p.add_argument("--version", action="version", version=f"traxfs {__version__}")
    p.add_argument("--home", help="traxfs state folder: device list and locks (default $TRAX_HOME, "
                   "/var/lib/traxfs for root, ~/.local/share/traxfs otherwise)")
    p.add_argument("--json", action="store_true", help="print machine-readable JSON")
    top = p.add_subparsers(dest="group", required=True, metavar="COMMAND")

    def sub(parent: argparse._SubParsersAction, name: str, fn: Callable, help: str) -> argparse.ArgumentParser:
        q = parent.add_parser(name, help=help, description=help)
        q.set_defaults(fn=fn)
        return q

    pv = top.add_parser("pv", help="physical volumes: label devices (trax-pv(8))").add_subparsers(
        dest="action", required=True, metavar="ACTION")
    q = sub(pv, "create", cmd_pv_create, "label devices (or create sparse image files) as physical volumes")
    q.add_argument("devices", nargs="+", metavar="DEVICE")
    q.add_argument("--size", type=_size, help="create image files of this size (e.g. 1G)")
    q.add_argument("--unit", type=_size, help="flat track unit for devices without geometry (default 256K)")
    q.add_argument("--model", choices=sorted(PROFILES), help="create simulated disks of this model "
                   "(data in a sparse image, timing from the disk model)")
    q.add_argument("--cylinders-per-zone", type=int, metavar="K",
                   help="with --model: a smaller disk of the same model, K cylinders in every zone")
    sub(pv, "list", cmd_pv_list, "list the registered devices and what they hold")
    q = sub(pv, "remove", cmd_pv_remove, "erase an unused physical volume's label")
    q.add_argument("device")
    q = sub(pv, "extract", cmd_pv_extract, "measure a device's geometry (zones, tracks, skews, defects, seek "
            "curve) by timing reads, and record it")
    q.add_argument("device")
    q.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="print machine-readable JSON")

    vg = top.add_parser("vg", help="volume groups (trax-vg(8))").add_subparsers(dest="action", required=True,
                                                                               metavar="ACTION")
    q = sub(vg, "create", cmd_vg_create, "create a volume group on devices")
    q.add_argument("name")
    q.add_argument("devices", nargs="+", metavar="DEVICE")
    q.add_argument("--extent-size", type=_size, default=DEFAULT_EXTENT, help="physical extent size (default 4M)")
    sub(vg, "list", cmd_vg_list, "list volume groups")
    q = sub(vg, "show", cmd_vg_show, "show a volume group, its devices and their state")
    q.add_argument("name")
    q = sub(vg, "extend", cmd_vg_extend, "add devices to a volume group")
    q.add_argument("name")
    q.add_argument("devices", nargs="+", metavar="DEVICE")
    q = sub(vg, "rename", cmd_vg_rename, "rename a volume group")
    q.add_argument("name")
    q.add_argument("new_name")
    q = sub(vg, "remove", cmd_vg_remove, "remove a volume group")
    q.add_argument("name")
    q.add_argument("--force", action="store_true", help="also remove its logical volumes")
    q = sub(vg, "repair", cmd_vg_repair, "rewrite damaged or stale metadata copies from the newest")
    q.add_argument("name")
    q = sub(vg, "replace", cmd_vg_replace, "put a new device in the place of a missing one")
    q.add_argument("name")
    q.add_argument("old", help="the missing device: its last path or its PV uuid")
    q.add_argument("new", help="the replacement device or image file (labelled if needed)")

    lv = top.add_parser("lv", help="logical volumes (trax-lv(8))").add_subparsers(dest="action", required=True,
                                                                                 metavar="ACTION")
    q = sub(lv, "create", cmd_lv_create, "create a logical volume")
    q.add_argument("target", type=_vg_lv, metavar="VG/LV")
    q.add_argument("--size", type=_size, required=True)
    q.add_argument("--layout", choices=LAYOUTS, default="linear")
    q.add_argument("--stripes", type=int, help="devices to stripe over (default: all, or half for a mirror)")
    q.add_argument("--stripe-unit", type=_size, help="stripe unit (striped: default 64K; traxtent: the track)")
    q.add_argument("--mirror", action="store_true", help="keep two copies on disjoint devices (RAID-1)")
    q.add_argument("--pv", action="append", metavar="DEVICE", help="allocate only from these devices")
    q.add_argument("--zone", type=int, help="zoned layouts: the zone whose tracks the volume uses (default 0, outer)")
    g = q.add_mutually_exclusive_group()
    g.add_argument("--block-size", type=_size, help="quadrangle: bytes per VLBN, a multiple of 512 (default 4K)")
    g.add_argument("--vlbn-sectors", type=int, metavar="B", help="quadrangle: sectors per VLBN (b)")
    q.add_argument("--depth", type=int, metavar="D", help="quadrangle: tracks per quadrangle (default: the "
                   "deepest that is read in one revolution)")
    q.add_argument("--linear", action="store_true", help="quadrangle: default depth from the paper's form "
                   "d*b+(d-1)*H <= N instead of the cyclic d*(b+H) <= N (one revolution whichever block is "
                   "served first)")
    q = sub(lv, "list", cmd_lv_list, "list logical volumes")
    q.add_argument("vg", nargs="?")
    q = sub(lv, "show", cmd_lv_show, "show a logical volume's layout and segments")
    q.add_argument("target", type=_vg_lv, metavar="VG/LV")
    q = sub(lv, "extend", cmd_lv_extend, "grow a logical volume")
    q.add_argument("target", type=_vg_lv, metavar="VG/LV")
    q.add_argument("--size", type=_size, required=True, help="the new total size")
    q = sub(lv, "rename", cmd_lv_rename, "rename a logical volume")
    q.add_argument("target", type=_vg_lv, metavar="VG/LV")
    q.add_argument("new_name")
    q = sub(lv, "remove", cmd_lv_remove, "remove a logical volume")
    q.add_argument("target", type=_vg_lv, metavar="VG/LV")
    q = sub(lv, "resync", cmd_lv_resync, "copy a mirror's in-sync leg over its stale leg")
    q.add_argument("target", type=_vg_lv, metavar="VG/LV")
    q = sub(lv, "expose", cmd_lv_expose, "expose a logical volume as a file through FUSE (for fio, dd, losetup)")
    q.add_argument("target", type=_vg_lv, metavar="VG/LV")
    q.add_argument("mountpoint")
    q.add_argument("--name", default="volume", help="the file's name inside the mount (default: volume)")
    q.add_argument("--partial", action="store_true", help="run a mirror degraded if a device is missing")
    q.add_argument("--allow-other", action="store_true", help="let other users reach the file")

    from traxfs.tools.fs_commands import add_parsers

    add_parsers(top, sub, _size)
    from traxfs.tools.scrub_cmd import add_parser as add_scrub_parser

    add_scrub_parser(top, sub)

    q = sub(top, "demo", cmd_demo, "the main job: a volume on image files, mkfs, mount, fio and a Spark job "
            "through the mount, unmount, fsck, a report")
    q.add_argument("--workdir", default="work", help="folder for the image files (default ./work)")
    q.add_argument("--size", type=_size, default=1 << 30, help="size of each of the 4 image files (default 1G)")
    q.add_argument("--rows", type=int, default=200_000, help="rows per Spark data set (default 200000)")
    q.add_argument("--volumes", action="store_true", help="first, one volume of each layout driven by fio")
    return p


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    a = parser.parse_args(argv)
    out = Output(a.json)
    reg = Registry(a.home)
    from traxfs.tools.fs_commands import FS_ERRORS

    try:
        rc = a.fn(a, reg, out)
        if isinstance(rc, int):
            return rc
    except (VolumeError, *FS_ERRORS) as e:
        print(f"trax: error: {e}", file=sys.stderr)
        return EXIT_FAIL
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # `trax ... | head`: the reader left; that is not our failure
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
