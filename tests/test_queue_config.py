"""A queue's settings (``config.json``): defaults, changes, and the exact words of a refusal."""

from __future__ import annotations

import json

import pytest
from queue_model import close_store, new_image, open_store

from traxfs.fs.queues.config import ConfigError, QueueConfig

REFUSED = [
    ('[1]', 'the settings must be a JSON object, e.g. {"retain_count": 1000000}'),
    ('{"retain_count": 5', "not valid JSON: Expecting ',' delimiter: line 1 column 19 (char 18)"),
    ('{"block_sizes": 1}', "unknown setting 'block_sizes'; the settings are block_size, max_record_bytes, "
                           "retain_age_seconds, retain_count, seal_bytes, seal_seconds"),
    ('{"block_size": 8192}', "block_size 8192 is out of range: give bytes, a multiple of 4096 from 16384 (16 KiB) "
                             "to 67108864 (64 MiB)"),
    ('{"block_size": 20000}', "block_size 20000 is not a multiple of 4096 bytes (a page)"),
    ('{"block_size": true}', "block_size true is not a whole number: give bytes, a multiple of 4096 from 16384 "
                             "(16 KiB) to 67108864 (64 MiB)"),
    ('{"max_record_bytes": 0}', "max_record_bytes 0 is out of range: give bytes from 1 to 67108864 (64 MiB)"),
    ('{"retain_age_seconds": -1}', "retain_age_seconds -1 is out of range: give seconds from 0 to 315360000, or "
                                   "null for no limit"),
    ('{"retain_count": 0}', "retain_count 0 is out of range: give records from 1 to 4611686018427387904, or null "
                            "for no limit"),
    ('{"seal_bytes": 2.5}', "seal_bytes 2.5 is not a whole number: give bytes from 1 to 1099511627776 (1 TiB)"),
    ('{"seal_seconds": "5"}', 'seal_seconds "5" is not a number: give seconds from 0.01 to 86400'),
    ('{"seal_seconds": 1e999}', "seal_seconds Infinity is out of range: give seconds from 0.01 to 86400"),
    ('{"seal_seconds": null}', "seal_seconds null is not a number: give seconds from 0.01 to 86400"),
]


@pytest.mark.parametrize("text, message", REFUSED)
def test_a_bad_change_is_refused_with_its_reason(text, message):
    base = QueueConfig(retain_count=7)
    with pytest.raises(ConfigError) as e:
        QueueConfig.parse(text, base)
    assert str(e.value) == message
    assert base == QueueConfig(retain_count=7)  # (frozen: nothing to change; the caller keeps it)


def test_defaults_and_a_change_of_some_keys():
    d = QueueConfig()
    assert json.loads(d.to_json()) == {"block_size": 131072, "max_record_bytes": 1048576, "retain_age_seconds": 3600.0,
                                       "retain_count": None, "seal_bytes": 67108864, "seal_seconds": 5.0}
    c = QueueConfig.parse('{"retain_count": 10000000, "retain_age_seconds": null, "seal_seconds": 1}', d)
    assert (c.retain_count, c.retain_age_seconds, c.seal_seconds, c.block_size) == (10_000_000, None, 1, 131072)
    assert QueueConfig.parse(c.to_json()) == c
    assert QueueConfig.unpack(c.pack()) == c and QueueConfig.unpack(d.pack()) == d


def test_settings_survive_a_reopen(tmp_path):
    path = str(tmp_path / "q.img")
    new_image(path)
    eng, store = open_store(path)
    q = store.create(b"c")
    q.set_config(QueueConfig.parse('{"retain_count": 123, "block_size": 65536}', q.config))
    with pytest.raises(ConfigError):
        store.create(b"d", QueueConfig(block_size=1))
    assert store.names() == [b"c"]
    close_store(eng, store)
    eng, store = open_store(path)
    try:
        assert store.get(b"c").config == QueueConfig(retain_count=123, block_size=65536)
    finally:
        close_store(eng, store)


def _parser():
    import argparse

    from traxfs.tools.queue_options import add_settings_options

    p = argparse.ArgumentParser(prog="trax queue create", exit_on_error=False)
    add_settings_options(p)
    return p


def test_command_line_options_make_the_config_change():
    from traxfs.tools.queue_options import settings_change

    args = _parser().parse_args(["--block-size", "128K", "--retain-age", "1h", "--retain-count", "10M",
                                 "--seal-bytes", "64M", "--seal-seconds", "2m", "--max-record", "4K"])
    assert settings_change(args) == {"block_size": 131072, "retain_age_seconds": 3600.0, "retain_count": 10_000_000,
                                     "seal_bytes": 67108864, "seal_seconds": 120.0, "max_record_bytes": 4096}
    assert settings_change(_parser().parse_args(["--retain-age", "none", "--retain-count", "NONE"])) == {
        "retain_age_seconds": None, "retain_count": None}
    assert settings_change(_parser().parse_args([])) == {}


@pytest.mark.parametrize("argv, message", [
    (["--retain-age", "1w"], "invalid duration '1w': give seconds from 0 to 315360000, a suffix s, m, h or d "
                             "(e.g. 1h), or none for no limit"),
    (["--retain-count", "1.5"], "invalid number '1.5': give a whole number from 1 to 4611686018427387904, a suffix "
                                "k, M, G or T (e.g. 10M), or none for no limit"),
    (["--seal-seconds", "none"], "invalid duration 'none': give seconds from 0.01 to 86400, a suffix s, m, h or d "
                                 "(e.g. 1h)"),
    (["--seal-seconds", "inf"], "invalid duration 'inf': give seconds from 0.01 to 86400, a suffix s, m, h or d "
                                "(e.g. 1h)"),
    (["--block-size", "0"], "invalid size '0': a size must be positive"),
])
def test_a_malformed_option_is_a_usage_error_saying_what_is_accepted(argv, message):
    import argparse

    with pytest.raises(argparse.ArgumentError) as e:
        _parser().parse_args(argv)
    assert message in str(e.value)


def test_options_are_checked_by_the_queue_s_own_rules():
    from traxfs.tools.queue_options import settings_change

    with pytest.raises(ConfigError) as e:
        settings_change(_parser().parse_args(["--block-size", "20000"]))
    assert str(e.value) == "block_size 20000 is not a multiple of 4096 bytes (a page)"
