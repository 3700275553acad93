"""The package list in pyproject.toml names every package folder, so a regular (non-editable)
install carries all of traxfs: a folder left out installs without complaint and fails only when
its import runs on the user's machine."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SKIP = {".venv", "work", "tests", "build", ".git"}


def package_folders() -> set[str]:
    found = set()
    for init in ROOT.rglob("__init__.py"):
        rel = init.parent.relative_to(ROOT)
        if rel.parts and (rel.parts[0] in SKIP or rel.parts[0].startswith(".")):
            continue
        found.add(".".join(("traxfs", *rel.parts)))
    return found


def test_every_package_folder_is_installed():
    declared = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    folders = package_folders()
    assert folders - declared == set(), "package folders missing from pyproject.toml's packages"
    assert declared - folders == set(), "packages in pyproject.toml with no folder"
