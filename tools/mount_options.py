"""``-o`` options of ``trax mount`` and of the ``mount.fuse.traxfs`` helper that mount(8) runs.

One comma-separated list, as in ``/etc/fstab``:

* ``ro`` / ``rw``: a read-only mount (writes EROFS, nothing written to the device, not even
  the log) or the default;
* ``allow_other``: other users may use the mount;
* ``dev``, ``suid`` (and ``nodev``, ``nosuid``, ``exec``, ``noexec``): kernel mount flags,
  passed on; libfuse turns ``dev`` and ``suid`` off unless root asks for them;
* ``commit=SECONDS``: the commit interval; ``home=DIR``: the registry of volume groups (mount(8)
  clears the environment, so ``TRAX_HOME`` does not reach the helper);
* what mount(8) itself acts on (``defaults``, ``auto``, ``noauto``, ``user``, ``users``,
  ``nofail``, ``_netdev``, ``x-*``, ``comment=*``) is accepted and ignored.

Anything else is refused with the list of what is known: an option never silently does nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..fs.fuse.options import KERNEL_FLAGS

IGNORED = frozenset({"defaults", "auto", "noauto", "user", "users", "nouser", "owner", "group", "nofail", "_netdev",
                     "loud", "silent", "async", "sync", "atime", "noatime", "relatime", "strictatime"})
KNOWN = sorted({"ro", "rw", "allow_other", "commit=SECONDS", "home=DIR", *KERNEL_FLAGS - {"ro"}})


@dataclass
class MountOptions:
    read_only: bool = False
    allow_other: bool = False
    flags: set[str] = field(default_factory=set)  # kernel mount flags other than ro
    commit_interval: float | None = None
    home: str | None = None


def parse_mount_options(text: str) -> MountOptions:
    """The options of a comma-separated list; ValueError names an unknown one or a bad value."""
    out = MountOptions()
    for opt in filter(None, (o.strip() for o in text.split(","))):
        key, _, value = opt.partition("=")
        if opt in ("ro", "rw"):
            out.read_only = opt == "ro"
        elif opt == "allow_other":
            out.allow_other = True
        elif opt in KERNEL_FLAGS:
            out.flags.add(opt)
        elif key == "commit" and value:
            try:
                out.commit_interval = float(value)
            except ValueError:
                raise ValueError(f"commit={value}: not a number of seconds") from None
            if not 0.01 <= out.commit_interval <= 3600:
                raise ValueError(f"commit={value}: must be 0.01 to 3600 seconds")
        elif key == "home" and value:
            out.home = value
        elif opt in IGNORED or opt.startswith(("x-", "comment=", "helper=")):
            continue
        else:
            raise ValueError(f"unknown mount option {opt!r} (known: {', '.join(KNOWN)}; mount(8)'s own "
                             "such as defaults and noauto are ignored)")
    return out
