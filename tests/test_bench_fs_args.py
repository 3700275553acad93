"""tools/bench_fs refuses bad options with a clear message before it creates or mounts anything."""

import pytest

from traxfs.tools import bench_fs


@pytest.mark.parametrize("argv, message", [
    (["--jobs", "create_1K,bogus"], "unknown jobs ['bogus']"),
    (["--jobs", ","], "unknown jobs []"),
    (["--rounds", "0"], "--rounds and --files must be at least 1"),
    (["--files", "0"], "--rounds and --files must be at least 1"),
    (["--before", "/nonexistent-checkout"], "no traxfs checkout at /nonexistent-checkout/traxfs"),
])
def test_bad_options_are_refused_before_any_work(argv, message, tmp_path, capsys):
    work = tmp_path / "work"
    with pytest.raises(SystemExit) as e:
        bench_fs.main([*argv, "--workdir", str(work)])
    assert e.value.code == 2
    assert message in capsys.readouterr().err
    assert not work.exists()  # nothing created


def test_a_job_subset_keeps_the_table_order():
    assert bench_fs._job_list("unlink,seq_write_1M") == ("seq_write_1M", "unlink")


def test_the_table_keeps_its_columns_when_a_median_is_a_long_float():
    """An even number of rounds makes a median the mean of two: 185.85000000000002 once ran
    into the column before it."""
    med = {"seq_write_1M": {"median": 185.85000000000002, "runs": []}}
    report = {"targets": {"direct": med, "passthrough": med, "traxfs": med}, "rounds": 2,
              "load_before": (0, 0, 0), "load_after": (0, 0, 0)}
    row = bench_fs.table(report).splitlines()[1]
    assert "185.9" in row and "185.85000000000002" not in row
    assert row.split()[2:5] == ["185.9", "185.9", "185.9"]
