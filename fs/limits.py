"""The limits every part of the filesystem checks against, and the checks they share."""

from __future__ import annotations

import errno
import time

from .errors import FsError

ROOT_INO = 1
NAME_MAX = 255
PATH_MAX = 4096
MAX_FILE_SIZE = 1 << 50


def now_ns() -> int:
    """The time stamps of inodes: wall-clock nanoseconds."""
    return time.time_ns()


def check_name(name: bytes, what: str = "name") -> None:
    """A name a new directory entry (or a queue, view or table, named like one) may have:
    ENAMETOOLONG or EINVAL otherwise; ``what`` names it in the message."""
    if len(name) > NAME_MAX:
        raise FsError(errno.ENAMETOOLONG, f"{what} of {len(name)} bytes (limit {NAME_MAX})")
    if not name or b"/" in name or b"\0" in name or name in (b".", b".."):
        raise FsError(errno.EINVAL, f"invalid {what} {name!r}")
