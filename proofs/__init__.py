"""Proofs as code: one module per statement of MATH.md section 6.

Each statement module has the informal statement (LaTeX) in its docstring and a ``check()``
returning a :class:`proofs.result.CheckResult`: ``status`` is ``proved`` when a symbolic argument
(sympy) covers the statement for all inputs, ``verified`` when it rests on an exhaustive exact
check over all supports up to a stated size (or a numerical sweep, said so in ``method``), and
``failed`` when a counterexample was found. Every module also refutes a *perturbed* statement (a
dropped min, swapped p and q, a wrong residual, always-accept ...) with a concrete
counterexample, which shows the checker is not vacuous.

:mod:`proofs.registry` lists them all; ``rdk-theory prove`` runs them.
"""
from .registry import STATEMENTS, run_all
from .result import CheckResult

__all__ = ["STATEMENTS", "CheckResult", "run_all"]
