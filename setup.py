"""Builds the Cython hot paths in ext/; everything else is declared in pyproject.toml."""

from pathlib import Path

from setuptools import Extension, setup

try:
    from Cython.Build import cythonize
except ImportError:  # building from an sdist without Cython: there is nothing else to fall back to
    raise SystemExit("building traxfs needs Cython (pip install cython)") from None

sources = sorted(Path("ext").glob("*.pyx"))
extensions = [Extension(f"traxfs.ext.{p.stem}", [str(p)], extra_compile_args=["-O3"]) for p in sources]
setup(ext_modules=cythonize(extensions, language_level=3, quiet=True))
