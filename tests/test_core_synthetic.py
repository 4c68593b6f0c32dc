import numpy as np
import pytest

import rdk_theory as rt
from rdk_theory import synthetic
from tests.stats import FALSE_ALARM_PER_TEST, assert_pvalue
from tests.tolerances import assert_close


def test_families_are_distributions_with_the_promised_shape():
    rng = np.random.default_rng(0)
    d = synthetic.dirichlet(rng, 50, 0.1, size=(3, 4))
    assert d.shape == (3, 4, 50)
    assert_close(d.sum(-1), 1.0)
    z = synthetic.zipf(100, 1.2)
    assert_close(z.sum(), 1.0)
    assert np.all(np.diff(z) < 0)
    assert_close(z[0] / z[1], 2**1.2)
    s = synthetic.sparse_topk(rng, 30, 4, size=5)
    assert np.all((s > 0).sum(-1) == 4)
    assert_close(s.sum(-1), 1.0)
    tiny = synthetic.dirichlet(rng, 10, 1e-6, size=20)  # gamma draws underflow: point masses
    assert np.all(np.isfinite(tiny)) and np.allclose(tiny.sum(-1), 1.0)
    # a numpy integer size (e.g. from an array's shape arithmetic) is a size like an int
    assert synthetic.dirichlet(rng, 5, 1.0, np.int64(3)).shape == (3, 5)
    assert synthetic.sparse_topk(rng, 5, 2, size=np.int32(2)).shape == (2, 5)


def test_adversarial_pairs_have_their_named_acceptance():
    pairs = synthetic.adversarial_pairs(6)
    alpha = {k: float(rt.acceptance_rate(p, q)) for k, (p, q) in pairs.items()}
    assert alpha["equal"] == pytest.approx(1.0)
    assert alpha["disjoint_supports"] == 0.0
    assert alpha["point_masses_equal"] == 1.0
    assert alpha["point_masses_distinct"] == 0.0
    assert alpha["point_vs_uniform"] == pytest.approx(1 / 6)


def test_zipfian_lm_is_seeded_and_pruning_loses_mass():
    a = synthetic.zipfian_lm(np.random.default_rng(5), 256, contexts=8, calibration=16)
    b = synthetic.zipfian_lm(np.random.default_rng(5), 256, contexts=8, calibration=16)
    np.testing.assert_array_equal(a.target_probs, b.target_probs)
    for arr in (a.target_probs, a.draft_probs, a.calibration_probs):
        assert_close(arr.sum(-1), 1.0)
    kept = rt.keep_most_frequent(a.calibration_probs.mean(0), 26)
    cap = rt.oov_cap(a.target_probs, rt.VocabMap.from_kept_ids(kept, 256))
    assert np.all(cap < 1) and cap.mean() > 0.3


@pytest.mark.mc
@pytest.mark.parametrize("concentration", [0.1, 10.0])
def test_dirichlet_marginals_follow_the_beta_law_of_the_concentration(concentration):
    """Monte Carlo: n = 5,000 draws of Dirichlet(c 1_5); the first coordinate against its
    Beta(c, 4c) marginal by Kolmogorov-Smirnov, p-value > 1e-5 (the suite's per-test rate).
    The other concentration's Beta law is refuted (the test has power)."""
    from scipy import stats as sstats

    x = synthetic.dirichlet(np.random.default_rng(11), 5, concentration, size=5000)[:, 0]
    assert_pvalue(sstats.kstest(x, sstats.beta(concentration, 4 * concentration).cdf).pvalue,
                  f"Dirichlet({concentration}) first marginal vs Beta, n = 5000")
    other = 10.0 if concentration == 0.1 else 0.1
    assert sstats.kstest(x, sstats.beta(other, 4 * other).cdf).pvalue < FALSE_ALARM_PER_TEST


def test_zipf_with_rng_permutes_the_ids_of_the_same_law():
    z = synthetic.zipf(50, 1.3)
    zr = synthetic.zipf(50, 1.3, rng=np.random.default_rng(4))
    assert np.array_equal(np.sort(zr)[::-1], z)  # the same probabilities, exactly
    assert not np.array_equal(zr, z)  # at other ids
    assert np.array_equal(zr, synthetic.zipf(50, 1.3, rng=np.random.default_rng(4)))  # seeded
