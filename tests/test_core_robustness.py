"""Regressions found in review: round-off at the boundary, overflow, aliasing, CLI edge cases."""
import json

import numpy as np
import pytest

import rdk_theory as rt
import rdk_theory.case as case_mod
from rdk_theory.cli import main
from tests.stats import assert_matches_law
from tests.tolerances import assert_close, assert_leq


def test_sampler_survives_float_sums_within_tolerance_and_keeps_the_law():
    """Monte Carlo: n = 100,000 steps with r = p summing to 1 - 5e-5; chi-square vs p/sum(p)."""
    p = np.array([0.5, 0.49995, 0.0])
    tokens, accepted = rt.sample_steps(p, p.copy(), 100_000, np.random.default_rng(0))
    assert_matches_law(rt.emitted_counts(tokens, 3), p / p.sum(), "r = p, sum 1 - 5e-5")
    # a proposal summing to 1 + 5e-5 is rescaled once and used for draw, ratio and residual
    q = np.array([0.30005, 0.7, 0.0])
    target = np.array([0.2, 0.3, 0.5])
    tokens, _ = rt.sample_steps(target, q, 100_000, np.random.default_rng(1))
    assert_matches_law(rt.emitted_counts(tokens, 3), target, "sum r = 1 + 5e-5")


def test_subnormal_intersection_mass_does_not_overflow():
    vm = rt.VocabMap(3, np.array([0, 1, -1]))
    r = rt.tli_proposal(np.array([3e-309, 0.0, 1 - 3e-309]), vm)
    assert np.all(np.isfinite(r)) and r[0] == 1.0


def test_first_order_sums_to_one_for_calibration_rows_off_by_tolerance():
    rng = np.random.default_rng(2)
    cal = rng.dirichlet(np.ones(4), size=3) * (1 + 9.9e-5 * np.array([[1], [-1], [1]]))
    fo = rt.FirstOrderCovarianceKernel(cal, 0.1 * rt.case.default_tau(cal))
    r = fo.transport(np.eye(4)[:3])
    assert_leq(r.sum(-1), 1.0)
    assert_close(r.sum(-1), 1.0)
    with pytest.raises(rt.InputError, match="does not sum to 0"):
        rt.FirstOrderCovarianceKernel.from_factor(rng.random((3, 6)), 1.0)


def test_kernel_size_mismatch_is_reported():
    vm = rt.VocabMap(4, [0, 1, 2])
    q = np.array([0.2, 0.3, 0.5])
    with pytest.raises(rt.InputError, match="kernel is over 5 tokens"):
        rt.build_proposals(q, vm, kernel=rt.DenseKernel(np.eye(5)))
    with pytest.raises(rt.InputError, match="kernel is over 1 tokens"):
        rt.build_proposals(q, vm, kernel=rt.MarginalKernel(np.array([1.0]), 0.5))


def test_marginal_kernel_keeps_a_private_copy_of_w():
    w = np.array([0.5, 0.5])
    mk = rt.MarginalKernel(w, 1.0)
    w[:] = 5
    assert_close(mk.transport(np.array([1.0, 0.0])), [0.5, 0.5])


def test_vocab_map_rejects_wrapping_and_fractional_sizes():
    with pytest.raises(rt.InputError, match="out of range"):
        rt.VocabMap(4, np.array([0, 1, 2**64 - 1], dtype=np.uint64))
    with pytest.raises(rt.InputError, match="integer"):
        rt.VocabMap(4.9, [0, 1, 2, 3])


def test_overflowing_tau_is_an_input_error():
    cal = np.random.default_rng(0).dirichlet(np.ones(5), size=4)
    with pytest.raises(rt.InputError, match="overflows"):
        rt.covariance_softmax_kernel(cal, 1e-320)


def _case(path, n_t=12, c=2):
    rng = np.random.default_rng(0)
    np.savez(path, target_probs=rng.dirichlet(np.ones(n_t), size=c),
             draft_probs=rng.dirichlet(np.ones(n_t), size=c), draft_to_target=np.arange(n_t),
             calibration_probs=rng.dirichlet(np.ones(n_t), size=10))


def test_acceptance_beyond_dense_limit_still_reports_first_order(tmp_path, capsys, monkeypatch):
    _case(tmp_path / "c.npz")
    monkeypatch.setattr(case_mod, "DENSE_KERNEL_MAX_BYTES", 100)
    assert main(["acceptance", str(tmp_path / "c.npz"), "--kernel", "covariance", "--json"]) == 0
    out, err = capsys.readouterr()
    assert set(json.loads(out)) == {"vanilla", "tli", "rdk_first_order"}
    assert "rdk_exact omitted" in err
    # the first-order sampler never builds the dense kernel
    assert main(["sample", str(tmp_path / "c.npz"), "--sampler", "rdk_first_order", "--kernel",
                 "covariance", "--context", "0", "--n", "10", "--seed", "0", "--json"]) == 0


@pytest.mark.parametrize("argv, message", [
    (["sample", "{case}", "--sampler", "tli", "--context", "0", "--n", "5", "--seed", "-1"], "--seed"),
    (["sample", "{case}", "--sampler", "tli", "--context", "x", "--n", "5", "--seed", "1"], "invalid int"),
    (["report", "--source", "synthetic", "--out", "{case}"], "not a directory"),
])
def test_cli_edge_cases_exit_2_with_one_line(tmp_path, capsys, argv, message):
    _case(tmp_path / "c.npz")
    argv = [a.replace("{case}", str(tmp_path / "c.npz")) for a in argv]
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse usage errors exit from inside the parser
        code = exc.code
    assert code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and message in err[0]


def test_case_without_contexts_is_rejected(tmp_path, capsys):
    np.savez(tmp_path / "e.npz", target_probs=np.zeros((0, 4)), draft_probs=np.zeros((0, 4)),
             draft_to_target=np.arange(4))
    assert main(["acceptance", str(tmp_path / "e.npz")]) == 2
    assert "no contexts" in capsys.readouterr().err


def test_verify_draft_matches_the_step_law():
    """Monte Carlo: n = 60,000 drafts x ~ r then verify_draft; chi-square vs p."""
    rng = np.random.default_rng(4)
    p = np.array([0.1, 0.0, 0.6, 0.3])
    r = np.array([0.4, 0.2, 0.3, 0.1])
    counts = np.zeros(4, dtype=np.int64)
    accepted = 0
    for _ in range(60_000):
        tok, ok = rt.verify_draft(p, r, rt.draw(r, rng), rng)
        counts[tok] += 1
        accepted += ok
    assert_matches_law(counts, p, "verify_draft")
    # the same r = p edge case as sample_steps: never an empty residual
    assert rt.verify_draft(p, p, 2, rng) == (2, True)


def test_inverse_cdf_never_returns_a_zero_weight_even_at_the_top_end():
    w = np.array([0.1, 0.0, 0.7, 0.2, 0.0, 0.0])
    draw = rt.InverseCdf(w)
    u = np.array([0.0, 0.1, np.nextafter(0.1, 0), 0.8, np.nextafter(1.0, 0)])
    got = draw(u)
    assert list(got) == [0, 2, 0, 3, 3]
    assert np.all(w[got] > 0)
    assert rt.InverseCdf(np.zeros(3)).last == -1
