"""tools/bench_engine --ops: each store's loop really runs (in its child process) and reports
every operation; bad options are refused before anything runs."""

from __future__ import annotations

import pytest

from traxfs.tools.bench_engine import bench_ops, main

pytestmark = pytest.mark.timeout(120)


def test_each_store_reports_every_operation(tmp_path):
    ops = bench_ops(str(tmp_path), 300, 1, None)
    assert set(ops) == {"traxfs", "sqlite"}
    for row in ops.values():
        assert set(row) == {"put", "get", "overwrite", "delete"} and all(v > 0 for v in row.values())
    assert list(tmp_path.iterdir()) == []  # the stores' files are removed


@pytest.mark.parametrize("argv, message", [
    (["--before", "x"], "--before goes with --ops"),
    (["--ops", "5", "--before", "/nonexistent"], "no traxfs checkout at /nonexistent/traxfs"),
    (["--ops", "-3"], "N must be positive"),
])
def test_bad_options_are_refused(argv, message, capsys, tmp_path):
    with pytest.raises(SystemExit) as e:
        main([*argv, "--workdir", str(tmp_path / "w")])
    assert e.value.code == 2 and message in capsys.readouterr().err
    assert not (tmp_path / "w").exists()
