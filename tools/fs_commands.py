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
import json
import logging
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from traxfs.fs.engine.superblock import SuperblockError
from traxfs.fs.errors import FsError, NotTraxfs
from traxfs.tools.fs_target import open_target
from traxfs.tools.sizes import format_size
from traxfs.volume.errors import UsageError, VolumeError
from traxfs.volume.registry import Registry

FS_ERRORS = (FsError, NotTraxfs, SuperblockError)


def _pidfile(reg: Registry, mountpoint: str) -> Path:
    key = hashlib.sha1(os.path.realpath(mountpoint).encode()).hexdigest()[:16]
    return reg.home / "mounts" / f"{key}.pid"


def _fail(msg: str) -> VolumeError:
    return VolumeError(msg)


def cmd_mkfs(a: argparse.Namespace, reg: Registry, out) -> None:
    from traxfs.fs.filesystem import FileSystem

    created = a.size is not None and not os.path.exists(a.target)
    try:
        with open_target(reg, a.target, create_size=a.size if created else None) as (dev, info):
            if not a.force:
                _refuse_existing(dev, a.target)
            if a.size is not None and not created and dev.size < a.size and hasattr(dev, "fd"):
                os.ftruncate(dev.fd, a.size)  # grow the existing image only once formatting is decided
                dev.size = info["size"] = a.size
            try:
                uid = FileSystem.mkfs(dev, log_size=a.log_size, label=a.label or "")
            except ValueError as e:
                raise UsageError(f"{a.target}: {e}") from None
    except BaseException:
        if created:
            Path(a.target).unlink(missing_ok=True)  # a failed mkfs leaves no new image behind
        raise
    out.emit({"uuid": uid, **info}, lambda: f"{a.target}: traxfs created ({format_size(info['size'])}, "
             f"uuid {uid})")


def _refuse_existing(dev, target: str) -> None:
    """mkfs over an existing traxfs (or engine) needs --force: it destroys everything."""
    from traxfs.fs.engine.superblock import read_superblock

    try:
        read_superblock(dev, target)
    except Exception:  # noqa: BLE001  (nothing readable there: free to format)
        return
    raise UsageError(f"{target}: holds a traxfs engine already; use --force to destroy it and format anew")


def cmd_mount(a: argparse.Namespace, reg: Registry, out) -> None:
    if not os.path.isdir(a.mountpoint):
        raise UsageError(f"{a.mountpoint}: mount point is not a directory")
    if os.path.ismount(a.mountpoint):
        raise UsageError(f"{a.mountpoint}: something is already mounted there")
    pidfile = Path(a.pidfile) if a.pidfile else _pidfile(reg, a.mountpoint)
    if a.foreground:
        return _serve_foreground(a, reg, pidfile)
    logfile = Path(a.log) if a.log else pidfile.with_suffix(".log")
    pidfile.parent.mkdir(parents=True, exist_ok=True)
    pidfile.unlink(missing_ok=True)
    argv = [sys.executable, "-m", "traxfs.tools.cli", "--home", str(reg.home), "mount", "--foreground",
            a.target, a.mountpoint, "--pidfile", str(pidfile), "--commit-interval", str(a.commit_interval)]
    if a.allow_other:
        argv.append("--allow-other")
    if a.partial:
        argv.append("--partial")
    with open(logfile, "ab") as log:
        child = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True)
    deadline = time.monotonic() + a.timeout
    while time.monotonic() < deadline:
        if child.poll() is not None:
            tail = logfile.read_text(errors="replace").strip().splitlines()[-5:]
            raise _fail(f"mount of {a.target} on {a.mountpoint} failed: " + " / ".join(tail))
        if pidfile.exists() and os.path.ismount(a.mountpoint):
            out.emit({"target": a.target, "mountpoint": a.mountpoint, "pid": child.pid, "log": str(logfile)},
                     lambda: f"{a.target} mounted on {a.mountpoint} (pid {child.pid}, log {logfile})")
            return None
        time.sleep(0.05)
    child.terminate()
    raise _fail(f"mount of {a.target} on {a.mountpoint}: not live after {a.timeout:g} s (log: {logfile})")


def _serve_foreground(a: argparse.Namespace, reg: Registry, pidfile: Path) -> None:
    from traxfs.fs.mount import serve

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
        print(f"{a.target} mounted on {a.mountpoint}", flush=True)

    try:
        with open_target(reg, a.target, partial=a.partial) as (dev, info):
            serve(dev, a.mountpoint, source=f"traxfs:{a.target}", allow_other=a.allow_other,
                  commit_interval=a.commit_interval, volume_info=lambda: info, ready=ready, target=a.target)
        log.info("%s unmounted from %s; filesystem closed cleanly", a.target, a.mountpoint)
    finally:
        for pf in pidfiles:
            pf.unlink(missing_ok=True)


def cmd_umount(a: argparse.Namespace, reg: Registry, out) -> None:
    mp = a.mountpoint
    if not os.path.ismount(mp):
        raise UsageError(f"{mp}: not mounted")
    pidfile = _pidfile(reg, mp)
    pid = None
    try:
        pid = int(pidfile.read_text().strip())
    except (OSError, ValueError):
        pass
    tool = shutil.which("fusermount3") or "fusermount3"
    r = subprocess.run([tool, "-u", mp], capture_output=True, text=True)
    if r.returncode != 0:
        raise _fail(f"{mp}: cannot unmount: {r.stderr.strip() or r.stdout.strip()}")
    deadline = time.monotonic() + a.timeout
    while pid is not None and time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.05)
    else:
        if pid is not None:
            raise _fail(f"{mp}: unmounted, but the server (pid {pid}) has not finished closing after "
                        f"{a.timeout:g} s")
    out.emit({"mountpoint": mp, "pid": pid}, lambda: f"{mp} unmounted")


def cmd_fsck(a: argparse.Namespace, reg: Registry, out) -> int:
    from traxfs.fs.engine.page import PageCorrupt
    from traxfs.fs.fsck import EXIT_OPERATIONAL, check_device

    try:
        with open_target(reg, a.target, partial=a.partial) as (dev, _):
            rep = check_device(dev, repair=a.repair, where=a.target)
    except FS_ERRORS + (VolumeError, PageCorrupt) as e:
        print(f"trax fsck: {e}", file=sys.stderr)
        return EXIT_OPERATIONAL
    except Exception as e:  # noqa: BLE001  (a bug: say so in one line, never a traceback)
        print(f"trax fsck: {a.target}: the check stopped on an internal error: {type(e).__name__}: {e}",
              file=sys.stderr)
        return EXIT_OPERATIONAL

    def text() -> str:
        lines = [f"{a.target}: {rep.counts['inodes']} inodes, {rep.counts['entries']} entries, "
                 f"{rep.counts['data_pages']} data pages"]
        lines += [f"note: {t}" for t in rep.notes]
        lines += [f"repaired: {t}" for t in rep.repaired]
        lines += [f"PROBLEM: {t}" for t in rep.problems]
        lines.append("clean" if rep.exit_code == 0 else
                     "errors corrected" if rep.exit_code == 1 else "errors left uncorrected")
        return "\n".join(lines)

    if a.json:
        print(json.dumps(rep.as_dict(), indent=2, sort_keys=True))
    else:
        print(text())
    if rep.problems and not a.repair:
        print(f"trax fsck: run 'trax fsck --repair {a.target}' to repair what can be", file=sys.stderr)
    return rep.exit_code


def cmd_resize(a: argparse.Namespace, reg: Registry, out) -> None:
    from traxfs.fs.engine.resize import ResizeRefused, grow
    from traxfs.fs.filesystem import FileSystem
    from traxfs.volume.overlay import OverlayDevice

    with open_target(reg, a.target) as (dev, _):
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


def add_parsers(top, sub, size_type) -> None:
    q = sub(top, "mkfs", cmd_mkfs, "create a traxfs filesystem on a logical volume or device (trax-mkfs(8))")
    q.add_argument("target", metavar="VG/LV|DEVICE")
    q.add_argument("--size", type=size_type, help="create the image file DEVICE with this size first")
    q.add_argument("--log-size", type=size_type, help="engine log region (default: 1/16 of the volume, "
                   "16M..256M)")
    q.add_argument("--label", help="a label of up to 32 bytes")
    q.add_argument("--force", action="store_true", help="format over an existing filesystem")
    q = sub(top, "mount", cmd_mount, "mount a traxfs filesystem through FUSE (trax-mount(8))")
    q.add_argument("target", metavar="VG/LV|DEVICE")
    q.add_argument("mountpoint")
    q.add_argument("--foreground", action="store_true", help="serve in this process until unmounted")
    q.add_argument("--pidfile", help="where the server writes its PID once the mount is live")
    q.add_argument("--log", help="the daemon's log file (default: beside the pidfile)")
    q.add_argument("--allow-other", action="store_true", help="let other users use the mount")
    q.add_argument("--partial", action="store_true", help="run a mirror degraded if a device is missing")
    q.add_argument("--commit-interval", type=float, default=1.0,
                   help="seconds within which every change becomes durable (default 1)")
    q.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for the mount (default 60)")
    q = sub(top, "umount", cmd_umount, "unmount a traxfs mount and wait for a clean close (trax-umount(8))")
    q.add_argument("mountpoint")
    q.add_argument("--timeout", type=float, default=120.0, help="seconds to wait for the server to close")
    q = sub(top, "fsck", cmd_fsck, "check and repair an unmounted traxfs filesystem (trax-fsck(8))")
    q.add_argument("target", metavar="VG/LV|DEVICE")
    q.add_argument("--repair", "-y", action="store_true", help="repair what can be repaired")
    q.add_argument("--partial", action="store_true", help="check a mirror degraded if a device is missing")
    q.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="print the report as JSON")
    q = sub(top, "resize", cmd_resize, "grow an unmounted traxfs filesystem to fill its device (trax-resize(8))")
    q.add_argument("target", metavar="VG/LV|DEVICE")
    q.add_argument("--size", type=size_type, help="grow to this size instead of the whole device")
