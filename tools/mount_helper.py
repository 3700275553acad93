"""``mount.fuse.traxfs`` and ``umount.fuse.traxfs``: what mount(8) and umount(8) run for a
filesystem of type ``fuse.traxfs`` (man trax-mount(8)).

mount(8) runs ``/sbin/mount.fuse.traxfs SOURCE DIR [-sfnv] [-o OPTIONS]`` with a cleared
environment (no ``PATH``, no ``TRAX_HOME``): the helper is a console script whose interpreter is
an absolute path, and it runs ``trax mount`` through that same interpreter, so nothing is looked
up on ``PATH``. ``-o`` takes the options of ``tools/mount_options.py`` (``home=DIR`` names the
registry a ``VG/LV`` source is found in). It returns once the mount is live, as mount(8) expects.

umount(8) runs ``/sbin/umount.fuse.traxfs DIR``: ``trax umount DIR``, which returns only once
the server has closed the filesystem cleanly — so ``umount DIR`` then means the image or volume
is free. ``-l`` (lazy) detaches with ``fusermount3 -uz`` and does not wait.

Installing: the package puts both scripts beside ``trax``; mount(8) looks only in ``/sbin``, so
link them there (``trax-mount(8)``: ``ln -s "$(command -v mount.fuse.traxfs)" /sbin/``).
"""

from __future__ import annotations

import argparse
import subprocess
import sys

from .mount_options import parse_mount_options


def _trax(*args: str, home: str | None = None) -> int:
    top = ["--home", home] if home else []
    return subprocess.run([sys.executable, "-m", "traxfs.tools.cli", *top, *args]).returncode


def mount_main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="mount.fuse.traxfs", description="mount(8) helper of traxfs")
    p.add_argument("source", help="an image file, a block device, or VG/LV")
    p.add_argument("mountpoint")
    p.add_argument("-o", dest="options", default="", help="comma-separated mount options")
    for flag in ("-s", "-f", "-n", "-v"):  # sloppy, fake, no mtab, verbose: nothing to do for them
        p.add_argument(flag, action="store_true", help=argparse.SUPPRESS)
    p.add_argument("-t", dest="type", help=argparse.SUPPRESS)
    p.add_argument("-N", dest="namespace", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.namespace:
        p.error("-N (mount namespaces) is not supported")
    try:
        opts = parse_mount_options(a.options)
    except ValueError as e:
        p.error(str(e))
    rest = ",".join(o for o in a.options.split(",") if o and not o.startswith("home="))
    if a.f:
        return 0
    return _trax("mount", a.source, a.mountpoint, *(["-o", rest] if rest else []), home=opts.home)


def umount_main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="umount.fuse.traxfs", description="umount(8) helper of traxfs")
    p.add_argument("mountpoint")
    p.add_argument("-l", dest="lazy", action="store_true", help="detach now, do not wait for the close")
    for flag in ("-n", "-f", "-v", "-r"):
        p.add_argument(flag, action="store_true", help=argparse.SUPPRESS)
    p.add_argument("-t", dest="type", help=argparse.SUPPRESS)
    p.add_argument("-N", dest="namespace", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.lazy:
        return subprocess.run(["fusermount3", "-uz", a.mountpoint]).returncode
    return _trax("umount", a.mountpoint)
