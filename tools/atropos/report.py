"""Checks of the reproduction: the paper's value beside the measured one, and the tolerance.

Every number an experiment reports is a :class:`Check`. A *held* check has a tolerance and a
verdict; a failed held check makes the benchmark exit non-zero. An unheld check is shown for
information: the paper lost the value in the source text, or the quantity is a model estimate
the paper never gave, or the input behind it is synthesised (TPC-H traces). ``paper`` is the
value as the paper states it (a number, or text such as "< 1%"), or ``None`` when the
extraction lost it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

LOST = "lost in the source"


@dataclass(frozen=True)
class Check:
    experiment: str  # fig7, fig8, ...
    name: str
    paper: float | str | None
    measured: float | bool
    unit: str  # ms, s, %, x, sectors, ...
    tolerance: str  # how it is held, or why it is not
    passed: bool | None  # None: not held

    @property
    def held(self) -> bool:
        return self.passed is not None

    def to_doc(self) -> dict:
        doc = asdict(self)
        doc["paper"] = LOST if self.paper is None else self.paper
        doc["verdict"] = verdict(self)
        return doc


def verdict(c: Check) -> str:
    return "-" if c.passed is None else ("pass" if c.passed else "FAIL")


def near(experiment: str, name: str, paper: float, measured: float, unit: str, tol: float,
         relative: bool = False) -> Check:
    """Held: ``measured`` within ``tol`` of ``paper`` (absolute, or a fraction of it)."""
    slack = tol * abs(paper) if relative else tol
    text = f"±{tol:.0%}" if relative else f"±{tol:g} {unit}"
    return Check(experiment, name, paper, measured, unit, text, abs(measured - paper) <= slack)


def between(experiment: str, name: str, paper: float | str | None, measured: float, unit: str,
            lo: float | None, hi: float | None) -> Check:
    """Held: ``lo <= measured <= hi`` (either bound may be open)."""
    text = (f">= {lo:g}" if hi is None else f"<= {hi:g}" if lo is None else f"{lo:g} .. {hi:g}") + f" {unit}"
    ok = (lo is None or measured >= lo) and (hi is None or measured <= hi)
    return Check(experiment, name, paper, measured, unit, text.strip(), ok)


def shown(experiment: str, name: str, paper: float | str | None, measured: float, unit: str,
          why: str) -> Check:
    """Not held: shown beside the paper (or beside nothing) with the reason."""
    return Check(experiment, name, paper, measured, unit, why, None)


def _fmt(v: float | bool | str | None, unit: str) -> str:
    if v is None:
        return LOST
    if isinstance(v, str):
        return v
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, int) or (unit in ("", "sectors") and float(v).is_integer()):
        return f"{int(v)} {unit}".strip()
    if unit == "%":
        return f"{v:.1f} %"
    digits = 3 if abs(v) < 10 else 2 if abs(v) < 100 else 1 if abs(v) < 10_000 else 0
    return f"{v:,.{digits}f} {unit}".strip()


def table(checks: list[Check]) -> str:
    """The printed table: one line per check, grouped by experiment."""
    head = ("experiment", "quantity", "paper", "measured", "tolerance", "verdict")
    rows = [(c.experiment, c.name, _fmt(c.paper, c.unit), _fmt(c.measured, c.unit), c.tolerance, verdict(c))
            for c in checks]
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
    line = "  ".join("-" * w for w in widths)
    out = ["  ".join(h.ljust(w) for h, w in zip(head, widths, strict=True)), line]
    last = None
    for r in rows:
        if last is not None and r[0] != last:
            out.append("")
        out.append("  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip())
        last = r[0]
    return "\n".join(out)
