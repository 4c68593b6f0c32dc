"""DSI offline cost model: closed forms, exact vs Monte Carlo, never slower than SI or non-SI."""
from __future__ import annotations

import math

import numpy as np
import pytest

from rdk_theory.validation import InputError
from simulators import dsi
from simulators.block import z_pvalue
from tests.stats import assert_pvalue
from tests.tolerances import INEQUALITY_SLACK, assert_close, assert_leq

C_GRID = np.geomspace(0.01, 1.0, 12)
A_GRID = np.linspace(0.0, 0.98, 15)


def _recursive_starts(n, c, k, servers):
    s = []
    for j in range(n):
        s.append(max(j * k * c, (s[j - servers] + 1) if j >= servers else -math.inf))
    return np.array(s)


@pytest.mark.parametrize("c,k,servers", [(0.1, 2, 3), (0.05, 1, 7), (0.3, 1, 2), (0.02, 10, 2), (0.5, 2, 1)])
def test_schedule_closed_form_matches_recursion(c, k, servers):
    j = np.arange(60)
    assert_close(dsi.task_starts(j, c, k, servers), _recursive_starts(60, c, k, servers))


def test_k1_with_enough_servers_has_the_closed_form():
    # 0.3 and 0.45: 1/c is not an integer, so servers_needed must round up (ceil(3.33) = 4)
    for c in (0.05, 0.2, 0.3, 0.45, 0.5, 1.0):
        assert dsi.servers_needed(c, 1) == math.ceil(1 / c - 1e-12)
        for a in (0.0, 0.5, 0.9):
            assert_close(dsi.dsi_cost(c, a, 1, dsi.servers_needed(c, 1)), c + (1 - c) * (1 - a))
    assert [dsi.servers_needed(0.3, k) for k in (1, 2, 3, 4)] == [4, 2, 2, 1]


@pytest.mark.parametrize("c,k,servers", [(0.1, 2, 3), (0.05, 1, 7), (0.3, 1, 2), (0.02, 10, 2),
                                           (0.5, 2, 1), (0.1, 1, 20)])
def test_closed_form_cost_is_the_sum_over_the_recursive_schedule(c, k, servers):
    """E[tau] (1 - a) summed term by term over the recursion's start times (independent of
    the closed forms of the schedule and of the sum), to the tail below 1e-17."""
    for a in (0.0, 0.3, 0.9, 0.99):
        n = 2 + (int(math.ceil(math.log(1e-17) / (k * math.log(a)))) if a > 0 else 0)
        starts = _recursive_starts(n + 1, c, k, servers)
        j = np.arange(1, n + 1)
        weights = np.concatenate([[1 - a], a ** ((j - 1) * k + 1) - a ** (j * k + 1)])
        assert_close(dsi.dsi_cost(c, a, k, servers), float(weights @ (starts + 1)) * (1 - a))


def test_cost_near_a_equal_one_needs_no_truncated_sum():
    """a = 1 - 1e-9 made the truncated sum allocate 274 GiB; the closed form gives the k = 1
    law c + (1 - c)(1 - a) there; with one server, task j starts at j and settles k drafts,
    so the cost tends to 1 / k as a -> 1."""
    for a in (1 - 1e-9, 1 - 1e-15):
        assert_close(dsi.dsi_cost(0.1, a, 1, 20), 0.1 + 0.9 * (1 - a))
        assert abs(dsi.dsi_cost(0.1, a, 2, 1) - 0.5) < 1e-8
        assert 0 < dsi.dsi_cost(0.1, a, 2, 2) <= 1
    # a billion servers: the sum over them stops at round-off (it was an O(S) array); here
    # sum_r r 2^-(r-1) = 4, so E[s] = a (1 - x) k c 4 = 0.5 * 0.5 * 1e-9 * 4 = 1e-9 (x^(S-1)
    # underflows) and the cost is (1 + E[s]) (1 - a) = 0.5 (1 + 1e-9)
    assert_close(dsi.dsi_cost(1e-9, 0.5, 1, 10**9), 0.5 * (1 + 1e-9))


def test_best_lookahead_keeps_k_c_at_most_one():
    """The model is valid only for k c <= 1 (a lookahead finishes before the target call it
    waits for); with one server an unconstrained search would pick k = 3 at c = 0.4."""
    assert dsi.dsi_best(0.4, 0.9, 1)[0] == 2
    for c in C_GRID:
        for a in A_GRID:
            for servers in (1, 3):
                k, cost = dsi.dsi_best(c, a, servers)
                assert k * c <= 1 + 1e-12 and cost == dsi.dsi_cost(c, a, k, servers)


def test_si_cost_known_value_and_si_can_be_slower_than_non_si():
    assert_close(dsi.si_cost(0.1, 0.8, 4), 1.4 * 0.2 / (1 - 0.8 ** 5))
    assert dsi.si_best(0.5, 0.2)[1] > 1.0  # a slow, inaccurate drafter: SI loses to non-SI


@pytest.mark.parametrize("servers", [2, 3, 7, 100])
def test_dsi_is_never_slower_than_si_or_non_si_on_the_grid(servers):
    """Statement of [4] under this model: best-k DSI <= min(best-k SI, non-SI) at every grid point."""
    sw = dsi.sweep(C_GRID, A_GRID, servers, k_max=32)
    assert_leq(sw["dsi"], np.minimum(sw["si"], 1.0))
    assert np.all(sw["speedup_vs_si"] >= 1 - INEQUALITY_SLACK)


def test_one_server_is_a_real_negative_control():
    """With a single target server there is no speculation parallelism: DSI can lose to SI."""
    sw = dsi.sweep(C_GRID, A_GRID, 1, k_max=32)
    assert (sw["dsi"] > sw["si"] + 1e-9).any()
    assert np.all(sw["dsi"] <= 1.0 + INEQUALITY_SLACK)  # still never slower than non-SI (k c <= 1)


def test_pathwise_never_slower_than_non_si():
    for c, k, servers in [(0.1, 5, 2), (0.25, 4, 1), (0.05, 20, 3)]:
        m = np.arange(1, 400)
        tau = dsi.task_starts(np.ceil((m - 1) / k).astype(int), c, k, servers) + 1
        assert np.all(tau <= m + INEQUALITY_SLACK)


@pytest.mark.parametrize("bad", [dict(c=0.0, a=0.5), dict(c=1.5, a=0.5), dict(c=0.1, a=1.0), dict(c=0.1, a=-0.1)])
def test_bad_inputs(bad):
    with pytest.raises(InputError):
        dsi.dsi_cost(k=1, servers=2, **bad)


@pytest.mark.mc
@pytest.mark.parametrize("c,a,k,servers", [(0.1, 0.8, 3, 7), (0.05, 0.9, 2, 2)])
def test_exact_cost_matches_event_replay(c, a, k, servers):
    """n = 20000 renewal cycles replayed event by event (server heap): z-test of
    E[tau - R m] = 0 with R the exact time per token (delta method for the ratio estimator)."""
    times, tokens = dsi.dsi_monte_carlo(c, a, k, servers, 20000, np.random.default_rng(1))
    r = dsi.dsi_cost(c, a, k, servers)
    assert_pvalue(z_pvalue(times - r * tokens, 0.0), f"DSI replay c={c} a={a} k={k} S={servers}")


def test_dsi_inputs_are_named_errors():
    """A string or None cost was a raw TypeError, an array a raw ValueError, True read as
    c = 1, c = 5e-324 overflowed int(ceil(inf)), task_starts took 0 or -1 servers (a
    division by zero, [0, -1, -2]) and sweep a 2-D grid."""
    import numpy as np
    import pytest

    from rdk_theory.validation import InputError
    from simulators import dsi

    for c in ("0.5", None, True, np.array([0.5, 0.6])):
        with pytest.raises(InputError, match="drafter cost c must be a number in"):
            dsi.si_cost(c, 0.5, 2)
    with pytest.raises(InputError, match="servers: more than"):
        dsi.servers_needed(5e-324, 1)
    with pytest.raises(InputError, match="servers must be an integer >= 1"):
        dsi.task_starts(np.arange(3), 0.1, 1, 0)
    with pytest.raises(InputError, match="must be 1-D"):
        dsi.sweep([[0.5]], [0.5], 2)
    assert dsi.task_starts(np.arange(3), 0.1, 1, 2).tolist() == [0.0, 0.1, 1.0]
