"""The one exception the filesystem core raises: an errno the FUSE layer hands to the kernel."""

from __future__ import annotations

import errno
import os


class FsError(Exception):
    """A POSIX error: ``errno`` is what the system call returns to the user."""

    def __init__(self, err: int, detail: str = ""):
        super().__init__(err, detail or os.strerror(err))
        self.errno = err
        self.detail = detail or os.strerror(err)

    def __str__(self) -> str:
        return f"[{errno.errorcode.get(self.errno, self.errno)}] {self.detail}"


class NotTraxfs(Exception):
    """The device holds no traxfs filesystem, a damaged one, or one of another version."""


class FsDamaged(NotTraxfs):
    """The filesystem is damaged: refused (mount), with the damage and what to run."""

    def __init__(self, where: str, detail: str):
        super().__init__(f"filesystem on {where} is damaged ({detail}); run 'trax fsck --repair {where}'")
        self.where, self.detail = where, detail
