"""What a record is: one line of UTF-8 text, its newline included, at most the queue's maximum.

:func:`check_batch` is the producer's gate: a batch of whole lines is accepted whole or refused
whole, with a message that says which record is wrong and why.
"""

from __future__ import annotations

import errno

from ...ext.linescan import scan_lines
from ..errors import FsError


class BadRecord(FsError):
    """A write refused because one of its records is not acceptable (EINVAL, nothing appended)."""

    def __init__(self, detail: str):
        super().__init__(errno.EINVAL, detail)


def check_batch(data, max_record: int) -> int:
    """The number of records in ``data`` (whole lines: it ends with a newline), after checking
    each: UTF-8, at most ``max_record`` bytes with its newline. Raises :class:`BadRecord`."""
    lines, ascii_only = scan_lines(data)
    try:
        if not ascii_only:
            str(data, "utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start)
        raise BadRecord(f"record {line + 1} of the write is not UTF-8 text (byte {e.start - _line_start(data, e.start)} "
                        f"of the record: {e.reason})") from None
    if len(data) > max_record:
        at, n, k = 0, len(data), 0
        while at < n:
            nl = data.find(b"\n", at)
            if nl + 1 - at > max_record:
                raise BadRecord(f"record {k + 1} of the write has {nl + 1 - at} bytes; the queue's limit is "
                                f"{max_record} (max_record_bytes in config.json)")
            at, k = nl + 1, k + 1
        return k
    return lines


def _line_start(data, at: int) -> int:
    return data.rfind(b"\n", 0, at) + 1
