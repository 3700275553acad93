"""A producer's open append file: whole lines go to the queue at each write, a partial last line
waits in the handle for its end and is appended when the file is flushed (closed).

Each write appends the records it completes atomically: the bytes kept from earlier writes and
this write's bytes up to its last newline go to :meth:`Queue.append` as one batch. A refused
write (EINVAL, ENOSPC) changes nothing: the kept partial line stays as it was.
"""

from __future__ import annotations

from .records import BadRecord


class Producer:
    def __init__(self, queue):
        self.q = queue
        self.partial = b""  # the start of a line whose end has not been written yet

    def write(self, data) -> int:
        """Append the lines ``data`` completes; keep the rest. Returns ``len(data)``."""
        cut = data.rfind(b"\n") + 1
        kept = len(data) - cut if cut else len(self.partial) + len(data)
        if kept + 1 > self.q.config.max_record_bytes:
            detail = (f"a record of more than {self.q.config.max_record_bytes} bytes (its start is still being "
                      "written; the limit is max_record_bytes in config.json)")
            self.q._refused(1, detail)
            raise BadRecord(detail)
        if cut:
            self.q.append(self.partial + bytes(data[:cut]) if self.partial else data[:cut])
            self.partial = bytes(data[cut:])
        else:
            self.partial += bytes(data)
        return len(data)

    def flush(self) -> None:
        """Append the kept partial line as a record of its own (close of the file)."""
        if self.partial:
            self.q.append(self.partial + b"\n")
            self.partial = b""

    def sync(self) -> None:
        """fsync of the file: every record it appended durable (a partial line is not a record yet)."""
        self.q.sync()
