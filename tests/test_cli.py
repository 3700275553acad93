"""The trax command as a user drives it: real processes, real image files.

Bad input must give a clear message on stderr, a non-zero exit, and change nothing — checked by
hashing every device image and the device list before and after.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from traxfs.tools.cli import build_parser, main
from traxfs.tools.cli_types import size

pytestmark = pytest.mark.timeout(120)
REPO = Path(__file__).resolve().parent.parent


def trax(home: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "traxfs.tools.cli", "--home", str(home), *args],
                          capture_output=True, text=True, timeout=60)


def ok(home: Path, *args: str) -> str:
    p = trax(home, *args)
    assert p.returncode == 0, p.stderr
    return p.stdout


def state(tmp: Path) -> dict[str, str]:
    return {str(f): hashlib.sha256(f.read_bytes()).hexdigest()
            for f in sorted(tmp.rglob("*")) if f.is_file() and "locks" not in f.parts}


@pytest.fixture
def group(tmp_path: Path) -> tuple[Path, list[str]]:
    """Built in-process (fast); the commands under test run as real processes."""
    home = tmp_path / "home"
    disks = [str(tmp_path / f"d{i}.img") for i in range(4)]
    assert main(["--home", str(home), "pv", "create", *disks, "--size", "32M"]) == 0
    assert main(["--home", str(home), "vg", "create", "vg0", *disks]) == 0
    assert main(["--home", str(home), "lv", "create", "vg0/data", "--size", "16M", "--layout", "striped"]) == 0
    return home, disks


def test_lifecycle_and_json(group: tuple[Path, list[str]], tmp_path: Path) -> None:
    home, disks = group
    ok(home, "lv", "create", "vg0/m", "--size", "8M", "--layout", "traxtent", "--mirror")
    lvs = json.loads(ok(home, "--json", "lv", "list"))
    assert {(d["name"], d["layout"], d["mirror"]) for d in lvs} == {("data", "striped", False), ("m", "traxtent", True)}
    ok(home, "lv", "extend", "vg0/data", "--size", "32M")
    ok(home, "lv", "rename", "vg0/data", "bulk")
    shown = json.loads(ok(home, "--json", "lv", "show", "vg0/bulk"))
    assert shown["size"] == 32 << 20 and shown["stripes"] == 4
    extra = str(tmp_path / "d4.img")
    ok(home, "pv", "create", extra, "--size", "32M")
    ok(home, "vg", "extend", "vg0", extra)
    ok(home, "vg", "rename", "vg0", "tank")
    vgs = json.loads(ok(home, "--json", "vg", "list"))
    assert [(g["name"], len(g["devices"]), sorted(g["lvs"])) for g in vgs] == [("tank", 5, ["bulk", "m"])]
    ok(home, "lv", "remove", "tank/m")
    assert trax(home, "vg", "remove", "tank").returncode == 1  # still holds bulk
    ok(home, "vg", "remove", "tank", "--force")
    pvs = json.loads(ok(home, "--json", "pv", "list"))
    assert {p["state"] for p in pvs} == {"unused"}
    ok(home, "pv", "remove", extra)
    assert len(json.loads(ok(home, "--json", "pv", "list"))) == 4


BAD = [
    (["lv", "create", "vg0/x", "--size", "10Q"], 2, "invalid size"),
    (["lv", "create", "vg0/x"], 2, "--size"),
    (["lv", "create", "novg", "--size", "1M"], 2, "VG/LV"),
    (["lv", "create", "vg0/x", "--size", "1M", "--layout", "raid5"], 2, "invalid choice"),
    (["lv", "create", "vg0/x", "--size", "1M", "--layout", "striped", "--stripe-unit", "3000"], 1, "power of two"),
    (["lv", "create", "vg0/x", "--size", "1M", "--layout", "striped", "--stripes", "9"], 1, "9 stripes"),
    (["lv", "create", "vg0/x", "--size", "10G"], 1, "not enough free extents"),
    (["lv", "create", "vg0/data", "--size", "1M"], 1, "already has"),
    # malformed names, sizes and numbers are usage errors (2), found before anything runs
    (["lv", "create", "vg0/-bad", "--size", "1M"], 2, "invalid logical volume name"),
    (["lv", "create", "vg0/" + "n" * 300, "--size", "1M"], 2, "invalid logical volume name"),
    (["lv", "create", "vg0/x", "--size", "0"], 2, "a size must be positive"),
    (["lv", "create", "vg0/x", "--size=-1M"], 2, "invalid size"),
    (["lv", "create", "vg0/x", "--size", "1M", "--stripes", "0"], 2, "at least 1"),
    (["lv", "rename", "vg0/data", "a/b"], 2, "invalid logical volume name"),
    (["lv", "expose", "vg0/data", "{tmp}", "--name", "a/b"], 2, "invalid file name"),
    (["vg", "create", "-x", "d.img"], 2, "the following arguments are required"),
    (["vg", "create", "x y", "d.img"], 2, "invalid volume group name"),
    (["pv", "create", "{tmp}/new.img", "--cylinders-per-zone", "4"], 2, "applies to simulated disks"),
    (["pv", "create", "{tmp}/new.img", "--model", "atlas10k3", "--cylinders-per-zone", "0"], 2, "at least 1"),
    (["mount", "vg0/data", "{tmp}", "--commit-interval", "0"], 2, "give seconds from 0.01 to 3600"),
    (["mount", "vg0/data", "{tmp}", "--commit-interval", "-1"], 2, "give seconds from 0.01 to 3600"),
    (["mount", "vg0/data", "{tmp}", "--commit-interval", "inf"], 2, "give seconds from 0.01 to 3600"),
    (["umount", "{tmp}", "--timeout", "nan"], 2, "invalid duration"),
    # lv expose refuses a mount point it cannot use, before it locks or opens anything
    (["lv", "expose", "vg0/data", "{tmp}/missing"], 1, "{tmp}/missing: mount point does not exist"),
    (["lv", "expose", "vg0/data", "{tmp}/d0.img"], 1, "{tmp}/d0.img: mount point is not a directory"),
    (["lv", "create", "vg0/x", "--size", "4M", "--layout", "striped", "--mirror", "--stripes", "3"], 1,
     "needs 6 devices"),
    (["lv", "extend", "vg0/data", "--size", "4M"], 1, "shrinking"),
    (["lv", "remove", "vg0/nothere"], 1, "no logical volume"),
    (["lv", "resync", "vg0/data"], 1, "not a mirror"),
    (["vg", "create", "vg1", "/nonexistent/disk.img"], 1, "/nonexistent/disk.img"),
    (["vg", "show", "nosuch"], 1, "no volume group named 'nosuch'"),
    (["vg", "rename", "vg0", "bad/name"], 2, "invalid volume group name"),
    (["vg", "create", "vg0", "/dev/null"], 1, "already exists"),
    (["vg", "create", "vg1", "--extent-size", "3M", "x"], 1, "extent size"),
    (["pv", "remove", "/nonexistent"], 1, "/nonexistent"),
    (["frobnicate"], 2, "invalid choice"),
]


@pytest.mark.parametrize(("args", "code", "message"), BAD, ids=[" ".join(a)[:40] for a, _, _ in BAD])
def test_bad_input_changes_nothing(group: tuple[Path, list[str]], tmp_path: Path, args: list[str], code: int,
                                   message: str) -> None:
    home, _ = group
    before = state(tmp_path)
    p = trax(home, *(a.format(tmp=tmp_path) for a in args))
    assert p.returncode == code, (p.stdout, p.stderr)
    assert message.format(tmp=tmp_path) in p.stderr
    assert "Traceback" not in p.stderr
    assert state(tmp_path) == before


def test_device_of_another_group_is_refused_by_name(group: tuple[Path, list[str]], tmp_path: Path) -> None:
    home, disks = group
    before = state(tmp_path)
    for args in (["vg", "create", "vg1", disks[0]], ["pv", "create", disks[1]]):
        p = trax(home, *args)
        assert p.returncode == 1 and disks[args[-1] == disks[1]] in p.stderr and "vg0" in p.stderr
    assert state(tmp_path) == before


def test_every_command_has_a_man_page_and_help() -> None:
    parser = build_parser()
    groups = parser._subparsers._group_actions[0].choices  # noqa: SLF001 - argparse has no public walk
    pages = {p.name: p.read_text() for p in (REPO / "man").iterdir()}
    assert "trax.1" in pages
    for name, sub in groups.items():
        page = next((t for n, t in pages.items() if n.startswith(f"trax-{name}.")), None)
        assert page is not None, f"no man page for trax {name}"
        actions = sub._subparsers._group_actions[0].choices if sub._subparsers else {}  # noqa: SLF001
        for action in actions:
            assert re.search(rf"\b{action}\b", page), f"trax-{name} page does not describe {action}"
            assert trax(Path("/nonexistent-home"), name, action, "--help").returncode == 0


def test_vg_lv_or_path_is_decided_by_what_exists(group: tuple[Path, list[str]], tmp_path: Path) -> None:
    """``A/B`` is a path when it exists (or, for mkfs --size, when its folder does), a volume
    when group A is known; both is ambiguous (exit 2, saying how to write the path)."""
    home, _ = group

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "traxfs.tools.cli", "--home", str(home), *args],
                              capture_output=True, text=True, timeout=60, cwd=tmp_path)

    (tmp_path / "t").mkdir()
    r = run("--json", "mkfs", "t/new.img", "--size", "64M")  # no group t: a new image file in ./t
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["kind"] == "image file" and (tmp_path / "t" / "new.img").stat().st_size == 64 << 20
    (tmp_path / "vg0").mkdir()
    before = state(tmp_path)
    r = run("mkfs", "vg0/new.img", "--size", "64M")
    assert r.returncode == 2 and "'./vg0/new.img' for the path" in r.stderr, r.stderr
    assert state(tmp_path) == before
    r = run("mkfs", "nothere/x.img", "--size", "64M")
    assert r.returncode == 1 and "no volume group named 'nothere'" in r.stderr, r.stderr
    r = run("--json", "mkfs", "./vg0/new.img", "--size", "64M")
    assert r.returncode == 0 and json.loads(r.stdout)["kind"] == "image file", r.stderr
    r = run("--json", "mkfs", "vg0/data", "--log-size", "4M")  # no file vg0/data: the volume
    assert r.returncode == 0 and json.loads(r.stdout)["kind"] == "logical volume", r.stderr


def test_every_argument_says_what_it_takes() -> None:
    """--help explains each argument and option, and every size option says which sizes it takes."""

    def walk(parser: argparse.ArgumentParser, path: str):
        for action in parser._actions:  # noqa: SLF001 - argparse has no public walk
            if isinstance(action, argparse._SubParsersAction):  # noqa: SLF001
                for name, sub in action.choices.items():
                    yield from walk(sub, f"{path} {name}")
            elif not isinstance(action, argparse._HelpAction | argparse._VersionAction):  # noqa: SLF001
                yield path, action

    missing, sizes = [], []
    for path, action in walk(build_parser(), "trax"):
        what = f"{path} {'/'.join(action.option_strings) or action.dest}"
        if not action.help:
            missing.append(what)
        if action.type is size and "K M G T" not in action.help and "power of two" not in action.help:
            sizes.append(what)
    assert not missing, f"arguments without help: {missing}"
    assert not sizes, f"size options that do not say which sizes they take: {sizes}"


def test_json_anywhere_for_every_change_and_every_error(group: tuple[Path, list[str]], tmp_path: Path) -> None:
    """--json is accepted after the command as well as before it; every command that changes
    something prints one JSON document; an error prints {"error", "exit_code"} on stdout (and
    the sentence on stderr)."""
    home, disks = group
    extra = [str(tmp_path / f"e{i}.img") for i in range(2)]

    def doc(*args: str) -> object:
        p = trax(home, *args, "--json")
        assert p.returncode == 0, (args, p.stderr)
        return json.loads(p.stdout)

    assert [d["device"] for d in doc("pv", "create", *extra, "--size", "32M")] == extra
    assert doc("vg", "create", "vg1", extra[0])["vg"] == "vg1"
    assert doc("vg", "extend", "vg1", extra[1])["devices"] == [extra[1]]
    assert doc("lv", "create", "vg1/a", "--size", "8M")["name"] == "a"
    assert doc("lv", "extend", "vg1/a", "--size", "16M")["size"] == 16 << 20
    assert doc("lv", "rename", "vg1/a", "b")["lv"] == "b"
    assert doc("vg", "rename", "vg1", "vg2")["vg"] == "vg2"
    assert doc("lv", "remove", "vg2/b") == {"vg": "vg2", "lv": "b", "message": "logical volume vg2/b removed"}
    assert doc("vg", "remove", "vg2")["vg"] == "vg2"
    assert doc("pv", "remove", extra[0])["device"] == extra[0]
    assert doc("vg", "repair", "vg0") == {"repaired": []}
    for args, code, words in ((["lv", "remove", "vg0/nothere"], 1, "no logical volume"),
                              (["lv", "create", "vg0/x", "--size", "10Q"], 2, "invalid size"),
                              (["frobnicate"], 2, "invalid choice")):
        p = trax(home, *args, "--json")
        assert p.returncode == code, p.stderr
        err = json.loads(p.stdout)
        assert err["exit_code"] == code and words in err["error"] and words in p.stderr, (p.stdout, p.stderr)
