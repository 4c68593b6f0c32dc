"""gpu_validation pieces that need no model: top-k compression, pruning, calibration factor,
the sparse exact kernel, and the agreement statistics (with negative controls)."""
from __future__ import annotations

import numpy as np
import pytest
from scipy import stats as sstats

from gpu_validation import agreement, collect, pruning, samplers, study, topk
from rdk_theory.acceptance import acceptance_rate, oov_cap
from rdk_theory.kernels import calibration_covariance
from rdk_theory.proposals import tli_proposal as rt_tli
from rdk_theory.validation import InputError
from rdk_theory.vocab import pruned_draft_probs
from tests import stats
from tests.tolerances import (FFT_P_VALUE_SLACK, FLOAT32_ATOL, FLOAT64_ATOL, FLOAT64_RTOL,
                              assert_close)


def _laws(rng, c, n, sharp=2.0):
    x = rng.standard_normal((c, n)) * sharp
    e = np.exp(x - x.max(1, keepdims=True))
    return (e / e.sum(1, keepdims=True)).astype(np.float32)


def test_topk_keeps_the_exact_tail_mass():
    rng = np.random.default_rng(0)
    p = _laws(rng, 5, 300)
    ids, vals, tail = topk.compress(p, 20)
    # stored values are the row's 20 largest, in descending order, and mass is conserved
    assert np.array_equal(vals, -np.sort(-p, axis=1)[:, :20])
    np.testing.assert_allclose(vals.astype(np.float64).sum(1) + tail,
                               p.astype(np.float64).sum(1), rtol=0, atol=FLOAT64_ATOL)
    dense = topk.decompress(ids, vals, tail, 300)
    np.testing.assert_allclose(dense.sum(1), p.astype(np.float64).sum(1), atol=FLOAT64_ATOL)
    np.testing.assert_array_equal(np.take_along_axis(dense, ids.astype(int), 1), vals)


def test_topk_alpha_error_is_within_the_bound():
    rng = np.random.default_rng(1)
    p, q = _laws(rng, 8, 500, 3.0), _laws(rng, 8, 500, 3.0)
    for k in (1, 10, 100, 500):
        pi, pv, pt = topk.compress(p, k)
        qi, qv, qt = topk.compress(q, k)
        exact = acceptance_rate(p.astype(np.float64), q.astype(np.float64), check=False)
        approx = acceptance_rate(topk.decompress(pi, pv, pt, 500),
                                 topk.decompress(qi, qv, qt, 500), check=False)
        assert np.all(np.abs(exact - approx) <= topk.alpha_error_bound(pt, qt) + FLOAT32_ATOL)


def test_topk_file_round_trip(tmp_path):
    rng = np.random.default_rng(2)
    p = _laws(rng, 4, 64)
    topk.save(tmp_path / "a.npz", {"p": p, "next_ids": np.arange(4)}, topk=64)
    back = topk.load(tmp_path / "a.npz")
    np.testing.assert_allclose(back["p"], p, atol=0)  # k = N: lossless
    assert back["next_ids"].tolist() == [0, 1, 2, 3]


def test_pruning_restricts_and_renormalises():
    counts = pruning.token_counts([[3, 3, 1], [3, 0]], 6)
    assert counts.tolist() == [1, 1, 0, 3, 0, 0]
    vm = pruning.pruned_vocab_map(counts, 3)
    assert vm.intersection.tolist() == [0, 1, 3]  # ties broken by the lower id
    q = np.array([[0.1, 0.2, 0.3, 0.2, 0.1, 0.1]])
    qk = pruned_draft_probs(q, vm)
    np.testing.assert_allclose(qk, [[0.2, 0.4, 0.4]], atol=FLOAT64_ATOL)
    np.testing.assert_allclose(oov_cap(q, vm), [0.5], atol=FLOAT64_ATOL)
    assert pruning.kept_sizes_from_fractions([1.0, 0.5, 1e-9], 10) == [10, 5, 1]
    with pytest.raises(ValueError):
        pruning.token_counts([7], 6)
    # whole floats count, fractional ones are refused (0.7 was read as 0), and [] is no ids
    assert pruning.token_counts([0.0, 2.0], 3).tolist() == [1, 0, 1]
    assert pruning.token_counts([], 3).tolist() == [0, 0, 0]
    with pytest.raises(ValueError, match="token ids must be integers"):
        pruning.token_counts([0.7, 1.9], 3)


def test_pruned_vanilla_equals_tli_and_respects_the_oov_cap():
    rng = np.random.default_rng(3)
    p, q = _laws(rng, 6, 200).astype(np.float64), _laws(rng, 6, 200)
    vm = pruning.pruned_vocab_map(rng.integers(0, 5, 200), 50)
    props = samplers.proposals(pruned_draft_probs(q, vm), vm, {})
    np.testing.assert_allclose(props["vanilla"], props["tli"], atol=FLOAT64_ATOL)
    assert np.all(acceptance_rate(p, props["tli"], check=False)
                  <= oov_cap(p, vm) + FLOAT64_ATOL)


def test_calibration_factor_reproduces_the_covariance():
    rng = np.random.default_rng(4)
    cal = _laws(rng, 12, 40).astype(np.float64)
    cal /= cal.sum(1, keepdims=True)
    mu, c = collect.calibration_stats(cal)
    np.testing.assert_allclose(c.T @ c, calibration_covariance(cal), atol=FLOAT64_ATOL)
    np.testing.assert_allclose(mu, cal.mean(0), atol=FLOAT64_ATOL)
    _, c3 = collect.calibration_stats(cal, rank=3)
    # the rank-3 factor is the best rank-3 approximation: its error is the 4th eigenvalue
    ev = np.sort(np.linalg.eigvalsh(calibration_covariance(cal)))[::-1]
    assert np.linalg.norm(c.T @ c - c3.T @ c3, 2) == pytest.approx(ev[3], rel=1e-8)


def test_sparse_kept_rows_kernel_is_exact_for_its_definition():
    pytest.importorskip("torch")  # samplers.KeptRowsTopK is built on torch
    rng = np.random.default_rng(5)
    cal = _laws(rng, 30, 60).astype(np.float64)
    cal /= cal.sum(1, keepdims=True)
    _, c = collect.calibration_stats(cal)
    rows = np.array([0, 5, 7, 40])
    kr = samplers.KeptRowsTopK(c, rows, k=4)
    tau = 0.01
    m = kr.kernel(tau).matrix.toarray()
    np.testing.assert_allclose(m.sum(1), 1.0, atol=FLOAT64_ATOL)
    omega = c.T @ c
    for i in range(60):
        if i not in rows:
            assert m[i, i] == 1.0
            continue
        top = set(np.argsort(-np.where(np.arange(60) == i, np.inf, omega[i]))[:4])
        assert set(np.flatnonzero(m[i])) == top and m[i, i] > 0
        w = np.exp(omega[i, sorted(top)] / tau)
        assert_close(m[i, sorted(top)], w / w.sum(), rtol=0, atol=FLOAT32_ATOL)  # float32 build


@pytest.mark.parametrize("factor, rows, k, message", [
    (np.ones((2, 6)), [1, 2], 7, "k = 7 exceeds the vocabulary size N = 6"),
    (np.ones((2, 6)), [1, 1], 2, "rows: kept_ids lists target id 1 more than once"),
    (np.ones((2, 6)), [1, 6], 2, "rows: kept_ids holds id 6"),
    (np.ones(6), [1], 2, "factor must be a finite \\(r, N\\) array, got shape \\(6,\\)"),
    (np.full((2, 6), np.nan), [1], 2, "factor must be a finite"),
    (np.ones((2, 6)), [1], 0, "k must be an integer >= 1"),
])
def test_sparse_kept_rows_kernel_names_bad_inputs(factor, rows, k, message):
    """k > N was torch.topk's error, duplicate rows were kept twice, NaN factors ran."""
    pytest.importorskip("torch")
    with pytest.raises(InputError, match=message):
        samplers.KeptRowsTopK(factor, rows, k)
    with pytest.raises(InputError, match="tau must be a finite real number > 0"):
        samplers.KeptRowsTopK(np.ones((2, 6)), [1], 2).kernel(0.0)


def test_binomial_agreement_accepts_correct_predictions_and_refutes_wrong_ones():
    """Monte Carlo: 302 positions x n = 1000 exact binomial counts. The correct counts are
    checked with the checks' rate set to 2 x FALSE_ALARM_PER_TEST (the call's two tests each
    at FALSE_ALARM_PER_TEST, as the two counted assertions): its pass adds no false alarm
    of its own (at the default 1e-3 it was an uncounted one). The negative controls run at
    the default rate."""
    rng = np.random.default_rng(6)
    a = np.concatenate([rng.uniform(0, 1, 300), [0.0, 1.0]])
    k = rng.binomial(1000, a)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(agreement, "FALSE_ALARM", 2 * stats.FALSE_ALARM_PER_TEST)
        ok = agreement.binomial_agreement(a, k, 1000)
    assert ok["test_level"] == stats.FALSE_ALARM_PER_TEST
    stats.assert_pvalue(ok["p_aggregate"], "aggregate check on exact binomials")
    stats.assert_pvalue(ok["p_dispersion"], "dispersion check on exact binomials")
    assert ok["degenerate_ok"] and ok["pass"]
    # negative controls: a 1% bias, a token accepted where alpha = 0 and one rejected where
    # alpha = 1 (each alone fails the run)
    assert not agreement.binomial_agreement(np.clip(a + 0.01, 0, 1), k, 1000)["pass"]
    for i, count in ((-2, 1), (-1, 999)):
        k_bad = k.copy()
        k_bad[i] = count
        res = agreement.binomial_agreement(a, k_bad, 1000)
        assert not res["degenerate_ok"] and not res["pass"]
    # swapped positions (the degenerate ends left out, which alone failed it before): the sum
    # is unchanged, so only the dispersion check can see it, and it alone fails the run
    res = agreement.binomial_agreement(a[:-2][::-1], k[:-2], 1000)
    assert res["degenerate_ok"] and res["p_aggregate"] > res["test_level"]
    assert res["p_dispersion"] < res["test_level"] and not res["pass"]
    # the interval is on the mean per position and step: z sqrt(sum n a (1 - a)) / (n P)
    half = agreement.binomial_agreement([0.5] * 4, [500] * 4, 1000)["ci_half_width"]
    assert_close(half, agreement.critical_z(2) * np.sqrt(4 * 250) / 4000)  # one call: 2 tests


def test_one_binomial_agreement_call_keeps_the_false_alarm_rate_for_its_two_tests():
    """Every joint count of two positions (31^2 outcomes, exact law): a call on its own (the
    default n_tests, 2: aggregate and dispersion) fails a correct count with probability at
    most FALSE_ALARM; with n_tests = 1, the default before, each test took the whole budget
    and the call failed 1.4e-3 of the time."""
    n, a = 30, np.array([0.2, 0.7])
    law = [sstats.binom.pmf(np.arange(n + 1), n, ai) for ai in a]

    def size(**kw):
        return sum(law[0][i] * law[1][j] for i in range(n + 1) for j in range(n + 1)
                   if not agreement.binomial_agreement(a, [i, j], n, **kw)["pass"])

    assert size() <= agreement.FALSE_ALARM < size(n_tests=1)


def test_poisson_binomial_p_value_of_an_impossible_count_is_zero():
    """A count below 0 or above the number of positions has no probability: 0, as
    binomial_sum_p_value gives (-1 read the law's last entry and gave 1; 3 raised)."""
    for observed in (-1, 3):
        assert agreement.poisson_binomial_p_value([0.99, 0.99], observed) == 0.0
        assert agreement.binomial_sum_p_value([0.99, 0.99], 1, observed) == 0.0


def test_poisson_binomial_p_value_matches_the_binomial_case():
    for n, a, x in ((50, 0.3, 15), (40, 0.95, 33), (30, 0.5, 29)):
        assert agreement.poisson_binomial_p_value([a] * n, x) == pytest.approx(
            sstats.binomtest(x, n, a).pvalue, rel=1e-6)


def test_martingale_agreement_negative_control():
    rng = np.random.default_rng(7)
    a = rng.uniform(0.5, 1.0, 400)
    x = rng.random(400) < a
    stats.assert_pvalue(agreement.martingale_agreement(a, x)["p_value"], "martingale check")
    assert not agreement.martingale_agreement(a, rng.random(400) < a - 0.15)["pass"]


@pytest.mark.mc
def test_martingale_agreement_holds_its_level_when_the_alphas_follow_the_outcomes():
    """Monte Carlo: R = 2,000 end-to-end records under the null (each acceptance Bernoulli of
    its alpha given the past), rounds of gamma = 4 drafts ending at a rejection, 192 tokens
    each, and alpha chosen from the running score: 1 (a sure acceptance) once the count is
    2.3 standard deviations off its prediction, else 0.5. The Poisson-binomial p-value, which
    treats the alphas as fixed in advance, rejected 21 % of these at the level 0.05 (4x);
    the betting martingale's rejections are tested against the level by a one-sided exact
    binomial test at FALSE_ALARM_PER_TEST (4e-6)."""
    from scipy import stats as sst

    rng, level, runs = np.random.default_rng(1), 0.05, 2000
    fails = fixed = 0
    for _ in range(runs):
        alphas, accepted, tokens = [], [], 0
        off = expected = var = 0.0
        while tokens < 192:
            drafted = 0
            for _ in range(4):
                a = 1.0 if var > 0 and abs(off - expected) > 2.3 * np.sqrt(var) else 0.5
                ok = rng.random() < a
                alphas.append(a)
                accepted.append(ok)
                off, expected, var = off + ok, expected + a, var + a * (1 - a)
                if not ok:
                    break
                drafted += 1
            tokens += drafted + 1
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(agreement, "FALSE_ALARM", level)
            res = agreement.martingale_agreement(alphas, accepted)
        fails += not res["pass"]
        fixed += res["p_value_fixed_alphas"] <= level
    stats.assert_pvalue(sst.binom.sf(fails - 1, runs, level),
                        f"betting martingale: {fails} of {runs} rejected at {level}")
    assert sst.binom.sf(fixed - 1, runs, level) < 1e-20  # the fixed-alphas test: invalid here


def test_betting_p_value_is_a_test_martingale_bound():
    """Exact on small records: the mean of each bet's product over all 2^n outcomes is 1 (a
    martingale of mean 1 under the null), and the p-value is 1 / (mean over the bets)."""
    import itertools

    a = np.array([0.3, 0.9, 0.5, 0.75])
    for lam in agreement.BETS:
        mean = sum(np.prod([(a_t if o else 1 - a_t) for a_t, o in zip(a, outcome)])
                   * np.prod(1 + lam * (np.array(outcome) - a))
                   for outcome in itertools.product([0, 1], repeat=a.size))
        assert_close(mean, 1.0)
    x = np.array([1, 1, 0, 1])
    w = np.mean([np.prod(1 + lam * (x - a)) for lam in agreement.BETS])
    assert_close(agreement.betting_p_value(a, x), min(1.0, 1 / w))
    assert agreement.betting_p_value([], []) == 1.0
    # what the null forbids is no bounded deviation: 0 (20 rejections of sure acceptances in
    # 200 passed the run's level 1.85e-5 with p = 3.1e-5), as the fixed-alphas count says
    assert agreement.betting_p_value([1.0, 0.0], [0, 0]) == 0.0
    assert agreement.betting_p_value([0.5, 0.0], [0, 1]) == 0.0
    r = agreement.martingale_agreement(np.ones(200), np.r_[np.ones(180), np.zeros(20)], 54)
    assert r["p_value"] == r["p_value_fixed_alphas"] == 0.0 and not r["pass"]
    for bad in ([1, np.nan], [1, 2], [1]):  # NaN and 2 passed silently, a short list broadcast
        with pytest.raises(ValueError, match="accepted must hold one 0/1 outcome per alpha"):
            agreement.betting_p_value([0.5, 0.5], bad)
    assert agreement.betting_p_value(np.full(400, 0.5), np.ones(400)) < 40 * 1.5 ** -400 * 1.01


def test_critical_z_is_bonferroni():
    assert agreement.critical_z(1) == pytest.approx(sstats.norm.isf(agreement.FALSE_ALARM / 2))
    assert agreement.critical_z(10) > agreement.critical_z(1)


def test_shipped_texts_exist_and_are_small():
    for name in collect.TEXT_FILES:
        text = collect.read_text(name)
        assert 1000 < len(text) < 5000


def _study_case(seed: int = 3, n: int = 60, c: int = 24, s: int = 16, rank: int = 4,
                target_conc: float = 0.3, drafter_conc: float = 0.3):
    """A small synthetic study's inputs (N ids, c positions, s calibration rows, a rank-r
    factor; Dirichlet target and drafter laws of the given concentrations, token counts in
    [1, 100)) and the generator that drew them, left where the draws end."""
    rng = np.random.default_rng(seed)
    p = rng.dirichlet(np.full(n, target_conc), size=c).astype(np.float32)
    q = rng.dirichlet(np.full(n, drafter_conc), size=c).astype(np.float32)
    p_cal = rng.dirichlet(np.full(n, target_conc), size=s)
    q_cal = rng.dirichlet(np.full(n, drafter_conc), size=s)
    mu, factor = collect.calibration_stats(p_cal, rank=rank)
    counts = rng.integers(1, 100, size=n)
    return rng, dict(p=p, q=q, counts=counts, mu=mu, factor=factor, p_cal=p_cal, q_cal=q_cal)


def test_study_splits_the_run_wide_false_alarm_over_its_checks_and_the_others():
    """The acceptance study's checks share agreement.FALSE_ALARM with the run's end-to-end
    checks (``other_tests``): every test runs at FALSE_ALARM / (study tests + other tests).
    It also records first-order RDK's tau -> 0 limit (TLI's calibration acceptance) and
    whether the best tau sat at the grid's edge."""
    pytest.importorskip("torch")  # samplers.KeptRowsTopK is built on torch
    rng, case = _study_case()
    out = study.acceptance_study(**case, kept_sizes=(30, 10), n_steps=50, rng=rng, other_tests=4)
    assert out["n_tests"] == 2 * 2 * len(samplers.SAMPLERS) + 4
    levels = {chk["test_level"] for row in out["rows"] for chk in row["checks"].values()}
    assert levels == {out["false_alarm"] / out["n_tests"]}
    vm = pruning.pruned_vocab_map(case["counts"], 10)
    tli = rt_tli(pruned_draft_probs(case["q_cal"], vm), vm)
    t = out["taus"][10]
    assert_close(t["tli_calibration_alpha"], acceptance_rate(case["p_cal"], tli).mean())
    grid = t["calibration_alpha_by_tau"]["rdk_first_order"]
    assert t["at_grid_edge"]["rdk_first_order"] == (t["rdk_first_order"] in (min(grid), max(grid)))


def test_at_grid_edge_flags_the_largest_tau_too():
    """A near-uniform target and a peaked drafter: smoothing wins, so the best tau is the
    grid's largest for both covariance samplers; at_grid_edge looked at the smallest only."""
    pytest.importorskip("torch")  # samplers.KeptRowsTopK is built on torch
    rng, case = _study_case(seed=0, n=40, c=12, target_conc=200.0, drafter_conc=0.05)
    out = study.acceptance_study(**case, kept_sizes=(20,), n_steps=0, rng=rng)
    t = out["taus"][20]
    for s in ("rdk_first_order", "rdk_exact"):
        assert t[s] == max(t["calibration_alpha_by_tau"][s]) and t["at_grid_edge"][s], s


def test_laws64_never_writes_into_the_callers_memory():
    """A float64 CPU tensor or memmap shares its memory with np.asarray: the in-place divide
    wrote the normalised rows into it (a read-only memmap raised)."""
    torch = pytest.importorskip("torch")

    t = torch.tensor([[1.0, 3.0]], dtype=torch.float64)
    assert np.array_equal(collect.laws64(t), [[0.25, 0.75]]) and t.tolist() == [[1.0, 3.0]]
    ro = np.array([[2.0, 2.0]])
    ro.setflags(write=False)
    view = ro[:, :]
    assert np.array_equal(collect.laws64(view), [[0.5, 0.5]])
    f32 = np.array([[1.0, 1.0]], dtype=np.float32)  # a copy made by laws64: divided in place
    assert np.array_equal(collect.laws64(f32), [[0.5, 0.5]]) and f32.tolist() == [[1.0, 1.0]]


def test_agreement_reads_acceptances_of_one_plus_round_off_as_one():
    """drafter = target gives sum min(p, r) = 1 + 2.2e-16 at some positions: n a (1 - a) < 0
    made the aggregate p-value 0 (a correct run failed) or a ValueError; beyond round-off it
    is an error, not clipped."""
    r = agreement.binomial_agreement([1 + 2.2e-16] * 3 + [0.5], [100] * 3 + [50], 100)
    assert r["pass"] and r["p_aggregate"] == 1.0 and r["degenerate_ok"]
    assert agreement.binomial_agreement([1 + 2.2e-16] * 3, [100] * 3, 100)["pass"]
    assert agreement.martingale_agreement([1 + 2.2e-16, 0.5], [1, 1])["pass"]
    with pytest.raises(ValueError, match=r"must lie in \[0, 1\]"):
        agreement.binomial_agreement([1.01], [10], 10)


def test_study_and_hetero_caps_read_float32_rows_as_laws_summing_to_one():
    """Float32 rows that sum to 1 + 3e-7 (float32 round-off on a real vocabulary) are laws:
    the study and the heterogeneous-tokenizer caps divide them by their float64 sums first.
    Before, a drafter keeping every id had p(I) = 1 + 3e-7 (1.0000000486 on the real pair)."""
    pytest.importorskip("torch")  # samplers.KeptRowsTopK is built on torch
    from gpu_validation import hetero

    rng = np.random.default_rng(5)
    n, c = 40, 8
    p = (rng.dirichlet(np.full(n, 0.3), size=c) * (1 + 3e-7)).astype(np.float32)
    q = rng.dirichlet(np.full(n, 0.3), size=c).astype(np.float32)
    assert np.all(p.astype(np.float64).sum(1) > 1 + 1e-7)
    mu, factor = collect.calibration_stats(p[:4], rank=2)
    out = study.acceptance_study(p, q, np.arange(n, 0, -1), (n,), mu=mu, factor=factor,
                                 p_cal=p, q_cal=q, n_steps=0, rng=rng)
    assert_close(out["rows"][0]["oov_cap"], 1.0, atol=FLOAT64_ATOL)
    vm = pruning.pruned_vocab_map(np.arange(n, 0, -1), n)
    caps = hetero.oov_caps(p, np.zeros(c, dtype=int), np.zeros(c, dtype=int), ["t"], vm)
    assert_close(caps["mean"], 1.0, atol=FLOAT64_ATOL)
    assert_close(collect.laws64(p).sum(1), np.ones(c), atol=FLOAT64_ATOL)


def test_binomial_sum_p_value_is_the_exact_poisson_binomial_one():
    """The FFT p-value of a sum of Binomial(n, a_i) equals the direct Poisson-binomial one (each
    a_i repeated n times) to round-off, including a_i of 0 and 1 and counts off the support."""
    rng = np.random.default_rng(11)
    for _ in range(60):
        a = rng.choice([0.0, 1.0, 0.5, 0.003, 0.9995, rng.random()], size=int(rng.integers(1, 6)))
        n = int(rng.integers(1, 12))
        k = int(rng.integers(0, n * a.size + 1))
        assert agreement.binomial_sum_p_value(a, n, k) == pytest.approx(
            agreement.poisson_binomial_p_value(np.repeat(a, n), k), abs=FLOAT64_ATOL)
    assert agreement.binomial_sum_p_value([0.5], 4, 5) == 0.0
    # a sum wide enough for the window (S modulo W, W < n P + 1): the same p-values
    a, n = rng.random(20), 300
    mean = n * a.sum()
    for k in (int(mean), int(mean) + 40, int(mean) - 75):
        exact = agreement.poisson_binomial_p_value(np.repeat(a, n), k)
        assert exact - FLOAT64_ATOL <= agreement.binomial_sum_p_value(a, n, k) <= (
            exact + FFT_P_VALUE_SLACK)
    assert agreement.binomial_sum_p_value(a, n, 0) == 0.0  # far beyond the window: < 1e-30


def test_binomial_sum_p_value_is_never_below_the_exact_one_in_the_tails():
    """Symmetric laws have, across the mean, outcomes exactly as likely as the observed one. The
    transforms' absolute round-off (~1e-16) made those fall out of the sum once the p-value was
    below about 1e-7: 8.6e-9 for 1.4e-8, 0.0 for 1.3e-29. Against scipy's exact binomial
    tail, every p-value above the 1e-30 the window gives up is now at least the exact one, and
    above it by no more than its stated slack."""
    for m, n in ((4, 30), (16, 5), (16, 30), (64, 1), (200, 5)):
        for k in range(m * n // 2):
            exact = min(1.0, 2 * sstats.binom.cdf(k, m * n, 0.5))
            if exact < 1e-29:
                continue
            got = agreement.binomial_sum_p_value([0.5] * m, n, k)
            assert exact * (1 - FLOAT64_RTOL) <= got <= exact + FFT_P_VALUE_SLACK, (m, n, k)


@pytest.mark.parametrize("a, n, n_tests", [
    (np.full(5, 0.0034), 10, 12),  # the sizes where the z-test rejected 152x too often
    (np.full(20, 0.003), 50, 24),
    (np.full(48, 0.9995), 300, 34),
])
def test_aggregate_check_keeps_its_level_at_small_counts(a, n, n_tests):
    """The exact size of the aggregate check, P(p_aggregate <= level) under the model, summed
    over every count the sum of binomials can take, is at most its level; the z-test's was up
    to 152x that (an exact computation, no sampling)."""
    level = agreement.FALSE_ALARM / n_tests
    law = np.array([1.0])
    for ai in a:
        law = np.convolve(law, sstats.binom.pmf(np.arange(n + 1), n, ai))
    likely = np.flatnonzero(law > 1e-12)  # the rest, all rejected at worst, adds its mass
    size = sum(law[k] for k in likely if agreement.binomial_sum_p_value(a, n, int(k)) <= level)
    assert size + (law.sum() - law[likely].sum()) <= level
    z_size = sum(pk for k, pk in enumerate(law)
                 if 2 * sstats.norm.sf(abs((k - n * a.sum()) / np.sqrt(n * (a * (1 - a)).sum())))
                 <= level)
    assert z_size > 5 * level  # what the z-test did here


def test_dispersion_check_without_eligible_positions_is_not_run():
    """With no position where n a (1 - a) >= 5 there is nothing to test: p_dispersion is None
    (it was a p-value of 1.0, counted as a pass of a test that never ran)."""
    res = agreement.binomial_agreement(np.full(4, 0.1), [1, 2, 0, 1], 19)
    assert res["dof"] == 0 and res["p_dispersion"] is None and res["pass"]


def _exact_dispersion_tail(a, n, t):
    """P(sum_i (k_i - n a_i)^2 / (n a_i (1 - a_i)) >= t) by enumerating every joint count."""
    grid = np.meshgrid(*[np.arange(n + 1)] * len(a), indexing="ij")
    stat = sum((g - n * ai) ** 2 / (n * ai * (1 - ai)) for g, ai in zip(grid, a))
    law = np.prod([sstats.binom.pmf(g, n, ai) for g, ai in zip(grid, a)], axis=0)
    return float(law[stat >= t * (1 - 1e-12)].sum())


def _tiny_dispersion_cases(seed: int, count: int):
    """``count`` cases ``(a, k, n, var, t)`` small enough to enumerate: 1-3 positions, 2-20
    steps, counts drawn from the predicted binomials."""
    rng = np.random.default_rng(seed)
    for _ in range(count):
        dof = int(rng.integers(1, 4))
        n = int(rng.integers(2, 21))
        a = rng.uniform(0.02, 0.98, dof)
        k = rng.binomial(n, a)
        var = n * a * (1 - a)
        yield a, k, n, var, float(np.sum((k - n * a) ** 2 / var))


def test_dispersion_p_value_brackets_the_exact_tail():
    """Enumerating every joint count (up to 21^3): the p-value is never below the exact tail
    P(T >= t), and at most the tail from ``t`` less the grid's stated slack,
    DISPERSION_SLACK_SD standard deviations of T."""
    for a, k, n, _, t in _tiny_dispersion_cases(11, 40):
        p, method = agreement.dispersion_p_value(a, k, n)
        slack = agreement.DISPERSION_SLACK_SD * np.sqrt(2 * a.size)
        assert method == "exact-bound"
        assert p >= _exact_dispersion_tail(a, n, t) - 1e-12
        assert p <= _exact_dispersion_tail(a, n, t - slack) + 1e-12


@pytest.mark.parametrize("n_tests", [4, 40])
def test_dispersion_check_keeps_its_level_at_one_position(n_tests):
    """One position, 50 steps, a = 0.2 (n a (1 - a) = 8, so the check runs): the exact size of
    the dispersion check, P(p_dispersion <= level) summed over all 51 counts, is at most its
    level; the chi-square tail used before rejected 1.3x and 4.1x too often here."""
    n, a = 50, 0.2
    level = agreement.FALSE_ALARM / n_tests
    law = sstats.binom.pmf(np.arange(n + 1), n, a)
    size = sum(law[k] for k in range(n + 1)
               if not agreement.binomial_agreement([a], [k], n, n_tests)["p_dispersion"] > level)
    assert size <= level
    chi2_size = sum(law[k] for k in range(n + 1)
                    if sstats.chi2.sf((k - n * a) ** 2 / (n * a * (1 - a)), 1) <= level)
    assert chi2_size > 1.2 * level  # what the chi-square tail did here


def test_dispersion_p_value_falls_back_to_chi_square_beyond_its_budget():
    rng = np.random.default_rng(12)
    a = rng.uniform(0.1, 0.9, 30)
    k = rng.binomial(400, a)
    t = float(np.sum((k - 400 * a) ** 2 / (400 * a * (1 - a))))
    assert agreement.dispersion_p_value(a, k, 400, budget=0) == (sstats.chi2.sf(t, 30),
                                                                   "chi-square")
    # a pass needs no bound: the tail above the level is the answer
    assert agreement.dispersion_p_value(a, k, 400, budget=0, level=1e-9) == (
        sstats.chi2.sf(t, 30), "chi-square")
    assert agreement.dispersion_p_value(a, k, 400)[1] == "exact-bound"  # within budget
    assert agreement.dispersion_p_value([0.5], [200], 400) == (1.0, "exact-bound")


@pytest.mark.parametrize("n_tests", [4, 40])
def test_a_chi_square_rejection_beyond_the_budget_is_confirmed_by_the_bound(n_tests):
    """One position, 50 steps, a = 0.2, with no budget for the bound up front (budget=0, the
    case of many positions): where the chi-square tail falls to the level the bound decides,
    so the exact size, P(p <= level) over all 51 counts, is at most the level (the tail alone:
    over 1.2x, test above)."""
    n, a = 50, 0.2
    level = agreement.FALSE_ALARM / n_tests
    law = sstats.binom.pmf(np.arange(n + 1), n, a)
    results = [agreement.dispersion_p_value([a], [k], n, budget=0, level=level)
               for k in range(n + 1)]
    assert sum(law[k] for k, (p, _) in enumerate(results) if p <= level) <= level
    tails = sstats.chi2.sf((np.arange(n + 1) - n * a) ** 2 / (n * a * (1 - a)), 1)
    tails[10] = 0.0  # k = n a: T = 0, p = 1 at once
    assert [m for _, m in results] == [
        "exact-bound" if k == 10 else "hoeffding-bound" if tail <= level else "chi-square"
        for k, tail in enumerate(tails)]


def test_the_hoeffding_bound_is_never_below_the_exact_tail():
    """Enumerating every joint count (up to 21^3): the bound after a chi-square rejection,
    on grids from 8 cells (rounding errors as large as the terms) to 2048, with eta from 0.1
    to 1e-4, is never below the exact tail P(T >= t), and never below eta. With t* moved the
    wrong way (t + mu + delta) it went below the tail here, and without eta below eta. (With
    no Hoeffding shift at all, delta = 0, it did not: on cases this small the rounding noise
    alone keeps it above the tail; the shift is what makes it hold in the worst case.)"""
    for a, k, n, var, t in _tiny_dispersion_cases(14, 60):
        if t <= 0:
            continue
        exact = _exact_dispersion_tail(a, n, t)
        for cells in (8, 64, 2048):
            for eta in (0.1, 1e-2, 1e-4):
                p, slack = agreement._hoeffding_bound(a, var, n, t, cells, eta)
                assert p >= exact - 1e-12 and 0 <= slack <= t + 1e-12
                assert p >= eta or p == 1.0


def test_the_hoeffding_bound_refines_its_grid_only_while_undecided(monkeypatch):
    """30 positions with n a (1 - a) of 6-20, counts two standard deviations off, no up-front
    budget, a confirm budget of 2^15 cells per position and a slack of 0.01 asked for, at a
    level equal to the chi-square tail (2.6e-13; the exact tail is 400 times that, so no
    grid can decide): the grid runs 2048, 8192, 32768 (four times finer while the bound
    stays above the level, never past the confirm budget) and the last bound is returned, a
    pass. A gross deviation is decided on the first grid, with its slack reported."""
    grids = []
    real = agreement._hoeffding_bound

    def spy(a, var, n, t, cells, eta):
        grids.append(cells)
        return real(a, var, n, t, cells, eta)

    monkeypatch.setattr(agreement, "_hoeffding_bound", spy)
    rng = np.random.default_rng(15)
    n, a = 2000, rng.uniform(0.003, 0.01, 30)
    sd = np.sqrt(n * a * (1 - a))
    k = np.round(n * a + 2 * sd * rng.choice([-1, 1], a.size))
    t = float(np.sum((k - n * a) ** 2 / sd ** 2))
    level = float(sstats.chi2.sf(t, a.size))  # the tail is at the level: the bound decides
    p, method, slack = agreement._dispersion(a, k, n, budget=0, slack_sd=0.01, level=level,
                                             confirm_budget=30 * 2 ** 15)
    assert grids == [2048, 8192, 32768] and method == "hoeffding-bound"
    assert (p, slack * np.sqrt(60)) == real(a, n * a * (1 - a), n, t, 32768, level / 64)
    assert p > 100 * level  # above the level on the finest grid allowed: a pass
    grids.clear()
    k = np.round(n * a + 4 * sd)  # upwards: 4 sd below was a negative count, now refused
    p, method, slack = agreement._dispersion(a, k, n, budget=0, level=1e-5)
    assert grids == [2048] and method == "hoeffding-bound" and p <= 1e-5 and 0 < slack < 1


def test_a_gross_dispersion_beyond_the_budget_is_rejected_on_the_coarse_grid():
    """600 positions, each count two standard deviations off in a random direction (so the
    sum is nearly unbiased and only the dispersion can see it): far beyond the up-front
    budget, the chi-square tail rejects and the first, coarse grid of the bound confirms it
    (well under the level: T is about 4 dof, some 50 standard deviations past its mean)."""
    rng = np.random.default_rng(13)
    n, a = 2000, rng.uniform(0.2, 0.8, 600)
    sd = np.sqrt(n * a * (1 - a))
    k = np.round(n * a + 2 * sd * rng.choice([-1, 1], a.size))
    res = agreement.binomial_agreement(a, k, n, 54)
    assert res["dispersion_method"] == "hoeffding-bound" and not res["pass"]
    assert 0 < res["dispersion_slack_sd"] < 1  # coarse (0.4), but the deviation is gross
    assert res["p_dispersion"] <= res["test_level"] and res["p_aggregate"] > res["test_level"]


def test_study_and_tokenize_name_edge_inputs():
    """No evaluation or calibration rows (a numpy concatenate error / NaN tau tables), sparse_k
    beyond the vocabulary (a torch error), calibration rows without variance (a message
    about centring), and max_tokens 0 or 1 (0 read everything, 1 misaligned next_ids)."""
    from rdk_theory.validation import InputError

    rng = np.random.default_rng(0)
    n = 30
    p = rng.dirichlet(np.ones(n), size=6).astype(np.float32)
    q = rng.dirichlet(np.ones(n), size=6).astype(np.float32)
    p_cal = rng.dirichlet(np.ones(n), size=8)
    mu, factor = collect.calibration_stats(p_cal, rank=4)
    counts = rng.integers(1, 100, size=n)
    kw = dict(mu=mu, factor=factor, p_cal=p_cal, q_cal=p_cal, n_steps=0, rng=rng)
    for args, extra, message in [((p[:0], q[:0]), {}, "needs evaluation and calibration"),
                                 ((p, q), {"p_cal": p_cal[:0], "q_cal": p_cal[:0]},
                                  "needs evaluation and calibration"),
                                 ((p, q), {"sparse_k": n + 1}, "sparse_k must be in 1..30"),
                                 ((p, q), {"factor": np.zeros_like(factor)}, "do not vary")]:
        with pytest.raises(InputError, match=message):
            study.acceptance_study(*args, counts, (10,), **{**kw, **extra})
    words = lambda text, add_special_tokens=False: {"input_ids": [5, 6, 7, 8]}  # noqa: E731
    assert collect.tokenize(words, "", 2) == [5, 6] and collect.tokenize(words, "") == [5, 6, 7, 8]
    for bad in (0, 1):
        with pytest.raises(InputError, match="max_tokens must be an integer >= 2"):
            collect.tokenize(words, "", bad)


@pytest.mark.parametrize("k", [5, 40])
def test_topk_of_float64_laws_keeps_the_mass_and_the_bound(k):
    """float64 input (the stored values are float32): the values are rounded toward zero, so
    the storage error is part of the tail. Rounded to nearest, the top values of a row whose
    mass they hold almost entirely summed to more than the row, the tail was clipped at 0,
    and the mass identity failed by up to k float32 half-ulps (2.9e-8 at k = 40 here)."""
    rng = np.random.default_rng(3)
    p = _laws(rng, 64, 40, 6.0).astype(np.float64)
    p /= p.sum(1, keepdims=True)
    q = np.roll(p, 1, axis=1)
    pi, pv, pt = topk.compress(p, k)
    qi, qv, qt = topk.compress(q, k)
    assert np.all(pv.astype(np.float64) <= np.take_along_axis(p, pi.astype(int), 1))
    np.testing.assert_allclose(pv.astype(np.float64).sum(1) + pt, p.sum(1), rtol=0,
                               atol=FLOAT64_ATOL)
    exact = acceptance_rate(p, q, check=False)
    approx = acceptance_rate(topk.decompress(pi, pv, pt, 40), topk.decompress(qi, qv, qt, 40),
                             check=False)
    assert np.all(np.abs(exact - approx) <= topk.alpha_error_bound(pt, qt) + FLOAT64_ATOL)


@pytest.mark.parametrize("bad_at", [0, 2])
def test_pick_tau_refuses_a_non_finite_acceptance(bad_at):
    """A NaN acceptance (a kernel bug) was skipped as a poor tau, or, at the first grid
    point, won the search (every later ``a > NaN`` is False)."""
    from rdk_theory import IdentityKernel, VocabMap

    from gpu_validation.samplers import pick_tau

    class _Nan:
        def transport(self, r):
            return np.full(np.shape(r), np.nan)

    grid = (1.0, 2.0, 3.0)
    p = np.array([[0.5, 0.5], [0.2, 0.8]])
    make = lambda tau: _Nan() if tau == grid[bad_at] else IdentityKernel()  # noqa: E731
    with pytest.raises(FloatingPointError, match="non-finite acceptance"):
        pick_tau(p, p, VocabMap.identity(2), make, 1.0, grid=grid)


def test_kept_rows_topk_keeps_the_diagonal_even_when_a_covariance_exceeds_it():
    """Each kept row's top-k always holds its diagonal (so that M = I stays reachable), even
    where an off-diagonal covariance is larger: random data always had the diagonal among
    the top 4, so dropping that rule went unseen."""
    pytest.importorskip("torch")  # samplers.KeptRowsTopK is built on torch
    # Omega = c^T c: row 0 is (1, 10, -11); Omega_01 = 10 > Omega_00 = 1, so a plain top-1
    # would keep column 1; the diagonal must be kept (k = 1: only it)
    c = np.array([[1.0, 10.0, -11.0]])
    m = samplers.KeptRowsTopK(c, np.array([0]), k=1).kernel(1.0).matrix.toarray()
    assert m[0].tolist() == [1.0, 0.0, 0.0]
    m2 = samplers.KeptRowsTopK(c, np.array([0]), k=2).kernel(1.0).matrix.toarray()
    assert set(np.flatnonzero(m2[0])) == {0, 1}


def test_build_kernels_marginal_kernel_spreads_by_the_calibration_mean():
    """The marginal kernel's lam is mu(OOV) and its w the calibration mean outside I,
    renormalised (a uniform w went unseen)."""
    from rdk_theory.vocab import VocabMap

    vm = VocabMap.from_kept_ids(np.array([0, 1]), 4)
    mu = np.array([0.1, 0.2, 0.3, 0.4])  # mass 0.7 outside I = {0, 1}
    factor = np.array([[1.0, -1.0, 0.0, 0.0]])
    kern = samplers.build_kernels(vm, mu, factor, tau_exact=None, tau_fo=1.0,
                                  topk_rows=None)["marginal"]
    # lam = mu(OOV) = 0.7, w = mu|OOV / 0.7: (1 - lam) q' + lam w
    assert_close(kern.transport(np.array([1.0, 0.0, 0.0, 0.0])),
                               [0.3, 0.0, 0.3, 0.4])


def test_martingale_agreement_splits_the_false_alarm_over_its_tests():
    """The end-to-end check runs each of n_tests tests at FALSE_ALARM / n_tests
    (Bonferroni); the same level for every test went unseen."""
    a = np.full(200, 0.7)
    x = np.r_[np.ones(167), np.zeros(33)]  # 167 accepts against 140 expected: p = 7.9e-4
    res1, res10 = agreement.martingale_agreement(a, x), agreement.martingale_agreement(a, x, 10)
    assert agreement.FALSE_ALARM / 10 < res1["p_value"] < agreement.FALSE_ALARM
    assert res10["test_level"] == agreement.FALSE_ALARM / 10
    assert not res1["pass"] and res10["pass"]  # Bonferroni: each of 10 tests at 1e-4


def test_binomial_agreement_fails_an_aggregate_p_value_just_below_its_level():
    """An aggregate p-value of about 1e-4 fails at the level 1e-3: the negative control's p
    ~ 1e-20 failed at any level, so a level 100x too strict went unseen."""
    res = agreement.binomial_agreement([0.5] * 4, [531, 531, 531, 530], 1000)
    assert res["p_aggregate"] < res["test_level"] < 100 * res["p_aggregate"]
    assert res["p_dispersion"] > res["test_level"] and res["degenerate_ok"]
    assert not res["pass"]


def test_token_counts_refuses_an_id_equal_to_the_vocabulary_size():
    """An id equal to vocab_size is out of range (with '>' for '>=' bincount returned
    vocab_size + 1 counts)."""
    with pytest.raises(ValueError, match=r"token ids must be in \[0, 3\)"):
        pruning.token_counts([0, 3], 3)


def test_kept_sizes_round_to_the_nearest_integer():
    """Kept sizes are round(f N), not floor: the earlier cases were whole or clamped, where
    the two agree."""
    assert pruning.kept_sizes_from_fractions([0.29, 0.21], 10) == [3, 2]


def test_study_rows_report_the_kept_sets_own_masses():
    """kept_mass_calibration and the OOV cap are those of the kept set, the K most frequent
    ids (here not ids 0..K-1: summing mu[:K] went unseen)."""
    pytest.importorskip("torch")  # samplers.KeptRowsTopK is built on torch
    rng, case = _study_case(seed=8, n=40, c=8, s=8, rank=3)
    counts = np.arange(40)[::-1].copy()
    counts[[0, 1]] = 0  # the kept set {2..11} is not the first 10 ids
    case["counts"] = counts
    out = study.acceptance_study(**case, kept_sizes=(10,), n_steps=0, rng=rng)
    (row,) = out["rows"]
    vm = pruning.pruned_vocab_map(counts, 10)
    assert sorted(vm.intersection.tolist()) == list(range(2, 12))
    assert_close(row["kept_mass_calibration"], case["mu"][vm.intersection].sum())
    assert_close(row["oov_cap"], oov_cap(collect.laws64(case["p"]), vm, check=False).mean())


def test_study_checks_pass_and_measure_each_samplers_own_proposal(monkeypatch):
    """The study's own prediction-vs-measurement checks pass, each sampler verified with its
    own proposal (every sampler run with TLI's went unseen: only the real-model smoke
    test asserted the checks). Monte Carlo: 24 positions x 200 steps per sampler. The
    study's run-wide rate agreement.FALSE_ALARM (1e-3) is lowered to the suite's
    FALSE_ALARM_PER_TEST (4e-6) for this run, so a correct study fails with probability
    at most 4e-6 (Bonferroni over its n_tests checks; each p-value is exact or a rigorous
    bound at its level), and the pass is asserted once, counted, through the union-bound
    p-value (tests/stats.py). The marginal kernel's alpha is more than 0.05 from TLI's here,
    so a study that measures TLI for it fails."""
    pytest.importorskip("torch")  # samplers.KeptRowsTopK is built on torch
    monkeypatch.setattr(agreement, "FALSE_ALARM", stats.FALSE_ALARM_PER_TEST)
    _, case = _study_case()
    out = study.acceptance_study(**case, kept_sizes=(10,), n_steps=200,
                                 rng=np.random.default_rng(11))
    (row,) = out["rows"]
    assert abs(row["marginal"] - row["tli"]) > 0.05  # the samplers really differ
    assert set(row["checks"]) == set(samplers.SAMPLERS)
    p_values = [chk[key] for chk in row["checks"].values()
                for key in ("p_aggregate", "p_dispersion") if chk[key] is not None]
    stats.assert_pvalue(stats.bonferroni_pvalue(p_values, out["n_tests"]),
                        f"study checks, {len(p_values)} p-values of {out['n_tests']} tests, "
                        "24 positions x 200 steps")
    for name, chk in row["checks"].items():  # the study's own verdict, at the same level
        assert chk["degenerate_ok"] and chk["pass"], (name, chk)


def test_token_counts_refuses_a_negative_id_as_an_input_error():
    """A negative id is an InputError naming the range (with the lower bound checked at -1,
    numpy's bare bincount ValueError came through, which the CLI does not turn into an
    ``error:`` line)."""
    from rdk_theory.validation import InputError

    with pytest.raises(InputError, match=r"token ids must be in \[0, 3\), got range \[-1, 2\]"):
        pruning.token_counts([2, -1], 3)


def test_topk_save_caps_k_at_the_laws_width(tmp_path):
    """A top-k larger than the law's width N stores all N ids (k = min(topk, N)): the file
    round-trips losslessly instead of raising (only k = N was tried)."""
    p = _laws(np.random.default_rng(2), 3, 16)
    topk.save(tmp_path / "a.npz", {"p": p}, topk=64)
    np.testing.assert_array_equal(topk.load(tmp_path / "a.npz")["p"], p)


def test_build_kernels_builds_each_covariance_kernel_at_its_own_tau():
    """rdk_exact is the sparse top-k kernel at ``tau_exact`` and rdk_first_order the
    first-order kernel at ``tau_fo`` (the exact kernel built at the first-order tau went
    unseen: the study's checks measure whatever kernel was built)."""
    pytest.importorskip("torch")  # samplers.KeptRowsTopK is built on torch
    from rdk_theory.first_order import FirstOrderCovarianceKernel

    rng = np.random.default_rng(5)
    cal = _laws(rng, 30, 60).astype(np.float64)
    mu, c = collect.calibration_stats(cal)
    vm = pruning.pruned_vocab_map(rng.integers(0, 5, 60), 20)
    rows = samplers.KeptRowsTopK(c, vm.intersection, k=4)
    scale = float(np.max(np.sum(c ** 2, 0)))
    tau_ex, tau_fo = 0.3 * scale, 0.01 * scale
    ks = samplers.build_kernels(vm, mu, c, tau_exact=tau_ex, tau_fo=tau_fo, topk_rows=rows)
    r = rt_tli(pruned_draft_probs(_laws(rng, 4, 60), vm), vm)
    assert_close(ks["rdk_exact"].transport(r), rows.kernel(tau_ex).transport(r))
    assert_close(ks["rdk_first_order"].transport(r),
                 FirstOrderCovarianceKernel.from_factor(c, tau_fo).transport(r))
    apart = rows.kernel(tau_ex).transport(r) - rows.kernel(tau_fo).transport(r)
    assert np.abs(apart).max() > FLOAT32_ATOL  # the two taus give different kernels here


def test_pick_tau_keeps_the_first_grid_point_among_equal_acceptances():
    """Equal calibration acceptances (a kernel that saturates, as the sparse kernel turns into
    the identity when tau -> 0) keep the first, largest tau that reached the best: with
    ``>=`` the last tied tau won, and a flat table then read as 'best at the smallest tau'."""
    from rdk_theory import IdentityKernel, VocabMap

    p = np.array([[0.5, 0.5], [0.2, 0.8]])
    best, table = samplers.pick_tau(p, p[::-1], VocabMap.identity(2), lambda t: IdentityKernel(),
                                    2.0, grid=(1.0, 0.1, 0.01))
    assert len(set(table.values())) == 1 and best == 2.0


def _shift_lm(shift: int, v: int = 16):
    """A stand-in LM (no weights): a character-per-token tokenizer over ``v`` ids, and after
    reading token x a law with all but ~1e-7 of its mass on ``x + shift`` (mod v)."""
    torch = pytest.importorskip("torch")
    from types import SimpleNamespace

    def model(x):
        hot = torch.nn.functional.one_hot((x + shift) % v, v)
        return SimpleNamespace(logits=20.0 * hot.float())

    return SimpleNamespace(model=model, probs=lambda logits: torch.softmax(logits, -1),
                           tokenizer=lambda text, add_special_tokens=False: {
                               "input_ids": [ord(ch) % v for ch in text]})


def test_collect_aligns_laws_next_tokens_and_sources_per_text():
    """Row t of a text is the law after ``ids[: t + 2]`` (position 0 dropped), from each model
    its own; ``next_ids[t]`` is the token that followed, ``ids[t + 2]`` (-1 after the last);
    ``source`` is the text's index. Laws of positions 0..L-2, next ids one early, the target
    run as the drafter and every row credited to text 0 all went unseen (only self-consistent
    runs with one model read these)."""
    target, drafter = _shift_lm(1), _shift_lm(2)
    got = collect.collect(target, drafter, collect.EVAL_TEXTS, max_tokens=12)
    assert got.texts == list(collect.EVAL_TEXTS)
    for k, name in enumerate(collect.EVAL_TEXTS):
        ids = collect.tokenize(target.tokenizer, collect.read_text(name), 12)
        rows = got.source == k
        assert rows.sum() == len(ids) - 1
        assert np.argmax(got.p[rows], 1).tolist() == [(x + 1) % 16 for x in ids[1:]]
        assert np.argmax(got.q[rows], 1).tolist() == [(x + 2) % 16 for x in ids[1:]]
        assert got.next_ids[rows].tolist() == ids[2:] + [-1]
    # the laws are filled into arrays of the final size (no concatenation): the models' dtype,
    # and a target run alone gives the same p and no q
    assert got.p.dtype == got.q.dtype == np.float32 and got.p.flags.c_contiguous
    alone = collect.collect(target, None, collect.EVAL_TEXTS, max_tokens=12)
    assert alone.q is None and np.array_equal(alone.p, got.p)


def test_study_exact_kernel_bounds_are_inclusive():
    """``sparse_k`` may be the whole vocabulary N and ``exact_max_kept`` is the largest K that
    still gets the sparse exact kernel (both bounds inclusive; only N + 1 and the default of
    no limit were tried)."""
    pytest.importorskip("torch")  # samplers.KeptRowsTopK is built on torch
    rng, case = _study_case(n=40, c=8, s=8, rank=3)
    out = study.acceptance_study(**case, kept_sizes=(10, 11), n_steps=0, rng=rng, sparse_k=40,
                                 exact_max_kept=10)
    assert [row["rdk_exact"] is not None for row in out["rows"]] == [True, False]
    assert out["rows"][0]["rdk_exact_kernel"] == "sparse covariance top-40"
    assert out["taus"][11]["rdk_exact"] is None


def test_study_per_position_measurement_is_the_accepted_fraction():
    """Each per-position 'measured' value is accepted steps / n_steps, so their mean is the
    check's measured mean (a wrong divisor went unseen: the harness test only compared the
    file with the study's own record)."""
    pytest.importorskip("torch")  # samplers.KeptRowsTopK is built on torch
    rng, case = _study_case(c=8)
    out = study.acceptance_study(**case, kept_sizes=(10,), n_steps=20, rng=rng)
    for s, chk in out["rows"][0]["checks"].items():
        measured = np.asarray(out["per_position"][f"{s}@10"]["measured"], dtype=np.float64)
        assert_close(measured * 20, np.round(measured * 20), atol=FLOAT32_ATOL)
        assert_close(measured.mean(), chk["measured_mean"], atol=FLOAT32_ATOL)


def test_study_predictions_use_the_kept_sets_kernels_on_the_variance_grid():
    """With n_steps = 0 each row is the mean alpha(p, r) of its sampler, recomputed here: the
    sparse exact kernel's rows are the kept ids (here not 0..K-1) at the picked tau, and the
    tau grid is TAU_GRID times the largest calibration variance max_i Omega_ii (kernel rows
    for ids 0..K-1, and a grid scaled by the largest squared norm of a factor row, went
    unseen)."""
    pytest.importorskip("torch")  # samplers.KeptRowsTopK is built on torch
    from rdk_theory.first_order import FirstOrderCovarianceKernel

    rng, case = _study_case(seed=8, n=40, c=8, s=8, rank=3)
    counts = np.arange(40)[::-1].copy()
    counts[[0, 1, 2, 3]] = 0  # the kept set {4..13} is not the first 10 ids
    case["counts"] = counts
    out = study.acceptance_study(**case, kept_sizes=(10,), n_steps=0, rng=rng, sparse_k=4)
    (row,), t = out["rows"], out["taus"][10]
    scale = np.max(np.diag(case["factor"].T @ case["factor"]))
    for s in ("rdk_exact", "rdk_first_order"):
        assert_close(sorted(t["calibration_alpha_by_tau"][s]),
                     sorted(g * scale for g in samplers.TAU_GRID))
    vm = pruning.pruned_vocab_map(counts, 10)
    p, tli = collect.laws64(case["p"]), rt_tli(pruned_draft_probs(case["q"], vm), vm)
    exact = samplers.KeptRowsTopK(case["factor"], vm.intersection, 4).kernel(t["rdk_exact"])
    fo = FirstOrderCovarianceKernel.from_factor(case["factor"], t["rdk_first_order"])
    assert_close(row["rdk_exact"], acceptance_rate(p, exact.transport(tli)).mean())
    assert_close(row["rdk_first_order"], acceptance_rate(p, fo.transport(tli)).mean())


@pytest.mark.parametrize("predicted, accepted, n", [
    ([0.5, 0.3], [0, 0], 0), ([], [], 10), ([0.5, 0.3], [1], 10)])
def test_binomial_agreement_refuses_an_empty_study(predicted, accepted, n):
    """n = 0 or no positions gave NaN means and ci_half_width beside pass: True (NaN is not
    JSON); a count missing for a position broadcast silently."""
    with pytest.raises(ValueError, match="binomial_agreement needs at least one position"):
        agreement.binomial_agreement(predicted, accepted, n)


def test_pruned_vocab_map_keeps_the_lower_id_among_equal_counts():
    """Most ids of a real vocabulary never occur in the calibration text (count 0, all tied):
    the kept set must then be the lowest ids, as keep_most_frequent does. A plain argsort,
    whose order among ties is not the ids', passed every test (numpy's sort is stable on small
    arrays) while choosing other ids at 200."""
    counts = pruning.token_counts([5, 5, 7, 7, 9], 200)
    assert pruning.pruned_vocab_map(counts, 6).intersection.tolist() == [0, 1, 2, 5, 7, 9]


def test_study_rows_are_the_predicted_means_when_steps_are_also_measured():
    """With n_steps > 0 a row's sampler value is still the predicted mean alpha(p, r), the
    one the same study gives with n_steps = 0 (the checks' measured mean in its place went
    unseen: every test that reads the row values ran with n_steps = 0)."""
    pytest.importorskip("torch")  # samplers.KeptRowsTopK is built on torch
    rng, case = _study_case(c=8)
    out = study.acceptance_study(**case, kept_sizes=(10,), n_steps=20, rng=rng)
    _, case0 = _study_case(c=8)
    out0 = study.acceptance_study(**case0, kept_sizes=(10,), n_steps=0,
                                  rng=np.random.default_rng(0))
    (row,), (row0,) = out["rows"], out0["rows"]
    for s in samplers.SAMPLERS:
        assert row[s] == row0[s] == row["checks"][s]["predicted_mean"], s
    assert any(row[s] != row["checks"][s]["measured_mean"] for s in samplers.SAMPLERS)


def test_kept_sizes_refuse_a_zero_fraction():
    """A fraction of 0 is outside (0, 1]: an InputError, not a kept size of max(1, 0) = 1
    (only negative and > 1 fractions were tried)."""
    from rdk_theory.validation import InputError

    with pytest.raises(InputError, match=r"keep fractions must be in \(0, 1\], got 0.0"):
        pruning.kept_sizes_from_fractions([0.5, 0.0], 10)
    assert pruning.kept_sizes_from_fractions([1.0], 10) == [10]


def test_topk_compress_refuses_k_above_the_laws_width():
    """k = N + 1 is an InputError naming the range (numpy's argpartition ValueError came
    through otherwise; save() caps k itself, so only compress() sees it)."""
    from rdk_theory.validation import InputError

    p = _laws(np.random.default_rng(2), 3, 16)
    with pytest.raises(InputError, match=r"k must be in \[1, 16\], got 17"):
        topk.compress(p, 17)
    with pytest.raises(InputError, match=r"k must be in \[1, 16\], got 0"):
        topk.compress(p, 0)


def test_study_names_no_exact_kernel_for_a_kept_size_above_exact_max_kept():
    """A kept size that gets no sparse exact kernel (K > exact_max_kept) records
    rdk_exact_kernel None, not the name of a kernel that was never built."""
    pytest.importorskip("torch")  # samplers.KeptRowsTopK is built on torch
    rng, case = _study_case(n=40, c=8, s=8, rank=3)
    out = study.acceptance_study(**case, kept_sizes=(10, 11), n_steps=0, rng=rng, sparse_k=5,
                                 exact_max_kept=10)
    assert [row["rdk_exact_kernel"] for row in out["rows"]] == ["sparse covariance top-5", None]


def test_study_picks_tau_on_128_evenly_spaced_calibration_rows():
    """Above 128 calibration rows tau is picked on 128 evenly spaced ones (rows
    round(linspace(0, S - 1, 128))), so the last rows count: the first 128 rows went unseen
    (every earlier case had at most 128). TLI's calibration acceptance is recomputed on them."""
    pytest.importorskip("torch")  # samplers.KeptRowsTopK is built on torch
    rng, case = _study_case(n=40, c=8, s=8, rank=3)
    s = 140
    cal_rng = np.random.default_rng(21)
    case["p_cal"] = cal_rng.dirichlet(np.full(40, 0.3), size=s)
    case["q_cal"] = cal_rng.dirichlet(np.full(40, 0.3), size=s)
    case["q_cal"][128:] = case["p_cal"][128:]  # the rows past 128 are accepted far more often
    out = study.acceptance_study(**case, kept_sizes=(40,), n_steps=0, rng=rng)
    sel = np.linspace(0, s - 1, 128).round().astype(int)
    vm = pruning.pruned_vocab_map(case["counts"], 40)
    tli = rt_tli(pruned_draft_probs(case["q_cal"][sel], vm), vm)
    want = acceptance_rate(case["p_cal"][sel], tli).mean()
    assert_close(out["taus"][40]["tli_calibration_alpha"], want)
    first = acceptance_rate(case["p_cal"][:128], rt_tli(
        pruned_draft_probs(case["q_cal"][:128], vm), vm)).mean()
    assert abs(want - first) > 1e-3


def test_dispersion_counts_a_position_of_expected_variance_exactly_the_minimum():
    """A position with n a (1 - a) = MIN_EXPECTED_VARIANCE exactly (n = 20, a = 0.5: 5.0) is
    in the dispersion test (the bound is inclusive); a = 0.25 (3.75) is not."""
    assert agreement.MIN_EXPECTED_VARIANCE == 5.0
    r = agreement.binomial_agreement([0.5, 0.25], [10, 5], 20)
    assert r["dof"] == 1 and r["chi2"] == 0.0


def test_martingale_ci_half_width_is_that_of_the_mean_rate():
    """The end-to-end check's ci_half_width is z_c sqrt(sum a (1 - a)) / n, the half-width of
    the mean acceptance rate over n positions (not divided by sqrt(n))."""
    r = agreement.martingale_agreement([0.5] * 4, [1, 0, 1, 0])
    assert_close(r["ci_half_width"], agreement.critical_z(1) * 1.0 / 4)


def test_calibration_factor_is_the_centred_rows_when_rank_reaches_the_row_count():
    """A rank of S or more keeps every direction: the factor is the centred rows over sqrt(S)
    themselves, as with no rank (through the Gram matrix it came out rotated, with S rows
    whatever the rank, at O(S^2 N))."""
    cal = _laws(np.random.default_rng(4), 6, 30).astype(np.float64)
    mu, full = collect.calibration_stats(cal)
    for rank in (6, 9):
        mu_r, c_r = collect.calibration_stats(cal, rank=rank)
        assert np.array_equal(mu_r, mu) and np.array_equal(c_r, full)
    assert collect.calibration_stats(cal, rank=5)[1].shape == (5, 30)


def test_two_sided_p_value_counts_outcomes_at_the_slack_edge_as_ties():
    """An outcome exactly pmf[index] (1 + 1e-9) likely is within the round-off slack, so it is
    as likely as the observed one and counts toward the p-value (the edge read strictly left
    it out)."""
    x = 0.3
    pmf = np.array([x, x * (1 + 1e-9), 0.4 - x * 1e-9])
    assert agreement._two_sided(pmf, 0) == float(pmf[0] + pmf[1])


def test_the_confidence_interval_follows_the_runs_false_alarm_rate(monkeypatch):
    """critical_z took FALSE_ALARM as a default bound when the module was imported, so a run
    at another rate (the test suite's 4e-6) tested at that rate but reported confidence
    intervals at 1e-3: a measured mean inside its 'interval' could still fail its test."""
    a, k = np.full(4, 0.5), np.array([120, 130, 125, 125])
    wide = agreement.binomial_agreement(a, k, 250)["ci_half_width"]
    monkeypatch.setattr(agreement, "FALSE_ALARM", 4e-6)
    assert agreement.critical_z(2) == pytest.approx(sstats.norm.isf(4e-6 / 4))
    half = agreement.binomial_agreement(a, k, 250)["ci_half_width"]
    assert_close(half, sstats.norm.isf(4e-6 / 4) * np.sqrt(4 * 250 * 0.25) / 1000)
    assert half > wide


def test_token_counts_refuses_ids_in_a_float_dtype_that_cannot_hold_them():
    """Whole-valued floats are taken as ids, but float16 ones over a 4,000-id vocabulary had
    been rounded (3001 counted at 3000); a float16 part among int ones too (the
    concatenation made it float64 first)."""
    from rdk_theory.validation import InputError

    for ids in (np.array([3001, 3001], np.float16), [np.array([1, 2]), np.array([3001], np.float16)]):
        with pytest.raises(InputError, match="token_ids is stored as float16, which holds whole"):
            pruning.token_counts(ids, 4000)
    assert pruning.token_counts(np.array([3001.0, 3001.0]), 4000)[3001] == 2
    assert pruning.token_counts(np.array([7, 7], np.float16), 2000)[7] == 2


def test_token_counts_reads_id_tensors_and_checks_them_in_their_own_dtype():
    """A bfloat16 tensor of ids was numpy's raw TypeError (numpy has no bfloat16); it is now
    read like any tensor and held to bfloat16's whole numbers (exact only up to 256), and a
    list mixing tensors with lists is counted."""
    torch = pytest.importorskip("torch")
    from rdk_theory.validation import InputError

    ids = torch.tensor([1.0, 2.0, 2.0], dtype=torch.bfloat16)
    assert pruning.token_counts(ids, 10).tolist() == [0, 1, 2] + [0] * 7
    with pytest.raises(InputError, match="token_ids is stored as bfloat16, which holds whole "
                                         "numbers exactly only up to 256"):
        pruning.token_counts(ids, 1000)
    mixed = [torch.tensor([4, 4]), [5], np.array([4])]
    assert pruning.token_counts(mixed, 6).tolist() == [0, 0, 0, 0, 3, 1]


def test_agreement_refuses_counts_that_no_run_of_n_steps_gives():
    """Short count lists were stretched to fit (one count for three positions gave the p-value
    of three equal counts), -5 and 15 out of 10 steps passed the aggregate test, a NaN count
    was int()'s own error, n = 2.9 was read as 2 by one p-value and 2.9 beside it, a whole
    float observed was an IndexError, and a (1, 2) array of alphas counted one position."""
    bad = [(lambda: agreement.dispersion_p_value([0.5, 0.5, 0.5], [9], 10), "one count per"),
           (lambda: agreement.dispersion_p_value([0.5], [], 10), "one count per position"),
           (lambda: agreement.binomial_agreement([0.5, 0.5], [15, -5], 10), r"in \[0, 10\]"),
           (lambda: agreement.binomial_agreement([0.5, 0.5], [4.5, 5.5], 10), "whole numbers"),
           (lambda: agreement.binomial_agreement([0.5, 0.5], [np.nan, 5], 10), "whole numbers"),
           (lambda: agreement.binomial_agreement([0.5] * 3, [1, 1, 2], 2.9), "whole number >= 0"),
           (lambda: agreement.dispersion_p_value([0.0, 0.5], [0, 5], 10), "strictly inside"),
           (lambda: agreement.binomial_sum_p_value([0.5], 10, 5.5), "observed must be a whole"),
           (lambda: study.deterministic_checks([0.5], [0.5, 0.5, 0.9], [1, 1, 1]),
            "one value per position")]
    for call, message in bad:
        with pytest.raises(ValueError, match=message):
            call()
    assert agreement.binomial_sum_p_value([0.5], 10, 5.0) == agreement.binomial_sum_p_value(
        [0.5], 10, 5)
    r = agreement.martingale_agreement([[0.5, 0.5]], [[1, 1]])
    assert r["p_value_fixed_alphas"] == agreement.poisson_binomial_p_value([0.5, 0.5], 2) == 0.5
