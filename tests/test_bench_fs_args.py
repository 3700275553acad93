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
