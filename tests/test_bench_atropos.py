"""The Atropos reproduction: the quick benchmark run holds its checks, and its pieces behave.

The benchmark's numbers are simulated times (deterministic for a seed), so the held checks are
asserted here exactly as the benchmark holds them; nothing is timed on the wall clock.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from traxfs.tools import bench_atropos
from traxfs.tools.atropos import lineitem, traces
from traxfs.tools.atropos.pagestores import PAX
from traxfs.tools.atropos.report import between, near, table

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def quick(tmp_path_factory) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("atropos")
    rc = bench_atropos.main(["--quick", "--out", str(out)])
    return out, {"rc": rc, **json.loads((out / "report.json").read_text())}


def check(report: dict, experiment: str, name_part: str) -> dict:
    found = [c for c in report["checks"] if c["experiment"] == experiment and name_part in c["name"]]
    assert len(found) == 1, f"{experiment}: {name_part!r} matches {len(found)} checks"
    return found[0]


def test_quick_run_holds_every_check_and_writes_its_figures(quick) -> None:
    out, report = quick
    assert report["failed"] == [] and report["rc"] == 0
    assert report["held"] >= 25
    for fig in ("fig7", "fig8", "fig9", "fig10", "fig11"):
        assert (out / f"{fig}.png").stat().st_size > 10_000
    for c in report["checks"]:  # every check says what the paper had and how it is held
        assert c["paper"] and c["tolerance"] and c["verdict"] in ("pass", "-")


def test_headline_numbers(quick) -> None:
    _, report = quick
    assert abs(check(report, "fig8", "contiguous 8 KB")["measured"] - 5.93) <= 0.15
    assert abs(check(report, "fig8", "d=2 (b=8): penalty")["measured"] - 16) <= 4
    assert abs(check(report, "fig8", "d=4 (b=4): penalty")["measured"] - 38) <= 4
    assert check(report, "table2", "D (linear)")["measured"] == 5
    assert check(report, "table2", "outer zone: b at d = D")["measured"] == 26
    assert abs(check(report, "fig11", "d=4 / NSM (one-disk")["measured"] - 8.32 / 5.76) <= 0.1
    assert abs(check(report, "fig11", "d=2 / NSM (one-disk")["measured"] - 6.56 / 5.76) <= 0.1
    assert check(report, "integrity", "d=4 (b=1): row-major")["measured"] is True


def test_lost_values_are_marked_lost(quick) -> None:
    _, report = quick
    naive = check(report, "fig8", "naive d=4")
    assert naive["paper"] == "lost in the source" and naive["verdict"] == "-"


def test_report_checks_and_table() -> None:
    ok, bad = near("x", "a", 5.93, 6.0, "ms", 0.15), between("x", "b", "> 1/3", 20.0, "%", 30, None)
    assert ok.passed and bad.passed is False
    text = table([ok, bad])
    assert "5.930 ms" in text and "FAIL" in text and "> 1/3" in text


def test_lineitem_is_deterministic_and_round_trips() -> None:
    a, b = list(lineitem.rows(500, seed=3)), list(lineitem.rows(500, seed=3))
    assert a == b and len(a) == 500 and len(a[0].values) == len(lineitem.ATTRIBUTES) == 16
    raw = b"".join(lineitem.encode(i, v) for i, v in enumerate(a[7].values))
    assert len(raw) == lineitem.RECORD == 128
    got = [lineitem.decode(i, raw[i * 8:(i + 1) * 8]) for i in range(16)]
    assert got[:13] == list(a[7].values[:13])  # numbers and dates exactly; text cut to 8 characters
    assert all(r.values[10] < r.values[12] for r in a)  # shipped before received


def test_pax_page_is_every_pw_th_vlbn_and_blocks_are_rectangles() -> None:
    pax = PAX(rows=200_000, p=4, w=686, b=1, d=4)
    assert pax.k == 16 and pax.disks == 4
    page = 3000  # second block
    vlbns = [pax.vlbn(page, m) for m in range(16)]
    assert all(b - a == pax.pw for a, b in zip(vlbns, vlbns[1:], strict=False))
    assert pax.row(1, 5) <= pax.vlbn(page, 5) < pax.row(1, 5) + pax.pw
    one_disk = PAX(rows=200_000, p=4, w=171, b=4, d=4)
    assert one_disk.k == 4 and one_disk.disks == 1


def test_transform_merges_then_splits_at_stripe_units() -> None:
    io = traces.IO
    trace = [io("t", 0, 512, False), io("t", 512, 512, False), io("i", 9000, 16, True), io("t", 1024, 512, False)]
    merged = traces.merge(trace)
    assert [(m.lbn, m.count) for m in merged] == [(0, 1024), (9000, 16), (1024, 512)]
    pieces = traces.transform(trace, 686)
    assert [(p.lbn, p.count) for p in pieces] == [(0, 686), (686, 338), (9000, 16), (1024, 348), (1372, 164)]
    assert all(p.lbn // 686 == (p.lbn + p.count - 1) // 686 for p in pieces)  # none crosses a unit


def test_query_traces_have_the_papers_random_shares() -> None:
    shares = {q: traces.random_share(traces.transform(traces.query_trace(q, 0.05), 686), 686)
              for q in ("Q1", "Q14", "Q17")}
    assert shares["Q1"] < 0.01 and shares["Q14"] > 0.9 and shares["Q17"] > 0.95
