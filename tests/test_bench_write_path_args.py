"""tools/bench_write_path refuses bad options with a clear message before it runs anything."""

import pytest

from traxfs.tools import bench_write_path


@pytest.mark.parametrize("argv, message", [
    (["--runs", "0"], "--runs must be at least 1"),
    (["--before", "/nonexistent-checkout"], "no traxfs checkout at /nonexistent-checkout/traxfs"),
    (["--workdir", "/nonexistent-dir"], "--workdir /nonexistent-dir: no such directory"),
])
def test_bad_options_are_refused_before_any_work(argv, message, capsys, monkeypatch):
    monkeypatch.setattr(bench_write_path, "run_once", lambda *a: pytest.fail("a run started"))
    with pytest.raises(SystemExit) as e:
        bench_write_path.main(argv)
    assert e.value.code == 2
    assert message in capsys.readouterr().err
