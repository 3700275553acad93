"""The queue settings a ``trax queue`` command takes as options, and the ``config.json`` change
they make.

``--block-size 128K --max-record 1M --retain-age 1h --retain-count 10M --seal-bytes 64M
--seal-seconds 5``: sizes in powers of 1024, durations with an s, m, h or d suffix, counts with a
k, M, G or T suffix (powers of 1000), ``none`` for no limit where a limit is optional. argparse
refuses a value that does not parse (usage, exit 2); :func:`settings_change` then checks the
whole change by the queue's own rules (``QueueConfig``), so the command line and a write of
``config.json`` accept exactly the same settings and refuse with the same words.
"""

from __future__ import annotations

import argparse

from ..fs.queues.config import MAX_COUNT, MAX_RETAIN_SECONDS, QueueConfig
from . import cli_types

# option -> (setting in config.json, argparse type, help)
OPTIONS = {
    "--block-size": ("block_size", cli_types.size, "bytes per block (default 128K); " + cli_types.SIZE_HELP),
    "--max-record": ("max_record_bytes", cli_types.size, "the longest record accepted, its newline included "
                                                         "(default 1M; suffixes K M G T P)"),
    "--retain-age": ("retain_age_seconds", cli_types.duration(0, MAX_RETAIN_SECONDS, optional=True),
                     "history kept for replay by age, e.g. 1h, or none (default 1h)"),
    "--retain-count": ("retain_count", cli_types.big_count(1, MAX_COUNT, optional=True),
                       "history kept for replay by count, e.g. 10M, or none (default none)"),
    "--seal-bytes": ("seal_bytes", cli_types.size, "a segment is sealed at this size (default 64M; suffixes K M G T P)"),
    "--seal-seconds": ("seal_seconds", cli_types.duration(0.01, 86400),
                       "... or this long after its first record, e.g. 5 or 2m (default 5)"),
}


def add_settings_options(parser: argparse.ArgumentParser) -> None:
    for option, (key, kind, text) in OPTIONS.items():
        parser.add_argument(option, dest=key, type=kind, default=argparse.SUPPRESS, help=text)


def settings_change(args: argparse.Namespace, base: QueueConfig | None = None) -> dict:
    """The settings the options name, as a ``config.json`` change, checked against ``base``
    (default: the defaults); raises ``ConfigError`` with the queue's own words."""
    change = {key: getattr(args, key) for key, _, _ in OPTIONS.values() if hasattr(args, key)}
    (base or QueueConfig()).changed(change)
    return change
