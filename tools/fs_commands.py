"""`trax mkfs`, `trax mount`, `trax umount`, `trax fsck`, `trax resize` (man pages: trax-mkfs(8),
trax-mount(8), trax-umount(8), trax-fsck(8), trax-resize(8)).

``trax mount`` runs as a daemon by default: it starts ``trax mount --foreground`` as a new
session with its output in a log file, waits until the mount is live (the server writes its
pidfile then), and exits 0 — or prints the log's tail and exits 1 if the server failed.
``trax umount`` unmounts and waits for the server to finish its clean shutdown, so that when it
returns the filesystem is closed and the device free.
"""

from __future__ import annotations

import argparse
import hashlib
import logging
import os
import subprocess
import sys
import time
from pathlib import Path

from ..fs.engine.superblock import SuperblockError
from ..fs.errors import FsError, NotTraxfs
from ..volume.errors import UsageError, VolumeError
from ..volume.locks import WRITE_HINT
from ..volume.overlay import OverlayDevice
from ..volume.registry import Registry
from ..volume.signature import PV_KIND, describe, identify, refuse_unless_forced, wipe_leftovers
from .cli_types import SIZE_HELP, BadUsage, seconds, size
from .fs_target import open_target
from .mount_options import parse_mount_options
from .mounts import (
    absolute,
    check_mountpoint,
    find_mount,
    fuse_descriptors,
    fuse_servers,
    fusermount,
    probe,
    shown,
)
from .sizes import format_size

FS_ERRORS = (FsError, NotTraxfs, SuperblockError)


def _pidfile(reg: Registry, mountpoint: str) -> Path:
    key = hashlib.sha1(os.fsencode(absolute(mountpoint))).hexdigest()[:16]
    return reg.home / "mounts" / f"{key}.pid"


def cmd_mkfs(a: argparse.Namespace, reg: Registry, out) -> None:
    from ..fs.filesystem import FileSystem

    created = a.size is not None and not os.path.exists(a.target)
    try:
        with open_target(reg, a.target, create_size=a.size if created else None, hint=WRITE_HINT) as (dev, info):
            path = None if info["kind"] == "logical volume" else info["target"]
            found = [] if created else identify(dev, a.target, path)
            refuse_unless_forced(a.target, found, a.force)  # nothing is written before this
            grown_from = _apply_size(a, dev, info) if a.size is not None and not created else None
            try:
                uid = FileSystem.mkfs(dev, log_size=a.log_size, label=a.label or "", where=a.target)
            except BaseException as e:
                if grown_from is not None:  # refused: the image stays as it was
                    os.ftruncate(dev.fd, grown_from)
                if isinstance(e, ValueError):  # the size, log size or label do not fit; names the target
                    raise VolumeError(str(e)) from None
                raise
            if found:
                wipe_leftovers(dev, a.target, path)
                dev.flush()
                if path is not None and any(f.kind == PV_KIND for f in found):
                    reg.remove(path)  # a filesystem now, no longer a physical volume to scan
    except BaseException:
        if created:
            Path(a.target).unlink(missing_ok=True)  # a failed mkfs leaves no new image behind
        raise
    out.emit({"uuid": uid, **info}, lambda: f"{shown(a.target)}: traxfs created ({format_size(info['size'])}, "
             f"uuid {uid})" + (f"; it held: {describe(found)}" if found else ""))


def _apply_size(a: argparse.Namespace, dev, info: dict) -> int | None:
    """``--size`` on an existing target: an image file grows to it (returns its old size, for
    undoing); a smaller size or another kind of target is refused, changing nothing."""
    if info["kind"] != "image file":
        raise BadUsage(f"{shown(a.target)}: --size applies to image files, and this is a {info['kind']}")
    if a.size < dev.size:
        raise VolumeError(f"{shown(a.target)}: the image is {format_size(dev.size)}, larger than --size "
                          f"{format_size(a.size)}; mkfs does not shrink an image: delete it first, or leave out --size")
    if a.size == dev.size:
        return None
    old = dev.size
    os.ftruncate(dev.fd, a.size)
    dev.size = info["size"] = a.size
    return old


def cmd_mount(a: argparse.Namespace, reg: Registry, out) -> None:
    check_mountpoint(a.mountpoint)
    try:
        opts = parse_mount_options(a.options or "")
    except ValueError as e:
        raise BadUsage(str(e)) from None
    if opts.home is not None:
        raise BadUsage("-o home=DIR is for mount.fuse.traxfs; trax mount takes --home DIR")
    if opts.commit_interval is not None:
        a.commit_interval = opts.commit_interval
    a.allow_other = a.allow_other or opts.allow_other
    pidfile = Path(a.pidfile) if a.pidfile else _pidfile(reg, a.mountpoint)
    if a.foreground:
        return _serve_foreground(a, reg, pidfile, out)
    logfile = Path(a.log) if a.log else pidfile.with_suffix(".log")
    pidfile.parent.mkdir(parents=True, exist_ok=True)
    pidfile.unlink(missing_ok=True)
    argv = [sys.executable, "-m", "traxfs.tools.cli", "--home", str(reg.home), "mount", "--foreground",
            a.target, a.mountpoint, "--pidfile", str(pidfile), "--commit-interval", str(a.commit_interval)]
    if a.options:
        argv += ["-o", a.options]
    if a.allow_other:
        argv.append("--allow-other")
    if a.partial:
        argv.append("--partial")
    with open(logfile, "ab") as log:
        start = log.tell()  # the log is appended to: this attempt's lines begin here
        child = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True)
    what = f"mount of {shown(a.target)} on {shown(a.mountpoint)}"
    deadline = time.monotonic() + a.timeout
    while time.monotonic() < deadline:
        if child.poll() is not None:
            raise VolumeError(f"{what} failed: {_log_since(logfile, start)}")
        if pidfile.exists() and find_mount(a.mountpoint) is not None:
            out.emit({"target": a.target, "mountpoint": a.mountpoint, "pid": child.pid, "log": str(logfile)},
                     lambda: f"{shown(a.target)} mounted on {shown(a.mountpoint)} (pid {child.pid}, "
                     f"log {shown(str(logfile))})")
            return None
        time.sleep(0.05)
    child.terminate()
    raise VolumeError(f"{what}: not live after {a.timeout:g} s (log: {shown(str(logfile))})")


def _log_since(logfile: Path, start: int, lines: int = 5) -> str:
    """The last ``lines`` lines the server wrote from offset ``start`` on (its own error line
    without the ``trax: error:`` prefix), joined for a one-line message."""
    with open(logfile, "rb") as f:
        f.seek(start)
        text = f.read().decode("utf-8", "backslashreplace")
    tail = [line.removeprefix("trax: error: ") for line in text.strip().splitlines()[-lines:]]
    return " / ".join(tail) or "the server exited without a message"


def _serve_foreground(a: argparse.Namespace, reg: Registry, pidfile: Path, out) -> None:
    from ..fs.fuse.mount import serve

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    log = logging.getLogger("traxfs.mount")

    # the pidfile asked for, and always the one `trax umount` finds by the mount point
    pidfiles = {pidfile, _pidfile(reg, a.mountpoint)}

    def ready() -> None:
        for pf in pidfiles:
            pf.parent.mkdir(parents=True, exist_ok=True)
            tmp = pf.with_suffix(".tmp")
            tmp.write_text(f"{os.getpid()}\n")
            os.replace(tmp, pf)
        log.info("%s mounted on %s (pid %d)", a.target, a.mountpoint, os.getpid())
        out.emit({"target": a.target, "mountpoint": a.mountpoint, "pid": os.getpid()},
                 lambda: f"{a.target} mounted on {a.mountpoint}")
        sys.stdout.flush()

    try:
        with open_target(reg, a.target, partial=a.partial) as (dev, info):
            opts = parse_mount_options(a.options or "")
            serve(dev, a.mountpoint, source=f"traxfs:{info['target']}", where=a.target, allow_other=a.allow_other,
                  commit_interval=a.commit_interval, volume_info=lambda: {**info, "read_only": opts.read_only},
                  ready=ready, read_only=opts.read_only, flags=frozenset(opts.flags))
        log.info("%s unmounted from %s; filesystem closed cleanly", a.target, a.mountpoint)
    finally:
        for pf in pidfiles:
            pf.unlink(missing_ok=True)


def cmd_umount(a: argparse.Namespace, reg: Registry, out) -> None:
    """Unmount, then wait until the server has exited. The server is found from the kernel (any
    TRAX_HOME), else from this home's pidfile; a mount whose server died is just removed."""
    mp = a.mountpoint
    entry = find_mount(mp)
    if entry is None:
        raise VolumeError(f"{shown(mp)}: not mounted")
    if not entry.is_traxfs:
        raise VolumeError(f"{shown(mp)}: not a traxfs mount ({entry.fstype} {shown(entry.source)}); "
                          "use umount(8) or fusermount3 -u")
    dead = probe(mp) == "dead"
    servers = set() if dead else fuse_servers(entry) or _pidfile_server(reg, mp)
    r = fusermount(mp)
    lazy = False
    if r.returncode != 0 and dead:  # a dead mount that is busy: detach it now, it goes when released
        lazy, r = True, fusermount(mp, lazy=True)
    if r.returncode != 0:
        raise VolumeError(f"{shown(mp)}: cannot unmount: {(r.stderr or r.stdout).strip()}")
    doc = {"mountpoint": mp, "pid": min(servers) if servers else None, "dead": dead, "lazy": lazy}
    if dead:
        out.emit(doc, lambda: f"{shown(mp)}: removed the dead mount of a server that had died"
                 f"{' (detached lazily: still in use)' if lazy else ''}; the next mount recovers "
                 f"{shown(entry.source.removeprefix('traxfs:'))} from its log")
        return
    if not servers:
        raise VolumeError(f"{shown(mp)}: unmounted, but its server could not be found to wait for its clean close "
                          f"(no pidfile in {shown(str(reg.home))}, and this kernel does not name FUSE connections "
                          "in /proc/PID/fdinfo); check that it has exited before using "
                          f"{shown(entry.source.removeprefix('traxfs:'))}")
    deadline = time.monotonic() + a.timeout
    while (running := {p for p in servers if _alive(p)}) and time.monotonic() < deadline:
        time.sleep(0.05)
    if running:
        raise VolumeError(f"{shown(mp)}: unmounted, but the server (pid {min(running)}) has not finished closing "
                          f"after {a.timeout:g} s")
    out.emit(doc, lambda: f"{shown(mp)} unmounted")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _pidfile_server(reg: Registry, mountpoint: str) -> set[int]:
    """The server named by this home's pidfile for ``mountpoint``, if that process still holds
    /dev/fuse open (a stale pidfile may name a reused PID)."""
    try:
        pid = int(_pidfile(reg, mountpoint).read_text().strip())
    except (OSError, ValueError):
        return set()
    return {pid} if fuse_descriptors(pid) else set()


def cmd_fsck(a: argparse.Namespace, reg: Registry, out) -> int:
    from ..fs.engine.page import PageCorrupt
    from ..fs.fsck import EXIT_OPERATIONAL, check_device

    try:
        with open_target(reg, a.target, partial=a.partial) as (dev, _):
            rep = check_device(dev, repair=a.repair, where=a.target)
    except FS_ERRORS + (VolumeError, PageCorrupt) as e:
        return out.fail(str(e), EXIT_OPERATIONAL, prefix="trax fsck: ")
    except Exception as e:  # noqa: BLE001  (a bug: say so in one line, never a traceback)
        return out.fail(f"{a.target}: the check stopped on an internal error: {type(e).__name__}: {e}",
                        EXIT_OPERATIONAL, prefix="trax fsck: ")

    def text() -> str:
        lines = [f"{a.target}: {rep.counts['inodes']} inodes, {rep.counts['entries']} entries, "
                 f"{rep.counts['data_pages']} data pages"]
        lines += [f"note: {t}" for t in rep.notes]
        lines += [f"repaired: {t}" for t in rep.repaired]
        lines += [f"PROBLEM: {t}" for t in rep.problems]
        lines.append("clean" if rep.exit_code == 0 else
                     "errors corrected" if rep.exit_code == 1 else "errors left uncorrected")
        return "\n".join(lines)

    out.emit(rep.as_dict(), text)
    if rep.problems and not a.repair:
        print(f"trax fsck: run 'trax fsck --repair {a.target}' to repair what can be", file=sys.stderr)
    return rep.exit_code


def cmd_resize(a: argparse.Namespace, reg: Registry, out) -> None:
    from ..fs.engine.resize import ResizeRefused, grow
    from ..fs.filesystem import FileSystem

    with open_target(reg, a.target, hint=WRITE_HINT) as (dev, _):
        # a look first (on a memory overlay): only a healthy traxfs is grown
        FileSystem.open(OverlayDevice(dev), where=a.target).crash()
        try:
            before, after = grow(dev, a.size, name=a.target)
        except ResizeRefused as e:
            raise UsageError(str(e)) from None
    doc = {"target": a.target, "old_size": before.end, "new_size": after.end,
           "pages_added": after.page_count - before.page_count}
    if after.page_count == before.page_count:
        out.emit(doc, lambda: f"{a.target}: the filesystem already fills {format_size(after.end)} of its device; "
                              "nothing to do (grow the device first: truncate -s, or trax lv extend)")
    else:
        out.emit(doc, lambda: f"{a.target}: filesystem grown from {format_size(before.end)} to "
                              f"{format_size(after.end)} ({doc['pages_added']} pages added)")


def add_parsers(top, sub) -> None:
    target = {"metavar": "VG/LV|DEVICE", "help": "a logical volume (VG/LV), or a block device or image file "
              "(a path; write ./NAME for one that could be read as VG/LV)"}
    q = sub(top, "mkfs", cmd_mkfs, "create a traxfs filesystem on a logical volume or device (trax-mkfs(8))")
    q.add_argument("target", **target)
    q.add_argument("--size", type=size, help=f"make the image file DEVICE this size first (created if "
                   f"missing); {SIZE_HELP}")
    q.add_argument("--log-size", type=size, help="engine log region (default: 1/16 of the volume, 16M..256M); "
                   f"{SIZE_HELP}")
    q.add_argument("--label", help="a label of up to 32 bytes")
    q.add_argument("--force", action="store_true", help="format over what is there (a filesystem, a physical "
                   "volume, another signature); never over a device in use")
    q = sub(top, "mount", cmd_mount, "mount a traxfs filesystem through FUSE (trax-mount(8))")
    q.add_argument("target", **target)
    q.add_argument("mountpoint", help="an existing directory to mount on")
    q.add_argument("--foreground", action="store_true", help="serve in this process until unmounted")
    q.add_argument("--pidfile", help="where the server writes its PID once the mount is live")
    q.add_argument("--log", help="the daemon's log file (default: beside the pidfile)")
    q.add_argument("--allow-other", action="store_true", help="let other users use the mount")
    q.add_argument("--partial", action="store_true", help="run a mirror degraded if a device is missing")
    q.add_argument("-o", "--options", metavar="OPT[,OPT...]", help="mount options as in /etc/fstab: ro (writes "
                   "EROFS, nothing written to the device), rw, allow_other, dev, suid, nodev, nosuid, exec, noexec, "
                   "commit=SECONDS; defaults, noauto and mount(8)'s other own options are ignored")
    q.add_argument("--commit-interval", type=seconds(0.01, 3600), default=1.0, metavar="SECONDS",
                   help="seconds within which every change becomes durable, 0.01 to 3600 (default 1)")
    q.add_argument("--timeout", type=seconds(0.1, 86400), default=60.0, metavar="SECONDS",
                   help="seconds to wait for the mount (default 60)")
    q = sub(top, "umount", cmd_umount, "unmount a traxfs mount and wait for a clean close (trax-umount(8))")
    q.add_argument("mountpoint", help="where the filesystem is mounted")
    q.add_argument("--timeout", type=seconds(0.1, 86400), default=120.0, metavar="SECONDS",
                   help="seconds to wait for the server to close (default 120)")
    q = sub(top, "fsck", cmd_fsck, "check and repair an unmounted traxfs filesystem (trax-fsck(8))")
    q.add_argument("target", **target)
    q.add_argument("--repair", "-y", action="store_true", help="repair what can be repaired")
    q.add_argument("--partial", action="store_true", help="check a mirror degraded if a device is missing")
    q = sub(top, "resize", cmd_resize, "grow an unmounted traxfs filesystem to fill its device (trax-resize(8))")
    q.add_argument("target", **target)
    q.add_argument("--size", type=size, help=f"grow to this size instead of the whole device; {SIZE_HELP}")
