"""Proofs as code: every statement checks out and every negative control is refuted."""
from __future__ import annotations

import json
from fractions import Fraction

import numpy as np
import pytest

import rdk_theory as rt
from proofs.registry import STATEMENTS, module
from rdk_theory.cli import main

IDS = ["L", "A", "O1", "O2", "O3", "O4", "O5", "E", "B", "S", "K"]


def test_registry_lists_all_statements():
    assert list(STATEMENTS) == IDS


@pytest.mark.parametrize("sid", IDS)
def test_statement_checks_out_and_negative_control_refuted(sid):
    res = module(sid).check()
    assert res.id == sid
    assert res.status in ("proved", "verified"), res.to_dict()
    assert res.counterexample is None
    assert res.negative_control == "refuted", res.to_dict()
    assert res.negative_counterexample is not None
    assert res.method and res.cases > 0
    assert module(sid).__doc__ and "math" in module(sid).__doc__  # LaTeX statement


def test_only_E_and_K_rest_on_numerics_or_exhaustion():
    """'proved' is claimed only where a symbolic argument exists (STYLE.md)."""
    for sid in ("E", "K"):
        assert module(sid).check().status == "verified"


def test_a_false_statement_is_reported_failed(monkeypatch):
    """The checker is not vacuous: breaking the core makes L fail with a counterexample."""
    import proofs.lossless as lossless

    def broken(p, r, check=True):  # always accept: the output law is r
        return r

    monkeypatch.setattr(lossless, "step_output_law", broken)
    res = lossless.check()
    assert res.status == "failed" and res.counterexample is not None
    assert not res.ok


def test_prove_cli_json(capsys):
    assert main(["prove", "--json", "--only", "L,A,B"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [s["id"] for s in out["statements"]] == ["L", "A", "B"]
    for s in out["statements"]:
        assert {"id", "title", "status", "method", "negative_control"} <= set(s)


def test_prove_cli_unknown_id(capsys):
    assert main(["prove", "--only", "Z9"]) == 2
    assert "error:" in capsys.readouterr().err


def _fractions(values):
    return np.array([Fraction(v) for v in values], dtype=object)


def test_negative_counterexamples_really_refute_their_perturbed_statements():
    """Re-check, with exact arithmetic written here, that the counterexample each checker
    reports for L, A, O2 and O4 violates the perturbed statement (the checkers' own
    'refuted' flags are not taken on trust)."""
    cx = {sid: module(sid).check().to_dict()["negative_counterexample"]
          for sid in ("L", "A", "O2", "O4")}
    # L, perturbed: on rejection resample from p. Output law: min(p, r) + (1 - alpha) p.
    p, r = _fractions(cx["L"]["p"]), _fractions(cx["L"]["r"])
    alpha = sum(min(a, b) for a, b in zip(p, r))
    law = [min(a, b) + (1 - alpha) * a for a, b in zip(p, r)]
    assert law != list(p) and law == [Fraction(v) for v in cx["L"]["perturbed_output_law"]]
    # A, perturbed: alpha = 1 - TV(p, r) also for a sub-stochastic r.
    p, r = _fractions(cx["A"]["p"]), _fractions(cx["A"]["r"])
    alpha = sum(min(a, b) for a, b in zip(p, r))
    assert sum(r) < 1 and alpha != 1 - sum(abs(a - b) for a, b in zip(p, r)) / 2
    # O2, perturbed: exact RDK with the uniform kernel is capped by p(I) too.
    p, q = _fractions(cx["O2"]["p"]), _fractions(cx["O2"]["q"])
    vm = rt.VocabMap(len(p), cx["O2"]["draft_to_target"])
    n = len(p)
    uniform = np.array([[Fraction(1, n)] * n] * n, dtype=object)
    alpha = rt.acceptance_rate(p, rt.rdk_proposal(q, vm, rt.DenseKernel(uniform)))
    cap = sum(p[i] for i in vm.intersection)
    assert alpha > cap and alpha == Fraction(cx["O2"]["alpha_rdk"])
    # O4, perturbed: moving delta <= r(i) (not only the surplus r(i) - p(i)) from i to j
    # raises alpha by min(delta, p(j) - r(j)).
    c = cx["O4"]
    p, r, delta = _fractions(c["p"]), _fractions(c["r"]), Fraction(c["delta"])
    i, j = c["i"], c["j"]
    moved = r.copy()
    moved[i] -= delta
    moved[j] += delta
    assert delta <= r[i]
    gain = rt.acceptance_rate(p, moved) - rt.acceptance_rate(p, r)
    assert gain != min(delta, p[j] - r[j]) and gain == Fraction(c["gain"])
