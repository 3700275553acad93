"""The ``trax`` command: one entry point, subcommands per object (LVM2's pv/vg/lv family).

Exit codes (also in man/trax.1): 0 success; 1 the request was refused or failed and nothing
was changed (the message says why and names the device or object); 2 bad command-line usage;
130 interrupted.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from collections.abc import Callable
from typing import NoReturn

from .. import __version__
from ..volume.disk.geometry import SECTOR
from ..volume.disk.profiles import PROFILES, profile, scaled
from ..volume.errors import UsageError, VolumeError
from ..volume.group import DEFAULT_EXTENT, GROUP, READ, USE, VolumeGroup, list_groups
from ..volume.group_survey import survey
from ..volume.label import erase_label
from ..volume.layout.params import dimensions, max_depth
from ..volume.locks import WRITE_HINT, device_lock
from ..volume.model import LAYOUTS, LogicalVolume, VolumeGroupMeta
from ..volume.registry import Registry
from ..volume.scan import pv_create, scan, scan_one
from .cli_types import SIZE_HELP, BadUsage, count, file_name, fraction, name, size, vg_lv
from .mounts import check_mountpoint
from .sizes import format_size

EXIT_OK, EXIT_FAIL, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130


class Output:
    """Tables and sentences for people, JSON (``--json``) for scripts: one JSON document on
    standard output per command, a result or ``{"error": ..., "exit_code": N}``."""

    def __init__(self, as_json: bool):
        self.as_json = as_json

    def emit(self, doc: object, text: Callable[[], str]) -> None:
        print(json.dumps(doc, indent=2, sort_keys=True) if self.as_json else text())

    def message(self, text: str, **doc: object) -> None:
        """A command's one-line result: the sentence, or with --json the fields and the sentence."""
        self.emit({**doc, "message": text}, lambda: text)

    def fail(self, text: str, code: int, prefix: str = "trax: error: ") -> int:
        """An error: the message on standard error, and with --json also on standard output."""
        print(f"{prefix}{text}", file=sys.stderr)
        if self.as_json:
            print(json.dumps({"error": text, "exit_code": code}, indent=2, sort_keys=True))
        return code


class _Parser(argparse.ArgumentParser):
    """argparse, with its usage errors handed to :func:`main` (which prints them, as JSON too
    when asked) instead of exiting from deep inside the parse."""

    def error(self, message: str) -> NoReturn:
        raise _UsageExit(self, message)


class _UsageExit(Exception):
    def __init__(self, parser: argparse.ArgumentParser, message: str):
        super().__init__(message)
        self.parser = parser


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
            model = scaled(model, a.cylinders_per_zone)
    elif a.cylinders_per_zone is not None:
        raise BadUsage("--cylinders-per-zone applies to simulated disks (--model)")
    docs, kind = [], f" on a simulated {model.name} disk" if model else ""
    for path in a.devices:
        label = pv_create(reg, path, size=a.size, unit=a.unit, model=model, force=a.force)
        docs.append({"device": path, "pv": label.pv_uuid, "model": model.name if model else None})
    out.emit(docs, lambda: "\n".join(f"{d['device']}: physical volume {d['pv']} created{kind}" for d in docs))


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
    with contextlib.ExitStack() as stack:
        if os.path.exists(a.device):
            stack.enter_context(device_lock(a.device, exclusive=True, hint=WRITE_HINT))
        sd = scan_one(a.device)
        try:
            if sd.label is None:
                raise UsageError(sd.error or f"{a.device}: not a traxfs physical volume")
            if not sd.orphan:
                raise UsageError(f"{a.device}: belongs to volume group {sd.vg_name!r}; a device cannot be taken "
                                 f"out of a group: 'trax vg remove {sd.vg_name}' (its volumes removed first) "
                                 "leaves all its devices unused")
            erase_label(sd.device, sd.label)
        finally:
            sd.close()
    reg.remove(a.device)
    out.message(f"{a.device}: label removed", device=a.device)


def cmd_pv_extract(a: argparse.Namespace, reg: Registry, out: Output) -> None:
    from .pv_extract import run

    run(a, reg, out)


# ----- vg -------------------------------------------------------------------------------------
def cmd_vg_create(a: argparse.Namespace, reg: Registry, out: Output) -> None:
    VolumeGroup.create(reg, a.name, a.devices, extent_size=a.extent_size, force=a.force)
    out.message(f"volume group {a.name} created on {len(a.devices)} device(s)", vg=a.name, devices=a.devices)


def _group_state(doc: dict) -> str:
    problems = [f"missing {p}" for p in doc["missing"]] + [f"stale {p}" for p in doc["stale"]]
    return doc["state"] + (f" ({'; '.join(problems)})" if problems else "")


def cmd_vg_list(a: argparse.Namespace, reg: Registry, out: Output) -> None:
    docs = [{**_vg_doc(g.meta), "state": g.state, "missing": g.missing, "stale": g.stale} for g in survey(reg)]
    rows = [[d["name"], str(len(d["devices"])), str(len(d["lvs"])), format_size(d["size"]), format_size(d["free"]),
             _group_state(d)] for d in docs]
    out.emit(docs, lambda: _table(rows, ["VG", "DEVICES", "LVS", "SIZE", "FREE", "STATE"]))


def cmd_vg_show(a: argparse.Namespace, reg: Registry, out: Output) -> None:
    with VolumeGroup.open(reg, a.name, partial=True, repair=True, hold=READ) as vg:
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
    with VolumeGroup.open(reg, a.name, hold=GROUP) as vg:
        vg.extend(a.devices, force=a.force)
    out.message(f"volume group {a.name} extended by {len(a.devices)} device(s)", vg=a.name, devices=a.devices)


def cmd_vg_rename(a: argparse.Namespace, reg: Registry, out: Output) -> None:
    with VolumeGroup.open(reg, a.name, hold=GROUP) as vg:
        vg.rename(a.new_name)
    out.message(f"volume group {a.name} renamed to {a.new_name}", vg=a.new_name, old_name=a.name)


def cmd_vg_remove(a: argparse.Namespace, reg: Registry, out: Output) -> None:
    with VolumeGroup.open(reg, a.name, hold=GROUP) as vg:
        vg.remove(force=a.force)
    out.message(f"volume group {a.name} removed; its devices are unused physical volumes again", vg=a.name)


def cmd_vg_repair(a: argparse.Namespace, reg: Registry, out: Output) -> None:
    with VolumeGroup.open(reg, a.name, partial=True, repair=True, hold=GROUP) as vg:
        fixed = vg.repair()
    out.emit({"repaired": fixed}, lambda: "\n".join(f"repaired: {f}" for f in fixed) or "nothing to repair")


def cmd_vg_replace(a: argparse.Namespace, reg: Registry, out: Output) -> None:
    with VolumeGroup.open(reg, a.name, partial=True, hold=GROUP) as vg:
        stale = vg.replace_pv(a.old, a.new, force=a.force)
    out.message(f"{a.new} replaces {a.old} in {a.name}; resync: {', '.join(stale) or 'nothing'}", vg=a.name,
                old=a.old, new=a.new, resync=stale)


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
    with VolumeGroup.open(reg, vg_name, partial=True, repair=True, hold=READ) as vg:
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
    out.message(f"logical volume {vg_name}/{lv_name} is now {format_size(size)}", vg=vg_name, lv=lv_name, size=size)


def cmd_lv_rename(a: argparse.Namespace, reg: Registry, out: Output) -> None:
    vg_name, lv_name = a.target
    with VolumeGroup.open(reg, vg_name) as vg:
        vg.rename_lv(lv_name, a.new_name)
    out.message(f"logical volume {vg_name}/{lv_name} renamed to {a.new_name}", vg=vg_name, lv=a.new_name,
                old_name=lv_name)


def cmd_lv_remove(a: argparse.Namespace, reg: Registry, out: Output) -> None:
    vg_name, lv_name = a.target
    with VolumeGroup.open(reg, vg_name) as vg:
        vg.remove_lv(lv_name)
    out.message(f"logical volume {vg_name}/{lv_name} removed", vg=vg_name, lv=lv_name)


def cmd_lv_resync(a: argparse.Namespace, reg: Registry, out: Output) -> None:
    from tqdm import tqdm

    vg_name, lv_name = a.target
    with VolumeGroup.open(reg, vg_name, partial=True, hold=USE) as vg:  # metadata locked only to commit
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
    from .expose import serve

    check_mountpoint(a.mountpoint)  # before the group is locked or anything opened
    vg_name, lv_name = a.target
    with VolumeGroup.open(reg, vg_name, partial=a.partial, hold=USE) as vg:
        for w in vg.warnings:
            print(f"warning: {w}", file=sys.stderr)
        lv = vg.open_lv(lv_name)
        path = os.path.join(a.mountpoint, a.name)
        doc = {"vg": vg_name, "lv": lv_name, "mountpoint": a.mountpoint, "file": path, "pid": os.getpid()}

        def ready() -> None:
            out.emit(doc, lambda: f"{vg_name}/{lv_name} exposed as {path}")
            sys.stdout.flush()

        serve(lv, a.mountpoint, a.name, allow_other=a.allow_other, ready=ready)


def cmd_demo(a: argparse.Namespace, reg: Registry, out: Output) -> None:
    from .demo import run_demo

    run_demo(a.workdir, scale=a.scale, master=a.master, as_json=out.as_json, volumes=a.volumes, size=a.size)


# ----- parser ---------------------------------------------------------------------------------
DEVICE_HELP = "a block device or an image file"
JSON_HELP = "print machine-readable JSON (results, and errors as {\"error\": ..., \"exit_code\": N})"


def _json_option() -> argparse.ArgumentParser:
    """``--json`` for every command, before or after its name: the value given anywhere wins
    (SUPPRESS keeps a sub-parser from resetting the top-level one)."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help=JSON_HELP)
    return common


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="trax", description="traxfs: volumes, filesystem and tools (see trax(1))")
    p.add_argument("--version", action="version", version=f"traxfs {__version__}")
    p.add_argument("--home", help="traxfs state folder: device list and locks (default $TRAX_HOME, "
                   "/var/lib/traxfs for root, ~/.local/share/traxfs otherwise)")
    p.add_argument("--json", action="store_true", help=JSON_HELP)
    common = [_json_option()]
    top = p.add_subparsers(dest="group", required=True, metavar="COMMAND")

    def sub(parent: argparse._SubParsersAction, name: str, fn: Callable, help: str) -> argparse.ArgumentParser:
        q = parent.add_parser(name, help=help, description=help, parents=common)
        q.set_defaults(fn=fn)
        return q

    def group(name: str, help: str) -> argparse._SubParsersAction:
        return top.add_parser(name, help=help, description=help, parents=common).add_subparsers(
            dest="action", required=True, metavar="ACTION")

    vg_name, lv_name = name("volume group"), name("logical volume")
    pv = group("pv", "physical volumes: label devices (trax-pv(8))")
    q = sub(pv, "create", cmd_pv_create, "label devices (or create sparse image files) as physical volumes")
    q.add_argument("devices", nargs="+", metavar="DEVICE", help=f"{DEVICE_HELP} (created with --size or --model)")
    q.add_argument("--size", type=size, help=f"create image files of this size; {SIZE_HELP}")
    q.add_argument("--unit", type=size, help="flat track unit for devices without geometry (default 256K); "
                   "a power of two of at least 4K")
    q.add_argument("--model", choices=sorted(PROFILES), help="create simulated disks of this model "
                   "(data in a sparse image, timing from the disk model)")
    q.add_argument("--cylinders-per-zone", type=count(1), metavar="K",
                   help="with --model: a smaller disk of the same model, K cylinders in every zone")
    q.add_argument("--force", action="store_true", help="label devices that hold something (a filesystem, a "
                   "traxfs label, another signature), destroying it; never a device in use")
    sub(pv, "list", cmd_pv_list, "list the registered devices and what they hold")
    q = sub(pv, "remove", cmd_pv_remove, "erase an unused physical volume's label")
    q.add_argument("device", help="the physical volume: " + DEVICE_HELP)
    q = sub(pv, "extract", cmd_pv_extract, "measure a device's geometry (zones, tracks, skews, defects, seek "
            "curve) by timing reads, and record it")
    q.add_argument("device", help="the physical volume to measure: " + DEVICE_HELP)

    vg = group("vg", "volume groups (trax-vg(8))")
    q = sub(vg, "create", cmd_vg_create, "create a volume group on devices")
    q.add_argument("name", type=vg_name, help="the new group's name (1-64 of A-Z a-z 0-9 _ . + -)")
    q.add_argument("devices", nargs="+", metavar="DEVICE", help=f"{DEVICE_HELP}, labelled if it is not yet")
    q.add_argument("--extent-size", type=size, default=DEFAULT_EXTENT,
                   help="physical extent size, a power of two of at least 1M (default 4M)")
    q.add_argument("--force", action="store_true", help="label devices that hold a filesystem or another "
                   "signature, destroying it; never a device in use or of another group")
    sub(vg, "list", cmd_vg_list, "list volume groups")
    q = sub(vg, "show", cmd_vg_show, "show a volume group, its devices and their state")
    q.add_argument("name", type=vg_name, help="the volume group")
    q = sub(vg, "extend", cmd_vg_extend, "add devices to a volume group")
    q.add_argument("name", type=vg_name, help="the volume group")
    q.add_argument("devices", nargs="+", metavar="DEVICE", help=f"{DEVICE_HELP} to add")
    q.add_argument("--force", action="store_true", help="label devices that hold a filesystem or another "
                   "signature, destroying it; never a device in use or of another group")
    q = sub(vg, "rename", cmd_vg_rename, "rename a volume group")
    q.add_argument("name", type=vg_name, help="the volume group")
    q.add_argument("new_name", type=vg_name, help="its new name")
    q = sub(vg, "remove", cmd_vg_remove, "remove a volume group")
    q.add_argument("name", type=vg_name, help="the volume group")
    q.add_argument("--force", action="store_true", help="also remove its logical volumes")
    q = sub(vg, "repair", cmd_vg_repair, "rewrite damaged or stale metadata copies from the newest")
    q.add_argument("name", type=vg_name, help="the volume group")
    q = sub(vg, "replace", cmd_vg_replace, "put a new device in the place of a missing one")
    q.add_argument("name", type=vg_name, help="the volume group")
    q.add_argument("old", help="the missing device: its last path or its PV uuid")
    q.add_argument("new", help="the replacement device or image file (labelled if needed)")
    q.add_argument("--force", action="store_true", help="label devices that hold a filesystem or another "
                   "signature, destroying it; never a device in use or of another group")

    lv = group("lv", "logical volumes (trax-lv(8))")
    target = {"type": vg_lv, "metavar": "VG/LV", "help": "the logical volume: its group's name and its own"}
    q = sub(lv, "create", cmd_lv_create, "create a logical volume")
    q.add_argument("target", **{**target, "help": "the new volume: an existing group's name and a new name"})
    q.add_argument("--size", type=size, required=True, help=f"the volume's size; {SIZE_HELP}")
    q.add_argument("--layout", choices=LAYOUTS, default="linear", help="how extents map to devices (default linear)")
    q.add_argument("--stripes", type=count(1), help="devices to stripe over (default: all, or half for a mirror)")
    q.add_argument("--stripe-unit", type=size, help="stripe unit, a power of two of at least 4K (striped: "
                   "default 64K; traxtent: the track)")
    q.add_argument("--mirror", action="store_true", help="keep two copies on disjoint devices (RAID-1)")
    q.add_argument("--pv", action="append", metavar="DEVICE", help="allocate only from these devices (repeatable)")
    q.add_argument("--zone", type=count(0), help="zoned layouts: the zone whose tracks the volume uses "
                   "(default 0, outer)")
    g = q.add_mutually_exclusive_group()
    g.add_argument("--block-size", type=size, help="quadrangle: bytes per VLBN, a multiple of 512 (default 4K); "
                   f"{SIZE_HELP}")
    g.add_argument("--vlbn-sectors", type=count(1), metavar="B", help="quadrangle: sectors per VLBN (b)")
    q.add_argument("--depth", type=count(1), metavar="D", help="quadrangle: tracks per quadrangle (default: the "
                   "deepest that is read in one revolution)")
    q.add_argument("--linear", action="store_true", help="quadrangle: default depth from the paper's form "
                   "d*b+(d-1)*H <= N instead of the cyclic d*(b+H) <= N (one revolution whichever block is "
                   "served first)")
    q = sub(lv, "list", cmd_lv_list, "list logical volumes")
    q.add_argument("vg", nargs="?", type=vg_name, help="only this volume group's volumes")
    q = sub(lv, "show", cmd_lv_show, "show a logical volume's layout and segments")
    q.add_argument("target", **target)
    q = sub(lv, "extend", cmd_lv_extend, "grow a logical volume")
    q.add_argument("target", **target)
    q.add_argument("--size", type=size, required=True, help=f"the new total size; {SIZE_HELP}")
    q = sub(lv, "rename", cmd_lv_rename, "rename a logical volume")
    q.add_argument("target", **target)
    q.add_argument("new_name", type=lv_name, help="its new name (1-64 of A-Z a-z 0-9 _ . + -)")
    q = sub(lv, "remove", cmd_lv_remove, "remove a logical volume")
    q.add_argument("target", **target)
    q = sub(lv, "resync", cmd_lv_resync, "copy a mirror's in-sync leg over its stale leg")
    q.add_argument("target", **target)
    q = sub(lv, "expose", cmd_lv_expose, "expose a logical volume as a file through FUSE (for fio, dd, losetup)")
    q.add_argument("target", **target)
    q.add_argument("mountpoint", help="an existing empty directory to mount on")
    q.add_argument("--name", type=file_name, default="volume",
                   help="the file's name inside the mount (default: volume)")
    q.add_argument("--partial", action="store_true", help="run a mirror degraded if a device is missing")
    q.add_argument("--allow-other", action="store_true", help="let other users reach the file")

    from .fs_commands import add_parsers

    add_parsers(top, sub)
    from .scrub_cmd import add_parser as add_scrub_parser

    add_scrub_parser(top, sub)
    from .queue_cmd import add_parser as add_queue_parser

    add_queue_parser(top, sub)
    from .snapshot_cmd import add_parser as add_snapshot_parser

    add_snapshot_parser(top, sub)
    from .table_cmd import add_parsers as add_table_parsers

    add_table_parsers(top, sub, common)

    q = sub(top, "demo", cmd_demo, "the main job: queue -> Spark streaming -> table -> queries -> replay on a "
            "quadrangle volume of simulated disks, fsck, a report with plots")
    q.add_argument("--workdir", default="work", help="folder for the disks, the mount and the report (default ./work; "
                   "replaced)")
    q.add_argument("--scale", type=fraction(0.01, 100), default=1.0,
                   help="sizes: 1.0 is 100,000 events and 100,000 LINEITEM rows (default 1.0)")
    q.add_argument("--master", help="Spark master (default local[2]; e.g. local-cluster[2,1,1024], spark://HOST:7077)")
    q.add_argument("--volumes", action="store_true", help="also one volume of each layout on image files driven by fio")
    q.add_argument("--size", type=size, default=1 << 30, help=f"with --volumes: size of each of the 4 image files "
                   f"(default 1G); {SIZE_HELP}")
    return p


def main(argv: list[str] | None = None) -> int:
    for stream in (sys.stdout, sys.stderr):  # paths with undecodable bytes are printed as they are
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="surrogateescape")
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser()
    try:
        a = parser.parse_args(argv)
    except _UsageExit as e:
        e.parser.print_usage(sys.stderr)
        return Output("--json" in argv).fail(str(e), EXIT_USAGE, prefix=f"{e.parser.prog}: error: ")
    out = Output(a.json)
    reg = Registry(a.home)
    from .fs_commands import FS_ERRORS

    try:
        rc = a.fn(a, reg, out)
        if isinstance(rc, int):
            return rc
    except BadUsage as e:
        return out.fail(str(e), EXIT_USAGE)
    except (VolumeError, *FS_ERRORS) as e:
        return out.fail(str(e), EXIT_FAIL)
    except KeyboardInterrupt:
        return out.fail("interrupted", EXIT_INTERRUPTED)
    except BrokenPipeError:  # `trax ... | head`: the reader left; that is not our failure
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
