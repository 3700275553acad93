"""A queue's settings: what ``config.json`` holds, their defaults, and the rules a change must pass.

The document is JSON with numbers in base units (bytes, seconds, records) and ``null`` for
"no limit" where a limit is optional::

    {"block_size": 131072, "max_record_bytes": 1048576, "retain_age_seconds": 3600,
     "retain_count": null, "seal_bytes": 67108864, "seal_seconds": 5}

A change names any subset of the keys; the rest keep their values. A bad change (an unknown
key, a value of the wrong type or out of its range, a document that is not a JSON object) is
refused whole with :class:`ConfigError`, whose message names the key and the accepted range;
nothing changes.
"""

from __future__ import annotations

import json
import math
import struct
from dataclasses import asdict, dataclass, fields, replace

from ..engine.page import PAGE_SIZE

KiB, MiB = 1 << 10, 1 << 20
MAX_RETAIN_SECONDS = 10 * 365 * 86400  # ten years
MAX_COUNT = 1 << 62
_PACKED = struct.Struct("<IIddQQ")  # block, max record, retain age (nan: none), seal s, count (0: none), seal bytes
VERSION = 1


class ConfigError(ValueError):
    """A settings change refused; the message says which key and what is accepted."""


@dataclass(frozen=True)
class QueueConfig:
    block_size: int = 128 * KiB  # bytes per block (a record longer than a block gets a block of its own)
    max_record_bytes: int = 1 * MiB  # the longest record accepted, its newline included
    retain_age_seconds: float | None = 3600.0  # history kept for replay by age (None: no age limit)
    retain_count: int | None = None  # ... and by count (None: no count limit)
    seal_bytes: int = 64 * MiB  # a segment is sealed once it holds this many bytes ...
    seal_seconds: float = 5.0  # ... or this long after its first record

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, sort_keys=True) + "\n"

    def pack(self) -> bytes:
        """The settings as stored in the queue's record."""
        age = math.nan if self.retain_age_seconds is None else self.retain_age_seconds
        return _PACKED.pack(self.block_size, self.max_record_bytes, age, self.seal_seconds,
                            self.retain_count or 0, self.seal_bytes)

    @classmethod
    def unpack(cls, raw: bytes) -> QueueConfig:
        block, max_record, age, seal_s, count, seal_b = _PACKED.unpack(raw)
        return cls(block, max_record, None if math.isnan(age) else age, count or None, seal_b, seal_s)

    def changed(self, doc: dict) -> QueueConfig:
        """These settings with the keys of ``doc`` changed, after checking every one."""
        if not isinstance(doc, dict):
            raise ConfigError("the settings must be a JSON object, e.g. {\"retain_count\": 1000000}")
        known = {f.name for f in fields(self)}
        unknown = sorted(set(doc) - known)
        if unknown:
            raise ConfigError(f"unknown setting {unknown[0]!r}; the settings are {', '.join(sorted(known))}")
        new = replace(self, **doc)
        new.check()
        return new

    @classmethod
    def parse(cls, text: bytes | str, base: QueueConfig | None = None) -> QueueConfig:
        """Settings from a written ``config.json`` (a change of ``base``, default the defaults)."""
        try:
            doc = json.loads(text)
        except (ValueError, UnicodeDecodeError) as e:
            raise ConfigError(f"not valid JSON: {e}") from None
        return (base or cls()).changed(doc)

    def check(self) -> None:
        """Raise :class:`ConfigError` naming the first setting out of its range."""
        _whole("block_size", self.block_size, 16 * KiB, 64 * MiB,
               f"bytes, a multiple of {PAGE_SIZE} from 16384 (16 KiB) to 67108864 (64 MiB)")
        if self.block_size % PAGE_SIZE:
            raise ConfigError(f"block_size {self.block_size} is not a multiple of {PAGE_SIZE} bytes (a page)")
        _whole("max_record_bytes", self.max_record_bytes, 1, 64 * MiB, "bytes from 1 to 67108864 (64 MiB)")
        _whole("seal_bytes", self.seal_bytes, 1, 1 << 40, "bytes from 1 to 1099511627776 (1 TiB)")
        _seconds("seal_seconds", self.seal_seconds, 0.01, 86400.0)
        if self.retain_age_seconds is not None:
            _seconds("retain_age_seconds", self.retain_age_seconds, 0.0, MAX_RETAIN_SECONDS, "or null for no limit")
        if self.retain_count is not None:
            _whole("retain_count", self.retain_count, 1, MAX_COUNT, f"records from 1 to {MAX_COUNT}, or null for no limit")


def _whole(key: str, value, lo: int, hi: int, accepted: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{key} {json.dumps(value)} is not a whole number: give {accepted}")
    if not lo <= value <= hi:
        raise ConfigError(f"{key} {value} is out of range: give {accepted}")


def _seconds(key: str, value, lo: float, hi: float, more: str = "") -> None:
    accepted = f"seconds from {lo:g} to {hi:.0f}" + (f", {more}" if more else "")
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(f"{key} {json.dumps(value)} is not a number: give {accepted}")
    if not (math.isfinite(value) and lo <= value <= hi):
        raise ConfigError(f"{key} {json.dumps(value)} is out of range: give {accepted}")
