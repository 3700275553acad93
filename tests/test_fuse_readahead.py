"""The mount's read-ahead window (fs/fuse/mount.py ``widen_readahead``): 1 MiB instead of the
kernel's 128 KiB, set on the mount's backing device once the mount is live (root only)."""

import os

import pytest

from traxfs.fs.fuse.mount import READ_AHEAD_KB, widen_readahead


def _knob(path) -> str:
    dev = os.stat(path).st_dev
    return f"/sys/class/bdi/{os.major(dev)}:{os.minor(dev)}/read_ahead_kb"


@pytest.mark.skipif(os.geteuid() != 0, reason="only root may change a device's read-ahead")
def test_the_mount_reads_ahead_one_mebibyte(fs_mount, mnt):
    if fs_mount is None:
        pytest.skip("the host filesystem keeps its own read-ahead")
    with open(_knob(mnt)) as f:
        assert int(f.read()) == READ_AHEAD_KB == 1024


def test_a_device_without_the_knob_changes_nothing(tmp_path):
    """/proc has no backing device in /sys/class/bdi: nothing is written, no error."""
    assert widen_readahead("/proc") is False
