"""``--before DIR`` of the benchmarks: another checkout of traxfs (``DIR/traxfs``, the code
before a change, built) measured beside this one in the same run, its children started with
that package first on the import path."""

from __future__ import annotations

import os


def checkout_problem(before: str | os.PathLike, needs: str) -> str | None:
    """Why ``before`` is no usable checkout (the file ``needs``, relative to the package, is
    missing), as the option's error; None if it is one."""
    package = os.path.join(before, "traxfs")
    if not os.path.isfile(os.path.join(package, needs)):
        return f"--before {before}: no traxfs checkout at {package}"
    return None


def child_env(before: str | os.PathLike | None) -> dict[str, str] | None:
    """The environment of a child process that imports the traxfs of ``before`` (None: this
    one, the environment inherited)."""
    if before is None:
        return None
    path = os.environ.get("PYTHONPATH")
    return dict(os.environ, PYTHONPATH=str(before) + (os.pathsep + path if path else ""))
