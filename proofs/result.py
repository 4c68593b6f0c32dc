"""The structured result of one statement check."""
from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field
from fractions import Fraction
from typing import Any, Callable

STATUSES = ("proved", "verified", "failed")


def show(x) -> Any:
    """A JSON-friendly rendering of counterexample values (Fractions as 'a/b' strings)."""
    if isinstance(x, Fraction):
        return str(x)
    if hasattr(x, "tolist"):
        return show(x.tolist())
    if isinstance(x, dict):
        return {str(k): show(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [show(v) for v in x]
    if isinstance(x, float):
        # strict JSON has no NaN or infinity: name them ("nan", "inf", "-inf") instead
        return float(f"{x:.12g}") if math.isfinite(x) else str(x)
    if hasattr(x, "is_Number"):  # sympy number
        return str(x)
    if isinstance(x, (int, str, bool)) or x is None:
        return x
    try:
        return show(float(x))
    except (TypeError, ValueError):
        return str(x)


@dataclass
class CheckResult:
    """Outcome of ``check()`` for one statement.

    Attributes:
      id: statement id of MATH.md section 6 (L, A, O1 ... K).
      title: one line.
      status: ``proved`` | ``verified`` | ``failed``.
      method: how it was checked (symbolic route, exhaustive grid and its size, sweep ...).
      counterexample: inputs violating the statement (only when ``failed``).
      perturbed: the perturbed statement used as negative control.
      negative_control: ``refuted`` when a counterexample to ``perturbed`` was found, else
        ``not refuted`` (which makes the whole check suspect).
      negative_counterexample: the concrete counterexample to the perturbed statement.
      cases: how many concrete instances the exhaustive part examined.
      seconds: wall time of the check.
      notes: anything a reader should know (side conditions found, etc.).
    """

    id: str
    title: str
    status: str
    method: str
    perturbed: str
    negative_control: str
    counterexample: Any = None
    negative_counterexample: Any = None
    cases: int = 0
    seconds: float = 0.0
    notes: str = ""

    def __post_init__(self):
        if self.status not in STATUSES:
            raise ValueError(f"status must be one of {STATUSES}, got {self.status!r}")

    @property
    def ok(self) -> bool:
        return self.status != "failed" and self.negative_control == "refuted"

    def to_dict(self) -> dict:
        d = asdict(self)
        d["counterexample"] = show(self.counterexample)
        d["negative_counterexample"] = show(self.negative_counterexample)
        d["seconds"] = round(self.seconds, 3)
        return d


@dataclass
class Outcome:
    """Accumulates one check: claimed status, method pieces, cases and counterexamples."""

    claim: str  # "proved" or "verified"
    methods: list = field(default_factory=list)
    cases: int = 0
    counterexample: Any = None
    negative: Any = None
    notes: list = field(default_factory=list)

    def fail(self, example) -> None:
        if self.counterexample is None:
            self.counterexample = example

    def require_steps(self, steps) -> None:
        """Fail with the names of the symbolic steps (a :class:`proofs.symbolic.Steps`) that
        sympy could not establish, if any."""
        if not steps.ok:
            self.fail(steps.counterexample())

    def refute(self, example) -> None:
        if self.negative is None:
            self.negative = example


def run_check(sid: str, title: str, perturbed: str, body: Callable[[Outcome], None], claim: str) -> CheckResult:
    """Run ``body(outcome)`` and turn it into a :class:`CheckResult`; an exception raised by
    the body fails the statement, with the error as its counterexample (the other statements
    still run)."""
    t0 = time.perf_counter()
    out = Outcome(claim)
    try:
        body(out)
    except Exception as exc:  # a core function that raises fails its statement, and only it
        out.fail({"error": f"{type(exc).__name__}: {exc}"})
    status = "failed" if out.counterexample is not None else out.claim
    return CheckResult(
        id=sid, title=title, status=status, method="; ".join(out.methods), perturbed=perturbed,
        negative_control="refuted" if out.negative is not None else "not refuted",
        counterexample=out.counterexample, negative_counterexample=out.negative,
        cases=out.cases, seconds=time.perf_counter() - t0, notes=" ".join(out.notes),
    )
