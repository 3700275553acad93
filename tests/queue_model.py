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


def open_store(dev_or_path, **kw) -> tuple[Engine, QueueStore]:
    dev = ImageFileDevice(dev_or_path) if isinstance(dev_or_path, str | os.PathLike) else dev_or_path
    eng = Engine.open(dev)
    return eng, QueueStore(eng, background=kw.pop("background", False), **kw)


def close_store(eng: Engine, store: QueueStore, crash: bool = False) -> None:
    if crash:
        store.crash()
        eng.unclean_shutdown()
    else:
        store.close()
        eng.close()


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
