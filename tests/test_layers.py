"""The layers import one way, the whole tree through: ext (Cython) → disk model → volume manager →
engine → structures → filesystem (with its subtrees: queues, tables, snapshots, status) → FUSE
adapter → tools; each module imports only from its own layer and those below it, and every folder
belongs to a layer. The code above the engine reaches it through its public face, never through
its parts (the buffer, the log, the allocator, the device).

Imports are read from the source (``ast``), function-level ones included, so an import that
runs only on some path is caught as well; a relative import is resolved against its module."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "traxfs"

# The layers, bottom to top. A module may import from its own layer and the layers below it;
# anything outside the package is free. Every folder of the package belongs to exactly one layer,
# so a new folder must be placed here before its first import is accepted.
LAYERS = (
    ("ext", ("ext",)),                       # Cython hot paths: import nothing of the package
    ("disk model", ("volume/disk",)),
    ("volume manager", ("volume", "volume/layout")),
    ("engine", ("fs/engine",)),
    ("structures", ("fs/struct",)),
    ("filesystem", ("fs", "fs/subtrees", "fs/queues", "fs/tables")),
    ("FUSE adapter", ("fs/fuse",)),
    ("tools", ("tools", "tools/atropos", "tools/pipeline")),
)
RANK = {folder: rank for rank, (_, folders) in enumerate(LAYERS) for folder in folders}
LAYER_NAME = {folder: name for name, folders in LAYERS for folder in folders}


def layer_of_module(module: str) -> str | None:
    """The folder (a key of RANK) a module ``traxfs.a.b.c`` lives in: the longest known prefix."""
    parts = module.split(".")[1:]
    for n in range(len(parts), 0, -1):
        folder = "/".join(parts[:n])
        if folder in RANK:
            return folder
    return None


def package_folders() -> list[str]:
    """Every folder of the package that holds Python code (tests and build output aside)."""
    found = set()
    for path in ROOT.rglob("*.py"):
        rel = path.relative_to(ROOT)
        if rel.parts[0] in ("tests", "build", ".ci", "man") or rel.parts[0].startswith(".") or len(rel.parts) == 1:
            continue
        found.add("/".join(rel.parts[:-1]))
    return sorted(found)


def upward_imports(folder: str) -> list[str]:
    """Imports from ``folder``'s modules of anything in a layer above it (or in no layer)."""
    found = []
    for path in sorted((ROOT / folder).glob("*.py")):
        for line, module in imports(path):
            if not (module == PACKAGE or module.startswith(PACKAGE + ".")):
                continue
            target = layer_of_module(module)
            if target is None:
                if module.split(".")[1] in ("__version__",):  # the package's own attributes
                    continue
                found.append(f"{path.relative_to(ROOT)}:{line}: imports {module}, which is in no layer")
            elif RANK[target] > RANK[folder]:
                found.append(f"{path.relative_to(ROOT)}:{line}: imports {module} "
                             f"({LAYER_NAME[target]}, above {LAYER_NAME[folder]})")
    return found


def test_every_folder_has_a_layer():
    assert [f for f in package_folders() if f not in RANK] == []


@pytest.mark.parametrize("folder", [f for f in package_folders() if f in RANK])
def test_a_layer_imports_only_from_below(folder):
    assert upward_imports(folder) == []


def test_the_extensions_import_nothing_of_the_package():
    """Cython modules are the bottom layer: a ``.pyx`` that imported the package would tie the
    hot paths to the code they serve."""
    hits = []
    for path in sorted((ROOT / "ext").glob("*.pyx")):
        for n, line in enumerate(path.read_text().splitlines(), 1):
            words = line.split()
            if words[:1] in (["import"], ["from"], ["cimport"]) and len(words) > 1 and words[1].startswith("traxfs"):
                hits.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()}")
    assert hits == []


# the engine's parts: what code above it must not reach into
ENGINE_PARTS = {"dev", "alloc", "log", "buffer", "store"}
ENGINE_NAMES = {"engine", "eng", "e"}  # how code above names an engine (``fs.e``, ``self.e``)


def _module_name(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = [PACKAGE, *rel.parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path, source: str | None = None) -> list[tuple[int, str]]:
    """(line, module) of every import in ``path`` (or in ``source``, as if it were that file's);
    ``from a import b`` yields ``a.b`` (b may be a submodule), relative imports resolved."""
    out = []
    package = _module_name(path).split(".")
    if path.name != "__init__.py":
        package = package[:-1]
    for node in ast.walk(ast.parse(path.read_text() if source is None else source, str(path))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package[: len(package) - (node.level - 1)]
                base = ".".join([*anchor, *([base] if base else [])])
            out += [(node.lineno, f"{base}.{alias.name}") for alias in node.names]
    return out


def test_relative_imports_are_resolved():
    """The checker sees through ``from ..x import y`` (the tree may move to relative imports)."""
    source = "from ..struct import btree\nfrom . import page\nfrom .page import PAGE_SIZE\n"
    assert imports(ROOT / "fs" / "engine" / "engine.py", source) == [
        (1, "traxfs.fs.struct.btree"), (2, "traxfs.fs.engine.page"), (3, "traxfs.fs.engine.page.PAGE_SIZE")]
    assert imports(ROOT / "fs" / "struct" / "__init__.py", "from . import btree\n") == [(1, "traxfs.fs.struct.btree")]


def reaches_into_the_engine(path: Path) -> list[str]:
    """``engine.buffer``, ``fs.e.log``, ``self.e.alloc``, ``....sb.pages_offset``: code above the
    engine using its parts instead of its public calls."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if not isinstance(node, ast.Attribute):
            continue
        owner = node.value
        named = owner.id if isinstance(owner, ast.Name) else owner.attr if isinstance(owner, ast.Attribute) else None
        if node.attr in ENGINE_PARTS and named in ENGINE_NAMES or node.attr == "pages_offset" and named == "sb":
            found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_code_above_the_engine_uses_its_public_face():
    paths = [p for p in sorted((ROOT / "fs").rglob("*.py")) if "engine" not in p.relative_to(ROOT / "fs").parts]
    assert [hit for p in paths for hit in reaches_into_the_engine(p)] == []


@pytest.mark.timeout(60)
def test_opening_an_engine_loads_no_structure(tmp_path):
    """At run time too: an engine formatted, opened (recovery included), checked and closed
    without any module above it being imported."""
    code = f"""
import sys
from traxfs.fs.engine.check import check_engine
from traxfs.fs.engine.engine import Engine
from traxfs.volume.device import create_image
dev = create_image({str(tmp_path / "e.img")!r}, 16 << 20)
Engine.format(dev, log_size=1 << 20)
eng = Engine.open(dev)
assert check_engine(eng) == []
eng.close()
above = sorted(m for m in sys.modules if m.startswith("traxfs.") and not m.startswith(
    ("traxfs.fs.engine", "traxfs.volume", "traxfs.ext")) and m not in ("traxfs.fs",))
print(above)
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]"
