"""Helpers for tests of queues through a real mount: paths, reading a view's stream, status."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path


def q(mp: Path, name: str) -> Path:
    return mp / "queues" / name


def status(qdir: Path) -> dict:
    return json.loads((qdir / "status.json").read_bytes())


def config(qdir: Path, **changes) -> None:
    """Change settings through config.json (one write of a whole JSON object)."""
    fd = os.open(qdir / "config.json", os.O_WRONLY | os.O_TRUNC)
    try:
        os.write(fd, json.dumps(changes).encode())
    finally:
        os.close(fd)


def append(qdir: Path, data: bytes, fsync: bool = False) -> None:
    fd = os.open(qdir / "append", os.O_WRONLY | os.O_APPEND)
    try:
        os.write(fd, data)
        if fsync:
            os.fsync(fd)
    finally:
        os.close(fd)


def put(path: Path, text: str) -> None:
    """One write of ``text`` to a write-only control file (commit, seek)."""
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def lines(first: int, n: int, size: int = 100) -> bytes:
    """Records ``first .. first + n - 1``: ``size`` bytes each, newline included, numbered."""
    return b"".join(f"{i:012d} ".encode().ljust(size - 1, b"x") + b"\n" for i in range(first, first + n))


class Stream:
    """An open of a view's ``records``, read as a consumer does: until ``n`` more lines came."""

    def __init__(self, path: Path):
        self.fd = os.open(path, os.O_RDONLY)
        self.rest = b""

    def take(self, n: int, timeout: float = 30.0) -> list[bytes]:
        out: list[bytes] = []
        deadline = time.monotonic() + timeout
        while len(out) < n:
            chunk = os.read(self.fd, 1 << 20)
            if not chunk:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"got {len(out)} of {n} records")
                time.sleep(0.005)
                continue
            data = self.rest + chunk
            cut = data.rfind(b"\n") + 1
            out += data[:cut].splitlines(keepends=True)
            self.rest = data[cut:]
        assert len(out) == n, f"read {len(out)} records, expected {n} (more than were appended)"
        return out

    def drained(self) -> bytes:
        """What is left up to the live end now (b"" if caught up)."""
        data = self.rest
        while chunk := os.read(self.fd, 1 << 20):
            data += chunk
        self.rest = b""
        return data

    def close(self) -> None:
        os.close(self.fd)

    def __enter__(self) -> Stream:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def numbers(records: list[bytes]) -> list[int]:
    return [int(r[:12]) for r in records]
