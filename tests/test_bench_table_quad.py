"""The table benchmark on simulated disks holds its findings at a small scale: a projection reads
its share of the bytes and takes less disk time than the full scan, and a row read as one batch
beats the same minipages read one after another (simulated time: deterministic)."""

from __future__ import annotations

import pytest

from traxfs.tools.bench_table_quad import run, text

pytestmark = pytest.mark.timeout(120)


def test_projection_and_batch_gains(tmp_path):
    r = run(tmp_path, 5000, 10)
    scans = r["scans"]
    full = scans["rows.csv (16 columns)"]
    q6 = scans["Q6 projection (4 columns)"]
    assert r["placement"].startswith("quadrangle (d=4")
    assert q6["volume_bytes"] < 0.4 * full["volume_bytes"] and q6["disk_ms"] < 0.8 * full["disk_ms"]
    f = {k.split(" (")[0]: v["disk_ms_per_fetch"] for k, v in r["fetches"].items()}
    assert f["batch"] < 0.5 * f["one minipage after another"]
    m = r["model_scans"]  # the model's baselines: NSM reads every column, DSM only the projection's
    assert m["Q6 projection (4 columns)"]["NSM"] == m["rows.csv (16 columns)"]["NSM"]
    assert m["Q6 projection (4 columns)"]["DSM"] < m["rows.csv (16 columns)"]["DSM"]
    assert "paper (Atropos)" in text(r) and "NSM/PAX" in text(r)
