"""The ``trax.extents`` attribute: where a file's bytes are stored, for users and schedulers.

``getfattr --only-values -n trax.extents FILE`` answers one line per piece of each extent (an
extent split where the volume puts its bytes on different devices, and once per copy of a
mirror)::

    # file_offset length volume volume_offset tracks copy device device_offset
    0 1048576 vg0/data 8519680 8-8 0 /dev/loop3 9568256

``tracks`` is the first and last track (the volume's stripe unit, ``boundaries``) the piece
touches, ``-`` on a volume without geometry (an image file). The attribute is computed, never
stored: it is not in ``listxattr`` (so ``cp -a`` and ``rsync -X`` copy no stale layout), and
setting or removing it is refused like any name outside ``user.``/``trusted.``/``security.``.
FIEMAP, what ``filefrag`` asks, does not reach a FUSE filesystem (the kernel's FUSE module
passes no ``fiemap``), hence this attribute.
"""

from __future__ import annotations

import errno

from .datamap import DataMap
from .engine.page import PAGE_SIZE
from .errors import FsError
from .inodes import Inodes

NAME = b"trax.extents"
HEADER = "# file_offset length volume volume_offset tracks copy device device_offset"
VALUE_MAX = 65536  # the kernel's largest attribute value (XATTR_SIZE_MAX)


def extents_report(inodes: Inodes, data: DataMap, ino: int) -> bytes:
    """The attribute's value for inode ``ino``: ENODATA for anything but a regular file, E2BIG
    when the listing would not fit an attribute value."""
    with inodes.lock:
        if not inodes.get(ino).is_reg:
            raise FsError(errno.ENODATA, f"inode {ino}: only regular files have {NAME.decode()}")
        extents = data.all_extents(ino)
    lines = [HEADER]
    size = len(HEADER) + 1
    for lpage, phys, count in extents:
        volume, at, pieces = data.raw.locate(phys * PAGE_SIZE, count * PAGE_SIZE)
        for copy, device, dev_off, length, within in pieces:
            first = data.raw.track(phys * PAGE_SIZE + within)
            last = data.raw.track(phys * PAGE_SIZE + within + length - 1)
            tracks = "-" if first is None else f"{first}-{last}"
            line = f"{lpage * PAGE_SIZE + within} {length} {volume} {at + within} {tracks} {copy} {device} {dev_off}"
            size += len(line) + 1
            if size > VALUE_MAX:
                raise FsError(errno.E2BIG, f"inode {ino}: its extent listing exceeds {VALUE_MAX} bytes")
            lines.append(line)
    return ("\n".join(lines) + "\n").encode()
