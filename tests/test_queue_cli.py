"""`trax queue create|list|show|remove` as a user runs them: real processes on a real mount.
Bad input: a clear message, a non-zero exit, and nothing changed."""

from __future__ import annotations

import json
import os

import pytest
from fsmount import trax, traxfs_mount
from queue_paths import append, lines

MiB = 1 << 20
pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def m(tmp_path_factory):
    with traxfs_mount(tmp_path_factory.mktemp("queue-cli"), size=128 * MiB) as mount:
        yield mount


def run(m, *args: str):
    return trax(*args, home=m.home, check=False, timeout=60)


def test_create_list_show_remove(m):
    path = m.mp / "queues" / "events"
    r = run(m, "queue", "create", str(path), "--block-size", "64K", "--retain-age", "2h", "--retain-count", "10M",
            "--seal-bytes", "32M", "--seal-seconds", "3")
    assert r.returncode == 0, r.stderr
    cfg = json.loads((path / "config.json").read_bytes())
    assert cfg == {"block_size": 65536, "max_record_bytes": MiB, "retain_age_seconds": 7200,
                   "retain_count": 10_000_000, "seal_bytes": 32 * MiB, "seal_seconds": 3}
    os.mkdir(path / "views" / "billing")
    append(path, lines(0, 50))
    run(m, "queue", "create", str(m.mp / "queues" / "other"))
    listed = json.loads(run(m, "--json", "queue", "list", str(m.mp)).stdout)
    assert [(d["name"], d["records"], list(d["views"])) for d in listed] == [("events", 50, ["billing"]),
                                                                            ("other", 0, [])]
    text = run(m, "queue", "list", str(m.mp / "queues")).stdout
    assert text.splitlines()[0].split()[:3] == ["QUEUE", "RECORDS", "BYTES"] and "events" in text
    shown = json.loads(run(m, "queue", "show", "--json", str(path)).stdout)
    assert shown["views"]["billing"] == {"head": 0, "lag": 50, "window": [0, 50], "created_ms":
                                         shown["views"]["billing"]["created_ms"]}
    text = run(m, "queue", "show", str(path)).stdout
    assert "billing" in text and "0..49" in text
    for name in ("events", "other"):
        r = run(m, "queue", "remove", str(m.mp / "queues" / name))
        assert r.returncode == 0, r.stderr
    assert os.listdir(m.mp / "queues") == []
    assert "no queues" in run(m, "queue", "list", str(m.mp)).stdout


@pytest.mark.parametrize("args, code, words", [
    (["create", "{q}", "--block-size", "1000"], 2, "block_size"),  # the queue's own rule
    (["create", "{q}", "--retain-age", "forever"], 2, "retain-age"),  # argparse
    (["create", "{mp}/notqueues/x"], 2, "MOUNT/queues/NAME"),
    (["create", "{mp}/queues/exists"], 1, "File exists"),
    (["show", "{mp}/queues/missing"], 1, "No such file"),
    (["remove", "{mp}/queues/missing"], 1, "No such file"),
])
def test_bad_input_changes_nothing(m, args, code, words):
    os.makedirs(m.mp / "queues" / "exists", exist_ok=True)
    before = sorted(os.listdir(m.mp / "queues"))
    cfg = (m.mp / "queues" / "exists" / "config.json").read_bytes()
    argv = [a.format(q=m.mp / "queues" / "new", mp=m.mp) for a in args]
    r = run(m, "--json", "queue", *argv)
    assert r.returncode == code, (r.stdout, r.stderr)
    assert words in r.stderr
    assert json.loads(r.stdout)["exit_code"] == code
    assert sorted(os.listdir(m.mp / "queues")) == before
    assert (m.mp / "queues" / "exists" / "config.json").read_bytes() == cfg
