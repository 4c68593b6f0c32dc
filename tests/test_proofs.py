"""Proofs as code: every statement checks out and every negative control is refuted."""
from __future__ import annotations

import itertools
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


def test_O5_concavity_leg_fails_on_an_alpha_that_is_not_concave(monkeypatch):
    """O5's midpoint check is not vacuous: a bump lam (lam - LAM) (lam - 1), zero at the
    points the derivative leg uses (0 and LAM) and at 1 but negative at 1/2, breaks midpoint
    concavity and only that; the checker reports it."""
    import proofs.first_order_gain as gain

    exact = gain.alpha_of_lambda

    def bumped(p, q_prime, k_matrix, lam):
        lam = Fraction(lam)
        return exact(p, q_prime, k_matrix, lam) + lam * (lam - gain.LAM) * (lam - 1)

    monkeypatch.setattr(gain, "alpha_of_lambda", bumped)
    res = gain.check()
    assert res.status == "failed" and "concavity" in res.counterexample


def test_prove_cli_json(capsys):
    assert main(["prove", "--json", "--only", "L,A,B,L, A"]) == 0  # a repeat runs once
    out = json.loads(capsys.readouterr().out)
    assert [s["id"] for s in out["statements"]] == ["L", "A", "B"]
    for s in out["statements"]:
        assert {"id", "title", "status", "method", "negative_control"} <= set(s)


@pytest.mark.parametrize("terminal", [True, False])
def test_prove_counts_its_statements_on_a_terminal_only(capsys, monkeypatch, terminal):
    """A whole run is 12-30 silent seconds: on a terminal (forced by RDK_THEORY_PROGRESS=1) a
    bar counts the statements on stderr; a pipe gets nothing there."""
    if terminal:
        pytest.importorskip("tqdm")  # the bar (extra 'plot')
        monkeypatch.setenv("RDK_THEORY_PROGRESS", "1")
    else:
        monkeypatch.delenv("RDK_THEORY_PROGRESS", raising=False)
    assert main(["prove", "--json", "--only", "A,B"]) == 0
    err = capsys.readouterr().err
    # the bar's first frame (drawn when it is made; later frames depend on the clock)
    assert ("statements:   0%" in err and "| 0/2 [" in err) if terminal else err == ""


def test_python_m_proofs_runs_what_rdk_theory_prove_runs(capsys):
    from proofs.__main__ import main as module_main

    assert module_main(["--json", "--only", "A"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [s["id"] for s in out["statements"]] == ["A"] and out["ok"] is True
    assert module_main(["--only", "Z9"]) == 2  # bad input: one line, exit 2, as `prove`
    assert capsys.readouterr().err.startswith("error: unknown statement id")
    with pytest.raises(SystemExit) as exc:  # argparse's usage error, in the one-line form
        module_main(["--bogus"])
    assert exc.value.code == 2
    assert capsys.readouterr().err.strip() == ("error: python -m proofs: unrecognized arguments: "
                                               "--bogus (see 'python -m proofs --help')")


@pytest.mark.parametrize("only, message", [("Z9", "unknown statement id"),
                                           ("", "names no statement"), (" , ", "names no statement")])
def test_prove_cli_refuses_ids_that_name_nothing(capsys, only, message):
    # an empty list used to run every statement, as if --only were not given
    assert main(["prove", "--only", only]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and message in err[0], err


def test_prove_cli_without_sympy_is_a_one_line_error(capsys, monkeypatch):
    """sympy is the 'proofs' extra: without it `prove` was a 32-line traceback and exit 1,
    the status of a failed statement. Now exit 2 and the pip command."""
    import sys

    for name in [m for m in sys.modules if m.startswith("proofs.") and m not in
                 ("proofs.cli", "proofs.registry", "proofs.result")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "sympy", None)  # import sympy -> ModuleNotFoundError
    assert main(["prove", "--only", "L"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["error: sympy is not installed (pip install 'rdk-theory[proofs]')"], err


def test_prove_cli_names_a_negative_control_that_was_not_refuted(capsys, monkeypatch):
    """A statement whose check passes but whose perturbed statement is not refuted exits 1;
    the summary said '0 failed' and printed 'counterexample: None'."""
    from proofs.result import Outcome

    monkeypatch.setattr(Outcome, "refute", lambda self, example: None)
    assert main(["prove", "--only", "A"]) == 1
    out = capsys.readouterr().out
    assert "0 of 1 negative controls refuted" in out
    assert "A: negative control not refuted" in out and "may be vacuous" in out
    assert "counterexample: None" not in out


def test_a_check_that_raises_fails_its_statement_and_the_others_still_run(capsys, monkeypatch):
    """An exception inside one check aborted `prove` with a traceback and no result for the
    statements after it; now that statement fails with the error as its counterexample."""
    import proofs.acceptance_tv as a_tv

    def broken(*args, **kwargs):
        raise RuntimeError("planted")

    monkeypatch.setattr(a_tv, "total_variation", broken)
    assert main(["prove", "--json", "--only", "A,B"]) == 1
    out = json.loads(capsys.readouterr().out)
    a, b = out["statements"]
    assert a["status"] == "failed" and a["counterexample"] == {"error": "RuntimeError: planted"}
    assert b["status"] == "proved" and b["negative_control"] == "refuted"


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


def _alpha(p, r):
    return sum(min(a, b) for a, b in zip(p, r))


def test_remaining_negative_counterexamples_really_refute_their_perturbed_statements():
    """The same re-check for O1, O3, O5, E, B, S and K: each reported counterexample is
    recomputed here from the definitions (MATH.md sections 2-3 and 6) with Fractions, with no
    toolkit function, and must violate its perturbed statement and match the reported numbers."""
    cx = {sid: module(sid).check().to_dict()["negative_counterexample"]
          for sid in ("O1", "O3", "O5", "E", "B", "S", "K")}

    def scatter(q, d2t, n):  # vanilla: q placed on T, mass of absent drafter tokens unplaced
        r = [Fraction(0)] * n
        for qj, t in zip(q, d2t):
            if t >= 0:
                r[t] += qj
        return r

    # O1, perturbed: vanilla >= TLI. TLI is vanilla renormalised by q(I).
    c = cx["O1"]
    p, q = _fractions(c["p"]), _fractions(c["q"])
    van = scatter(q, c["draft_to_target"], len(p))
    tli = [x / sum(van) for x in van]
    assert _alpha(p, van) < _alpha(p, tli)
    assert (_alpha(p, van), _alpha(p, tli)) == (Fraction(c["alpha_vanilla"]), Fraction(c["alpha_tli"]))

    # O3, perturbed: RDK with the uniform kernel equals TLI. Uniform rows move q' to sum(q')/n.
    c = cx["O3"]
    q = _fractions(c["q"])
    van = scatter(q, c["draft_to_target"], len(c["tli"]))
    tli = [x / sum(van) for x in van]
    uni = [sum(tli) / len(tli)] * len(tli)
    assert uni != tli
    assert (uni, tli) == ([Fraction(v) for v in c["rdk_uniform"]], [Fraction(v) for v in c["tli"]])

    # O5, perturbed: tie term without its min. alpha(lam) is piecewise linear in lam, so two
    # equal difference quotients at lam = 1/1000 and 1/2000 are its right derivative at 0.
    c = cx["O5"]
    p, qp = _fractions(c["p"]), _fractions(c["q_prime"])
    k = [[Fraction(v) for v in row] for row in c["K"]]
    n = len(p)
    d = [sum(qp[i] * k[i][j] for i in range(n)) - qp[j] for j in range(n)]

    def quotient(lam):
        return (_alpha(p, [qp[j] + lam * d[j] for j in range(n)]) - _alpha(p, qp)) / lam

    slope = quotient(Fraction(1, 1000))
    assert slope == quotient(Fraction(1, 2000)) == Fraction(c["difference_quotient"])
    wrong = sum(d[j] for j in range(n) if qp[j] <= p[j])
    assert slope != wrong and wrong == Fraction(c["perturbed"])

    # E, perturbed: |alpha(p, a) - alpha(p, b)| <= TV(a, b) / 2.
    c = cx["E"]
    p, a, b = _fractions(c["p"]), _fractions(c["a"]), _fractions(c["b"])
    assert sum(a) == sum(b) == 1
    gap = abs(_alpha(p, a) - _alpha(p, b))
    tv = sum(abs(x - y) for x, y in zip(a, b)) / 2
    assert gap > tv / 2 and (gap, tv / 2) == (Fraction(c["gap"]), Fraction(c["tv/2"]))

    # B, perturbed: 1 + sum_k alpha_k. E[tokens] from the law of the accepted run length.
    c = cx["B"]
    alphas = [Fraction(v) for v in c["alphas"]]
    expected, survive = Fraction(0), Fraction(1)
    for i, a in enumerate(alphas):  # run stops after i accepted drafts: i + 1 tokens
        expected += survive * (1 - a) * (i + 1)
        survive *= a
    expected += survive * (len(alphas) + 1)
    assert expected != 1 + sum(alphas)
    assert (expected, 1 + sum(alphas)) == (Fraction(c["enumerated"]), Fraction(c["perturbed"]))

    # S, perturbed: SLEM >= SLRS. With a one-character-token unigram drafter, psi(t) is the
    # product of the characters' probabilities.
    c = cx["S"]
    chars = {tok: Fraction(w) for tok, w in c["drafter"].items()}
    assert all(len(tok) == 1 for tok in chars)
    psi = []
    for t in c["target_vocab"]:
        prob = Fraction(1)
        for ch in t:
            prob *= chars.get(ch, Fraction(0))
        psi.append(prob)
    p = _fractions(c["p"])
    slem, slrs = sum(x * y for x, y in zip(p, psi)), _alpha(p, psi)
    assert slem < slrs and psi == [Fraction(v) for v in c["psi"]]
    assert (slem, slrs) == (Fraction(c["slem"]), Fraction(c["slrs"]))

    # K, perturbed: every rho >= 1 is lossless. Enumerate the k i.i.d. drafts; draft x is
    # accepted with probability min(1, p(x) / (rho q(x))). If the law of the accepted token
    # already exceeds p somewhere, no residual (a non-negative law) can make the output p.
    c = cx["K"]
    p, q, rho, kk = _fractions(c["p"]), _fractions(c["q"]), Fraction(c["rho"]), c["k"]
    assert rho >= 1
    accepted = [Fraction(0)] * len(p)
    for drafts in itertools.product(range(len(p)), repeat=kk):
        prob = Fraction(1)
        for x in drafts:
            prob *= q[x]
        for x in drafts:  # the first accepted draft is emitted
            if prob == 0:
                break
            acc = min(Fraction(1), p[x] / (rho * q[x]))
            accepted[x] += prob * acc
            prob *= 1 - acc
    assert any(a > b for a, b in zip(accepted, p))
    law = [Fraction(v) for v in c["output_law"]]
    assert law != list(p) and all(lw >= a for lw, a in zip(law, accepted))


def test_the_symbolic_checker_refutes_false_goals():
    """The sympy half of `prove` can fail: false min/max claims, a false sign claim and a
    false identity are not proved (an undecided case counts as a failure, never a success)."""
    import sympy as sp

    from proofs.symbolic import decide, holds_for_all_orderings

    p, a, b = sp.symbols("p a b", real=True)
    # min(p, .) is non-decreasing, not non-increasing
    ok, where = holds_for_all_orderings(sp.Min(p, a) - sp.Min(p, b), [p, a, b], ">=", given=[(a, b)])
    assert not ok and where is not None
    assert not holds_for_all_orderings(sp.Max(a, b) - a, [a, b], "==")[0]
    assert holds_for_all_orderings(sp.Max(a, b) + sp.Min(a, b) - a - b, [a, b], "==")[0]
    q, u = sp.symbols("q u", nonnegative=True)
    assert decide(q * u, ">=") and not decide(-q * u - 1, ">=") and not decide(q - u, ">=")
    assert not decide(q - u, "==") and decide((q + u) ** 2 - q**2 - 2 * q * u - u**2, "==")
    x = sp.Symbol("x", real=True)
    assert not decide(x, ">=")  # undecided (x may be negative): not proved


def test_statement_S_symbolic_step_uses_the_unit_bound():
    """min(a, b) >= a b holds for a, b in [0, 1] and fails above 1 (a = b = 2: 2 < 4): the
    sympy step proves the bounded form and does not prove it once the bound a, b <= 1 is
    dropped, so it cannot pass on the nonnegativity of a and b alone."""
    from proofs import string_level

    assert string_level._symbolic(bounded=True)
    assert not string_level._symbolic(bounded=False)


def test_O2_checks_the_cap_against_its_definition(monkeypatch):
    """A cap that sums p over the drafter map instead of over I (where -1 indexes the last
    target token) only ever over-estimates, so alpha_TLI <= cap cannot catch it; O2's check
    of p(I) against the sum written out does."""
    import proofs.oov_cap as o2
    from rdk_theory import _backend as B

    def over_the_map(p, vocab_map):  # the mutant: -1 silently adds p of the last token
        return B.total(p[..., vocab_map.draft_to_target])

    monkeypatch.setattr(o2, "oov_cap", over_the_map)
    res = o2.check()
    assert res.status == "failed" and res.counterexample is not None


def test_the_drafter_maps_include_proper_pruned_subsets():
    """O1-O3 enumerate pruned maps whose kept set D is a proper subset of the target (so
    p(D) < 1 on the grid), not only the permutations that N_D = N_T = 3 allows."""
    from proofs.exhaustive import every_map

    shapes = {(nt, len(set(m.tolist())))
              for nt, nd, m in every_map(3) if rt.VocabMap(nt, m).is_pruned}
    assert {(2, 1), (3, 1), (3, 2)} <= shapes


def test_statement_B_general_gamma_step_is_not_vacuous():
    """The symbolic-gamma summation by parts fails for a wrong law: without the factor k + 1
    (P(N = k) summed, not E[N + 1]) or with a mass that does not telescope."""
    import sympy as sp

    from proofs import block_efficiency as be

    T = sp.IndexedBase("T")
    assert be._by_parts_for_every_gamma()
    assert not be._by_parts_for_every_gamma(lambda j: T[j] - T[j + 1])
    assert not be._by_parts_for_every_gamma(lambda j: (j + 1) * (T[j] - T[j + 2]))


def _n_laws(n, d, total=None):
    return sum(1 for c in itertools.product(range(d + 1), repeat=n)
               if (sum(c) == d if total is None else sum(c) <= d))


def _n_maps(n_max):
    out = []
    for nt in range(1, n_max + 1):
        for nd in range(1, n_max + 1):
            for e in itertools.product(range(-1, nt), repeat=nd):
                v = [x for x in e if x >= 0]
                if len(v) == len(set(v)):
                    out.append((nt, nd))
    return out


def test_proof_case_counts_are_the_sizes_of_their_stated_grids():
    """The cases each check reports are the size of the grid its docstring states, counted
    here independently: L without sub-stochastic r, O4 without delta = r(i) or only for
    r(i) = 1, sub_distributions without the zero vector and every_map without N_D < N_T
    each shrank a grid while every test still passed. O3 adds its kernel leg: every 3 x 3
    row-stochastic M with entries in {0, 1/2, 1} (6^3) for every q on the 1/3 grid under
    its two drafter maps over N_T = N_D = 3."""
    import proofs.identity_kernel as o3
    import proofs.lossless as lossless
    import proofs.mass_transfer as o4
    import proofs.oov_cap as o2
    import proofs.tli_vs_vanilla as o1

    assert lossless.check().cases == _n_laws(3, 4) * _n_laws(3, 4, total="sub") == 15 * 35
    maps = _n_maps(3)
    assert o1.check().cases == sum(_n_laws(nd, 3) * _n_laws(nt, 3) for nt, nd in maps)
    assert o2.check().cases == sum(_n_laws(nd, 3) * _n_laws(nt, 3) for nt, nd in maps)
    kernels = _n_laws(3, 2) ** 3
    assert kernels == 216 and len(o3.KERNEL_MAPS) == 2
    assert all(len(ids) == 3 for ids in o3.KERNEL_MAPS)
    assert o3.check().cases == sum(_n_laws(nd, 3) for nt, nd in maps) + 2 * _n_laws(3, 3) * kernels
    d = 4
    laws = [c for c in itertools.product(range(d + 1), repeat=3) if sum(c) == d]
    want = sum(r[i] for p in laws for r in laws for i in range(3) for j in range(3)
               if i != j and r[j] < p[j])  # delta = 1/d .. r(i), in steps of 1/d
    assert o4.check().cases == want


def test_O5_and_B_case_counts_are_the_sizes_of_their_stated_grids():
    """As above for O5 (kernels with entries in {0, 1/2, 1}, not only 0/1; every set of contexts
    for the optimisers) and B (gamma =
    1..4, not only 1)."""
    import proofs.block_efficiency as be
    import proofs.first_order_gain as gain

    rows = _n_laws(3, 2)  # rows of a 3 x 3 row-stochastic K with entries in {0, 1/2, 1}
    laws = _n_laws(3, 3)
    # + the optimiser leg: each (p, q') pair and all of them as one set, one LP and one
    # mixing search per grid law w each
    assert gain.check().cases == rows ** 3 * laws ** 2 + (laws ** 2 + 1) * (1 + laws) == 21600 + 1111
    assert be.check().cases == sum(len(be.GRID) ** g for g in range(1, 5)) == 340


def test_K_case_count_is_the_size_of_its_stated_grid():
    """K's cases: every rho of its grid with rho <= k (1, 4 and 5 values for k = 1, 2, 3),
    plus the LP grid (checking only rho = 1 went unseen)."""
    import proofs.multidraft as k_seq

    laws = _n_laws(3, 4)
    pairs = sum(1 for k in (1, 2, 3) for rho in k_seq.GRID["rhos"] if rho <= k)
    assert pairs == 10
    assert k_seq.check().cases == laws * laws * pairs + laws * laws * 3


def test_a_negative_control_that_finds_nothing_is_not_refuted():
    """A check whose perturbed core refutes nothing reports 'not refuted' and is not ok:
    every control is refuted in a correct run, so a control always called 'refuted' went
    unseen."""
    from proofs.result import run_check

    def body(out):
        out.cases += 1
        out.methods.append("nothing")

    res = run_check("Z", "title", "perturbed", body, "proved")
    assert res.status == "proved" and res.negative_control == "not refuted" and not res.ok
    res = run_check("Z", "title", "perturbed", lambda out: out.refute({"x": 1}), "proved")
    assert res.negative_control == "refuted" and res.ok


def test_a_hypothesis_skips_only_the_orderings_it_excludes():
    """A hypothesis x <= y skips the orderings with y before x, and no others (skipping y
    right after x too left no ordering on two symbols, and any goal 'held')."""
    import sympy as sp

    from proofs.symbolic import holds_for_all_orderings, ordered_substitutions

    a, b, c = sp.symbols("a b c", real=True)
    assert len(list(ordered_substitutions([a, b], given=[(a, b)]))) == 1
    assert len(list(ordered_substitutions([a, b, c], given=[(a, b)]))) == 3
    ok, _ = holds_for_all_orderings(b - a - 1, [a, b], ">=", given=[(a, b)])
    assert not ok  # b - a >= 1 does not follow from a <= b


#: The named sympy steps of each symbolic argument, in the order the proof records them.
SYMBOLIC_STEPS = {
    "L": ["lemma, case a <= b", "lemma, case a > b", "(p - r)^+ = p - min(p, r), by the lemma",
          "normaliser = 1 - alpha given sum p = 1", "normaliser != 1 - alpha without sum p = 1",
          "accept + reject branches = p", "branches != p without sum p = 1"],
    "O1": ["q/s >= q for s in (0, 1]", "min(p, .) is non-decreasing"],
    "O4": ["term i unchanged", "term j gains min(delta, p(j) - r(j))"],
    "B": ["summation by parts for every gamma"]
        + [f"law minus tail sum, gamma = {g}" for g in range(1, 9)]
        + ["i.i.d. closed form for every gamma (alpha != 1)"],
    "O5": [f"difference quotient, {case}" for case in (
        "c < p, d > 0", "c < p, d < 0", "c > p, d > 0", "c > p, d < 0",
        "c = p, d > 0: min(0, d) = 0", "c = p, d < 0: min(0, d) = d",
        "c < p, d = 0", "c = p, d = 0", "c > p, d = 0")]
        + ["concavity of min, first affine piece", "concavity of min, second affine piece"],
}


@pytest.mark.parametrize("sid", list(SYMBOLIC_STEPS))
def test_symbolic_arguments_take_every_stated_step(sid):
    """Each symbolic argument records exactly its stated steps and sympy establishes each: a
    case of the min lemma, a case of O5's difference quotient or one half of a two-part
    argument, dropped from the proof, used to leave it 'proved'."""
    steps = module(sid)._symbolic()
    assert list(steps.results) == SYMBOLIC_STEPS[sid]
    assert steps.ok and steps.failed == []


@pytest.mark.parametrize("sid", list(SYMBOLIC_STEPS))
def test_a_symbolic_step_that_does_not_hold_fails_the_check(sid, monkeypatch):
    """One step sympy cannot establish makes the whole check 'failed' and names that step."""
    from proofs.symbolic import Steps

    mod = module(sid)
    real = mod._symbolic

    def one_step_fails():
        steps, broken = real(), Steps()
        for i, name in enumerate(steps.results):
            broken.require(name, i != 1)
        return broken

    monkeypatch.setattr(mod, "_symbolic", one_step_fails)
    res = mod.check()
    assert res.status == "failed" and not res.ok
    assert res.counterexample == {"why": "sympy could not establish these steps",
                                  "steps": [SYMBOLIC_STEPS[sid][1]]}


#: The steps that are negative controls: each holds because sympy shows an identity *fails*
#: without its premise.
NEGATIVE_CONTROL_STEPS = {"normaliser != 1 - alpha without sum p = 1", "branches != p without sum p = 1"}


@pytest.mark.parametrize("verdict", ["nothing", "everything"])
@pytest.mark.parametrize("sid", list(SYMBOLIC_STEPS))
def test_every_symbolic_step_rests_on_sympy_verdict(sid, verdict, monkeypatch):
    """Each step's verdict comes from sympy, so none can hold by fiat: when ``sympy.simplify``
    and ``sympy.expand`` return an undecidable symbol ('nothing' is established), every step
    fails except the negative controls; when they return 0 ('everything' is), exactly the
    negative controls fail. A step whose check was replaced by a constant (``True``, or an
    expression sympy never sees) keeps its verdict under one of the two and fails this test."""
    import sympy

    answer = sympy.Symbol("undecided") if verdict == "nothing" else sympy.Integer(0)
    monkeypatch.setattr(sympy, "simplify", lambda *args, **kwargs: answer)
    monkeypatch.setattr(sympy, "expand", lambda *args, **kwargs: answer)
    steps = module(sid)._symbolic()
    assert list(steps.results) == SYMBOLIC_STEPS[sid]
    nothing_holds = verdict == "nothing"
    assert steps.failed == [name for name in SYMBOLIC_STEPS[sid]
                            if (name in NEGATIVE_CONTROL_STEPS) != nothing_holds]


def test_the_step_record_holds_only_when_every_recorded_step_holds():
    from proofs.symbolic import Steps

    steps = Steps()
    assert not steps.ok  # an argument with no step proves nothing
    assert steps.require("a", True) is True and steps.ok
    assert steps.require("b", 0) is False and not steps.ok
    assert steps.failed == ["b"] and steps.results == {"a": True, "b": False}
    with pytest.raises(ValueError, match="'a' recorded twice"):
        steps.require("a", True)


def test_O4_and_B_check_their_claims_on_the_whole_stated_range():
    """O4 checks the gain on every delta <= r(i) - p(i), the boundary included (a strict '<'
    moved the boundary cases to the negative control, where a correct gain refutes nothing);
    B checks the i.i.d. closed form on every constant tuple with alpha != 1 for gamma = 1..4
    (checking it for gamma = 4 only went unseen)."""
    import re

    import proofs.block_efficiency as be
    import proofs.mass_transfer as o4

    d = 4
    laws = [c for c in itertools.product(range(d + 1), repeat=3) if sum(c) == d]
    inside = sum(1 for p in laws for r in laws for i in range(3) for j in range(3)
                 if i != j and r[j] < p[j] for k in range(1, r[i] + 1) if k <= r[i] - p[i])
    boundary = sum(1 for p in laws for r in laws for i in range(3) for j in range(3)
                   if i != j and r[j] < p[j] and r[i] > p[i])
    assert boundary > 0
    found = re.search(r"\((\d+) of the cases inside the claim", o4.check().method)
    assert found and int(found.group(1)) == inside
    iid = sum(1 for g in range(1, 5) for a in be.GRID if a != 1)
    assert iid == 12
    assert f"the i.i.d. closed form on the {iid} constant tuples" in be.check().method


def test_K_fails_when_rho_star_reaches_less_than_1_minus_1_over_e_of_the_optimum(monkeypatch):
    """With the optimum inflated by 8/5, every acceptance(rho*) / OPT on K's grid falls in
    [0.565, 0.625] (the true ratios are in [0.904, 1]): below 1 - 1/e = 0.632 but above 1/2,
    so K must fail on its 1 - 1/e leg, and a check weakened to OPT / 2 would not."""
    import proofs.multidraft as k_seq

    lp, cut = k_seq.optimal_acceptance_lp, k_seq.optimal_acceptance_cut
    monkeypatch.setattr(k_seq, "optimal_acceptance_lp", lambda p, q, k: lp(p, q, k) * 1.6)
    monkeypatch.setattr(k_seq, "optimal_acceptance_cut", lambda p, q, k: cut(p, q, k) * Fraction(8, 5))
    res = k_seq.check()
    assert res.status == "failed", res.to_dict()
    c = res.counterexample
    assert 0.5 <= c["acceptance"] / c["lp"] < 1 - np.exp(-1)


def test_prove_table_names_a_failed_statement_and_its_counterexample(capsys, monkeypatch):
    """The text form of a run with a failed statement (only --json had one): its table row,
    the count in the summary, then 'ID: failed' and the counterexample as the JSON shows it
    (Fractions as 'a/b'); a statement that holds gets no such block. Exit status 1."""
    import re

    import proofs.registry as registry
    from proofs.result import CheckResult

    results = [CheckResult("L", "holds", "proved", "m", "pert", "refuted", cases=4, seconds=0.25),
               CheckResult("A", "breaks", "failed", "m", "pert", "refuted", cases=7, seconds=1.5,
                           counterexample={"p": [Fraction(1, 2), Fraction(1, 2)], "k": 3})]
    asked = []
    monkeypatch.setattr(registry, "run_all", lambda ids: asked.append(ids) or results)
    assert main(["prove"]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert asked == [None]  # no --only: every statement
    assert lines[:4] == [f"{'id':<4}{'status':<10}{'negative control':<18}{'cases':>7}{'sec':>7}  title",
                         f"{'L':<4}{'proved':<10}{'refuted':<18}{4:>7}{0.25:>7.2f}  holds",
                         f"{'A':<4}{'failed':<10}{'refuted':<18}{7:>7}{1.5:>7.2f}  breaks", ""]
    assert re.fullmatch(r"2 statements in \d+\.\d s: 1 proved \(symbolic\), 0 verified "
                        r"\(exhaustive/numerical\), 1 failed; 2 of 2 negative controls refuted\.",
                        lines[4]), lines[4]
    assert lines[5:] == ["", "A: failed", "  counterexample: {'p': ['1/2', '1/2'], 'k': 3}",
                         "Use --json for methods and counterexamples."]


def test_prove_json_is_strict_json_when_a_counterexample_holds_nan_or_infinity(capsys, monkeypatch):
    """``prove --json`` wrote a bare ``NaN`` (not JSON; strict parsers refuse the whole object)
    when a counterexample held one. Non-finite values are named as strings, in a list, a dict
    or a numpy scalar alike, and the output parses with NaN and infinity refused."""
    import json

    import numpy as np

    import proofs.registry as registry
    from proofs.result import CheckResult

    results = [CheckResult("A", "breaks", "failed", "m", "pert", "refuted", cases=1,
                           counterexample={"alpha": float("nan"), "q": [np.inf, 0.5],
                                           "z": np.float32(-np.inf)},
                           negative_counterexample=np.array([np.nan, 1.0]))]
    monkeypatch.setattr(registry, "run_all", lambda ids: results)
    assert main(["prove", "--json"]) == 1

    def refuse(token):
        raise AssertionError(f"non-standard JSON constant {token}")

    out = json.loads(capsys.readouterr().out, parse_constant=refuse)
    (st,) = out["statements"]
    assert st["counterexample"] == {"alpha": "nan", "q": ["inf", 0.5], "z": "-inf"}
    assert st["negative_counterexample"] == ["nan", 1.0]


def test_run_all_refuses_an_empty_or_string_selection():
    """run_all([]) ran all eleven statements (``ids or STATEMENTS``), and run_all('O1') split
    the string into 'O' and '1' (a KeyError for 'O')."""
    from proofs import registry
    from rdk_theory.validation import InputError

    with pytest.raises(InputError, match="names no statement: give None for all of them"):
        registry.run_all([])
    with pytest.raises(InputError, match=r"got the string 'O1' \(write \['O1'\]\)"):
        registry.run_all("O1")
    with pytest.raises(InputError, match="unknown statement 'Z'"):
        registry.run_all(["O2", "Z"])
