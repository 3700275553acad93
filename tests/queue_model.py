"""Helpers for the queue store tests: a store on a fresh engine image, and reading a queue back."""

from __future__ import annotations

import os

from traxfs.fs.engine.engine import Engine
from traxfs.fs.queues.reader import Reader, SegmentReader
from traxfs.fs.queues.store import QueueStore
from traxfs.volume.device import ImageFileDevice, create_image

MiB = 1 << 20


def new_image(path: str, size: int = 48 * MiB, log_size: int = 4 * MiB) -> None:
    dev = create_image(path, size)
    Engine.format(dev, log_size=log_size)
    dev.close()


_OPENED_HERE: dict[int, ImageFileDevice] = {}  # engine id -> the device open_store opened for it


def open_store(dev_or_path, **kw) -> tuple[Engine, QueueStore]:
    """An engine and queue store on an image (a path: the device is closed by close_store)."""
    if isinstance(dev_or_path, str | os.PathLike):
        dev = ImageFileDevice(dev_or_path)
        eng = Engine.open(dev)
        _OPENED_HERE[id(eng)] = dev
    else:
        eng = Engine.open(dev_or_path)
    return eng, QueueStore(eng, background=kw.pop("background", False), **kw)


def close_store(eng: Engine, store: QueueStore, crash: bool = False) -> None:
    """Close cleanly, or stop as a crash would; then close a device open_store opened (a
    state machine reopens hundreds of times: each left open held descriptors until the process
    ran out of them)."""
    if crash:
        store.crash()
        eng.unclean_shutdown()
    else:
        store.close()
        eng.close()
    dev = _OPENED_HERE.pop(id(eng), None)
    if dev is not None:
        dev.close()


def read_from(q, seq: int, chunk: int = 1 << 20) -> bytes:
    """Every record from ``seq`` to the live end, as a view's reader serves them."""
    r = Reader(q, seq)
    try:
        parts = []
        while True:
            got = r.read(chunk)
            if not got:
                return b"".join(parts)
            parts.append(got)
    finally:
        r.close()


def read_segment(q, first: int) -> bytes:
    r = SegmentReader(q, first)
    try:
        return r.read(0, r.size + 1)
    finally:
        r.close()
