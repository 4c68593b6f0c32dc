"""Exact tier: Fraction arithmetic through the same core functions, asserted with ``==``."""
from fractions import Fraction as F

import numpy as np
import pytest

import rdk_theory as rt
from tests.tolerances import assert_close


def fr(*vals):
    return np.array([F(v) for v in vals], dtype=object)


P = fr(F(1, 2), F(1, 4), F(1, 8), F(1, 8), 0)
Q_HET = fr(F(1, 3), F(1, 6), F(1, 6), F(1, 3))  # drafter over 4 tokens, one absent from T
MAP_HET = [0, 1, -1, 4]  # target id 4 has p = 0
KERNEL = np.array([[F(1, 2), F(1, 2), 0, 0, 0],
                   [0, F(3, 4), F(1, 4), 0, 0],
                   [0, 0, 1, 0, 0],
                   [F(1, 5)] * 5,
                   [0, 0, F(1, 3), F(1, 3), F(1, 3)]], dtype=object)


@pytest.mark.parametrize("sampler", ["vanilla", "tli", "rdk_exact", "marginal"])
def test_output_law_equals_target_exactly(sampler):
    vm = rt.VocabMap(5, MAP_HET)
    kernel = {"rdk_exact": rt.DenseKernel(KERNEL),
              "marginal": rt.MarginalKernel(fr(0, 0, F(1, 2), F(1, 2), 0), F(1, 3))}.get(sampler)
    props = rt.build_proposals(Q_HET, vm, kernel=kernel)
    r = props["rdk_exact" if kernel is not None else sampler]
    law = rt.step_output_law(P, r)
    assert all(law == P)
    assert sum(law) == 1


def test_known_values_and_sub_stochastic_vanilla():
    vm = rt.VocabMap(5, MAP_HET)
    props = rt.build_proposals(Q_HET, vm, kernel=rt.DenseKernel(KERNEL))
    assert list(props["vanilla"]) == [F(1, 3), F(1, 6), 0, 0, F(1, 3)]
    assert sum(props["vanilla"]) == F(5, 6)  # the absent token's 1/6 stays unplaced
    assert list(props["tli"]) == [F(2, 5), F(1, 5), 0, 0, F(2, 5)]
    assert rt.acceptance_rate(P, props["vanilla"]) == F(1, 2)
    assert rt.acceptance_rate(P, props["tli"]) == F(3, 5)
    # q'' = K^T q' = (1/5, 1/5 + 3/20, 1/20 + 2/15, 2/15, 2/15)
    assert list(props["rdk_exact"]) == [F(1, 5), F(7, 20), F(11, 60), F(2, 15), F(2, 15)]
    assert rt.acceptance_rate(P, props["rdk_exact"]) == F(1, 5) + F(1, 4) + F(1, 8) + F(1, 8)
    assert rt.oov_cap(P, vm) == F(3, 4)  # p(I) with I = {0, 1, 4}


def test_proposals_by_hand():
    """Mutation pass: a TLI proposal left unnormalised, or RDK transporting the vanilla
    proposal instead of TLI's, was caught only by the CLI's JSON test. By hand: TLI divides
    the in-target mass 5/6 out of (1/3, 1/6, ., 1/3); RDK is that row times KERNEL."""
    vm = rt.VocabMap(5, MAP_HET)
    assert list(rt.tli_proposal(Q_HET, vm)) == [F(2, 5), F(1, 5), 0, 0, F(2, 5)]
    assert list(rt.rdk_proposal(Q_HET, vm, rt.DenseKernel(KERNEL))) == [
        F(1, 5), F(7, 20), F(11, 60), F(2, 15), F(2, 15)]


def test_identity_kernel_rdk_equals_tli_and_vanilla_equals_tli_when_pruned():
    q = fr(F(1, 2), F(1, 3), F(1, 6))
    vm = rt.VocabMap.from_kept_ids([3, 0, 2], 5)
    props = rt.build_proposals(q, vm, kernel=rt.IdentityKernel())
    assert list(props["rdk_exact"]) == list(props["tli"])
    assert list(props["vanilla"]) == list(props["tli"])
    assert list(props["tli"]) == [F(1, 3), 0, F(1, 6), F(1, 2), 0]


def test_empty_intersection_has_no_proposal_and_draws_from_p():
    vm = rt.VocabMap(5, [-1, -1])
    props = rt.build_proposals(fr(F(1, 2), F(1, 2)), vm, kernel=rt.DenseKernel(KERNEL))
    for name in ("vanilla", "tli", "rdk_exact"):
        assert all(props[name] == 0)
        assert rt.acceptance_rate(P, props[name]) == 0
        assert all(rt.residual(P, props[name]) == P)
        assert all(rt.step_output_law(P, props[name]) == P)


def test_residual_is_zero_not_nan_when_alpha_is_one():
    res = rt.residual(P, P.copy())
    assert all(res == 0)
    resf = rt.residual(P.astype(float), P.astype(float))
    assert np.all(resf == 0) and np.all(np.isfinite(resf))
    assert all(rt.step_output_law(P, P.copy()) == P)


def test_total_variation_and_alpha_identity():
    r = fr(F(1, 4), F(1, 4), F(1, 4), F(1, 4), 0)
    assert rt.total_variation(P, r) == F(1, 4)
    assert rt.acceptance_rate(P, r) == 1 - rt.total_variation(P, r)


def test_batched_leading_axes_match_rowwise():
    rng = np.random.default_rng(3)
    p = rng.dirichlet(np.ones(6), size=(2, 3))
    q = rng.dirichlet(np.ones(4), size=(2, 3))
    vm = rt.VocabMap(6, [5, 0, -1, 2])
    ker = rt.DenseKernel(rng.dirichlet(np.ones(6), size=6))
    batched = rt.build_proposals(q, vm, kernel=ker)
    for i in range(2):
        for j in range(3):
            single = rt.build_proposals(q[i, j], vm, kernel=ker)
            for k in batched:  # float64: equal up to the BLAS summation order
                assert_close(batched[k][i, j], single[k])
                assert_close(rt.acceptance_rate(p, batched[k])[i, j],
                             rt.acceptance_rate(p[i, j], single[k]))


@pytest.mark.parametrize("draft_to_target", [[2, 0, 1], [1, 0, 2], [0, 2, 1]])
def test_a_permuted_map_scatters_each_drafter_token_to_its_own_target_id(draft_to_target):
    """A pruned map that keeps every target id in another order is not the identity: drafter
    token j's mass lands on target id draft_to_target[j] (numpy, exact and torch alike)."""
    vm = rt.VocabMap(3, draft_to_target)
    q = fr(F(1, 2), F(1, 3), F(1, 6))
    want = np.zeros(3, dtype=object)
    for j, x in enumerate(draft_to_target):
        want[x] = q[j]
    assert list(rt.vanilla_proposal(q, vm)) == list(want) == list(rt.tli_proposal(q, vm))
    got = rt.vanilla_proposal(q.astype(float), vm)
    assert got.tolist() == want.astype(float).tolist()
    torch = pytest.importorskip("torch")  # the tensor case alone
    got_t = rt.vanilla_proposal(torch.tensor(q.astype(float)), vm)
    assert got_t.tolist() == want.astype(float).tolist()


def _ints(values):
    return np.array(values, dtype=object)


def test_integer_entries_stay_in_the_exact_tier():
    """Python or numpy ints in an object array are exact numbers: TLI's division, the residual
    and TV must give Fractions, not the floats of int / int (the output law then missed p under
    ==, and alpha 1/3 came out 0.3333333333333333)."""
    p = np.array([F(1, 3), F(2, 3)], dtype=object)
    vm = rt.VocabMap.identity(2)
    for q in (_ints([1, 0]), _ints([np.int64(1), np.int64(0)])):
        r = rt.tli_proposal(q, vm)
        assert r.tolist() == [1, 0] and all(isinstance(v, F) for v in r)
        assert rt.acceptance_rate(p, r) == F(1, 3)
        assert (rt.step_output_law(p, r) == p).all()
        assert rt.residual(_ints([0, 1]), r).tolist() == [0, 1]
        assert all(isinstance(v, F) for v in rt.residual(_ints([0, 1]), r))
    identity = rt.DenseKernel(_ints([[1, 0], [0, np.int64(1)]]))
    r, alpha = rt.rdk_proposal_with_acceptance(p, _ints([F(1, 2), F(1, 2)]), vm, identity)
    assert r.tolist() == [F(1, 2), F(1, 2)] and alpha == F(5, 6) and isinstance(alpha, F)
    tv = rt.total_variation(p, p)
    assert tv == 0 and isinstance(tv, F)  # int 0 / 2 was the float 0.0
    both = rt.total_variation(_ints([[1, 0], [0, 1]]), _ints([[1, 0], [1, 0]]))
    assert both.tolist() == [0, 1] and all(isinstance(v, F) for v in both)


def test_numpy_ints_do_not_wrap_around_in_the_exact_checks():
    """Four numpy int64 entries of 2^62 sum to 0 in int64: the row 'summed to 1' and was
    taken as a distribution."""
    wrapped = np.array([np.int64(2 ** 62)] * 4 + [np.int64(1)], dtype=object)
    with pytest.raises(rt.InputError, match="must sum to 1 exactly"):
        rt.acceptance_rate(wrapped, wrapped)
    with pytest.raises(rt.InputError, match="not row-stochastic"):
        rt.DenseKernel(np.array([[np.int64(2 ** 62)] * 4 + [np.int64(1)]] + [[0] * 4 + [1]] * 4,
                                dtype=object))


@pytest.mark.parametrize("call", [
    lambda: rt.draw([10 ** 400, 1], np.random.default_rng(0)),
    lambda: rt.acceptance_rate([10 ** 400, 0.5], [0.5, 0.5]),
    lambda: rt.InverseCdf([F(10 ** 400), 0.5]),
])
def test_numbers_beyond_float64_are_input_errors(call):
    """An int or Fraction too large for float64 in input read as floats was a raw
    OverflowError."""
    with pytest.raises(rt.InputError, match="too large for float64"):
        call()


def test_oov_cap_counts_no_mass_of_a_last_token_outside_I():
    """p(I) with the last target id outside I and p > 0 there: an oov_cap that indexed
    draft_to_target directly (-1 reading the last id) passed the known-value test above only
    because P puts 0 on its last token."""
    vm = rt.VocabMap(4, [0, -1, 2])  # I = {0, 2}; id 3 (the last) is outside
    p = fr(F(1, 8), F(1, 4), F(1, 8), F(1, 2))
    assert rt.oov_cap(p, vm) == F(1, 4)


def test_the_scatter_keeps_a_float32_drafter_in_float32():
    """vanilla_proposal of float32 numpy input (check=False, the decode loop) is float32, as on
    torch: zeros() made a float64 output whatever the input (the values were the same, the
    memory and the dtype a caller relies on were not)."""
    from rdk_theory import _backend as B

    q = np.array([[0.25, 0.75]], dtype=np.float32)
    assert B.scatter_last(q, np.array([0, 2]), 3).dtype == np.float32
    vm = rt.VocabMap(3, np.array([0, 2]))
    got = rt.vanilla_proposal(q, vm, check=False)
    assert got.dtype == np.float32 and got.tolist() == [[0.25, 0.0, 0.75]]
