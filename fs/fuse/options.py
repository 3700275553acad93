"""The FUSE mount options of every traxfs server (the filesystem, an exposed volume, the
pass-through baseline), built so that no path or name can add an option.

libfuse reads ``-o`` as a comma-separated list in which a backslash escapes the next character
and ``\\ooo`` (three octal digits) stands for one byte; pyfuse3 hands the options over as ASCII.
The source name shown in the mount table (``fsname=``) is therefore written with ``,`` and
``\\`` escaped by a backslash and every byte outside printable ASCII as ``\\ooo``: a path such as
``./t/x,allow_other`` stays one fsname (it does not turn on ``allow_other``), and non-ASCII or
undecodable names (``os.fsencode`` with surrogateescape) reach the kernel byte for byte.
"""

from __future__ import annotations

import os

import pyfuse3


def escape_option_value(value: str) -> str:
    """``value`` (a str that may carry surrogate escapes) as one libfuse option value in ASCII."""
    out = []
    for byte in os.fsencode(value):
        ch = chr(byte)
        if ch in ",\\":
            out.append("\\" + ch)
        elif 0x20 < byte < 0x7F:
            out.append(ch)
        else:  # space, controls and everything past ASCII: the kernel gets the byte itself
            out.append(f"\\{byte:03o}")
    return "".join(out)


KERNEL_FLAGS = frozenset({"ro", "dev", "nodev", "suid", "nosuid", "exec", "noexec"})  # passed on as asked


def mount_options(fsname: str, subtype: str, *, allow_other: bool = False,
                  flags: frozenset[str] = frozenset()) -> set[str]:
    """pyfuse3's defaults plus the source name, the type (``fuse.SUBTYPE``), and, only when
    asked, ``allow_other`` and the kernel's mount flags in :data:`KERNEL_FLAGS` (``ro``;
    ``dev`` and ``suid``, which libfuse turns off unless root asks for them)."""
    unknown = set(flags) - KERNEL_FLAGS
    if unknown:
        raise ValueError(f"mount flags {sorted(unknown)} are not among {sorted(KERNEL_FLAGS)}")
    options = set(pyfuse3.default_options) | {f"fsname={escape_option_value(fsname)}", f"subtype={subtype}"}
    if allow_other:
        options.add("allow_other")
    return options | set(flags)
