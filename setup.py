"""Builds the Cython hot paths in ext/; everything else is declared in pyproject.toml."""

import shlex
import subprocess
from pathlib import Path

from setuptools import Extension, setup

try:
    from Cython.Build import cythonize
except ImportError:  # building from an sdist without Cython: there is nothing else to fall back to
    raise SystemExit("building traxfs needs Cython (pip install cython)") from None


def fuse3_build_args() -> dict:
    """Headers and library of libfuse 3, for the one extension that calls it directly."""
    try:
        flags = subprocess.run(["pkg-config", "--cflags-only-I", "fuse3"], capture_output=True, text=True,
                               check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        raise SystemExit("building traxfs needs libfuse 3's headers and pkg-config "
                         "(Debian: apt-get install libfuse3-dev pkg-config)") from None
    return {"include_dirs": [f[2:] for f in shlex.split(flags) if f.startswith("-I")], "libraries": ["fuse3"]}


def package_include_dir() -> str:
    """A directory in which ``traxfs`` names this checkout: Cython finds a ``.pxd`` by its full
    name (``traxfs/ext/logbuffer.pxd``), and the checkout root is the package ``traxfs`` under
    whatever name the checkout's directory has."""
    link = Path("build", "cython-include", "traxfs")
    link.parent.mkdir(parents=True, exist_ok=True)
    if not link.is_symlink():
        link.symlink_to(Path.cwd().resolve(), target_is_directory=True)
    return str(link.parent)


# per-extension extras: fuse_lowlevel adds FUSE operations pyfuse3 lacks (it links libfuse 3)
EXTRA = {"fuse_lowlevel": fuse3_build_args}
sources = sorted(Path("ext").glob("*.pyx"))
extensions = [Extension(f"traxfs.ext.{p.stem}", [str(p)], extra_compile_args=["-O3"],
                        **(EXTRA[p.stem]() if p.stem in EXTRA else {})) for p in sources]
setup(ext_modules=cythonize(extensions, language_level=3, quiet=True, include_path=[package_include_dir()]))
