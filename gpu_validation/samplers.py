"""The five samplers of the study, built for one kept set from calibration statistics.

=================  ==========================================================================
name               proposal over the target vocabulary (MATH.md sections 3-5)
=================  ==========================================================================
vanilla            ``q`` scattered to T (equals TLI for a pruned drafter)
tli                ``q'``: ``q`` restricted to I, renormalised
rdk_exact          exact ``M^T q'`` for a *sparse* covariance kernel: each kept token's row keeps
                   its ``k`` largest covariances (diagonal always), softmax at ``tau``; rows of
                   tokens outside I are never used (``q' = 0`` there) and are the identity.
                   A dense N x N kernel does not fit at N = 151,936; this one is exact for the
                   kernel it defines, built in O(K N r) from the calibration factor.
rdk_first_order    :class:`rdk_theory.first_order.FirstOrderCovarianceKernel` (O(N r) per row)
marginal           :class:`rdk_theory.kernels.MarginalKernel` from the calibration mean
=================  ==========================================================================

``tau`` for the two covariance samplers is picked on the calibration positions (never on the
evaluation positions) from a grid relative to the largest calibration variance.
"""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from rdk_theory.acceptance import acceptance_rate, finite_tau_score
from rdk_theory.first_order import FirstOrderCovarianceKernel
from rdk_theory.kernels import MarginalKernel, SparseKernel
from rdk_theory.proposals import tli_proposal, vanilla_proposal
from rdk_theory.validation import InputError, as_count, as_real_array, check_tau
from rdk_theory.vocab import VocabMap

SAMPLERS = ("vanilla", "tli", "rdk_exact", "rdk_first_order", "marginal")
#: tau candidates, as multiples of max_i Omega_ii. It reaches down to 1e-6 because first-order
#: RDK's calibration acceptance can keep rising as tau falls (a grid that stopped at 3e-4 left
#: its best tau at the grid's edge): as tau -> 0 it tends to TLI, which bounds what a smaller
#: tau could still show (the study records TLI's calibration acceptance beside the grid).
TAU_GRID = (1.0, 0.1, 0.03, 0.01, 0.003, 0.001, 3e-4, 1e-4, 3e-5, 1e-5, 3e-6, 1e-6)


class KeptRowsTopK:
    """Top-``k`` covariance affinities of the rows in ``rows``; softmax at any ``tau`` later."""

    def __init__(self, factor, rows, k: int, block: int = 1024):
        import torch

        factor = as_real_array(factor, "factor")
        if factor.ndim != 2 or 0 in factor.shape or not np.isfinite(factor).all():
            raise InputError(f"factor must be a finite (r, N) array, got shape {factor.shape}")
        c = torch.as_tensor(factor.astype(np.float32))  # (r, N); Omega = c.T @ c
        n = c.shape[1]
        try:  # the kept ids, checked as a pruned drafter's (a writable copy: torch reads it)
            rows = np.array(VocabMap.from_kept_ids(rows, n).draft_to_target)
        except InputError as exc:
            raise InputError(f"rows: {exc}") from None
        k = as_count(k, "k", 1)
        if k > n:  # torch.topk's own error named neither k nor N
            raise InputError(f"k = {k} exceeds the vocabulary size N = {n}")
        self.n, self.rows, self.k = n, rows, k
        self.cols = np.empty((rows.size, k), dtype=np.int64)
        self.vals = np.empty((rows.size, k), dtype=np.float64)
        for s in range(0, rows.size, block):
            rr = torch.as_tensor(rows[s:s + block])
            blk = c[:, rr].T @ c  # (b, N) rows of Omega
            ar = torch.arange(rr.numel())
            diag = blk[ar, rr].clone()
            blk[ar, rr] = float("inf")  # the diagonal is always kept
            top = torch.topk(blk, k, dim=1).indices
            blk[ar, rr] = diag
            self.cols[s:s + block] = top.numpy()
            self.vals[s:s + block] = torch.gather(blk, 1, top).double().numpy()

    def kernel(self, tau: float) -> SparseKernel:
        """The row-stochastic sparse kernel at temperature ``tau`` (identity off the kept rows)."""
        tau = check_tau(tau)
        v = self.vals / tau
        w = np.exp(v - v.max(axis=1, keepdims=True))
        w /= w.sum(axis=1, keepdims=True)
        other = np.setdiff1d(np.arange(self.n), self.rows)
        r = np.concatenate([np.repeat(self.rows, self.k), other])
        c = np.concatenate([self.cols.ravel(), other])
        d = np.concatenate([w.ravel(), np.ones(other.size)])
        # row-stochastic by construction (softmax rows, identity rows); checked in the tests
        return SparseKernel(sp.csr_matrix((d, (r, c)), shape=(self.n, self.n)), check=False)


def proposals(q_kept, vocab_map, kernels: dict) -> dict:
    """Proposal (C, N_T) of each sampler for pruned-drafter laws ``q_kept`` (C, K)."""
    out = {"vanilla": vanilla_proposal(q_kept, vocab_map, check=False)}
    out["tli"] = tli_proposal(q_kept, vocab_map, check=False)
    for name, kern in kernels.items():
        out[name] = kern.transport(out["tli"])
    return out


def build_kernels(vocab_map, mu, factor, *, tau_exact: float, tau_fo: float | None,
                  topk_rows: KeptRowsTopK | None) -> dict:
    """The RDK kernels of one kept size: marginal always, first-order RDK when ``tau_fo`` is
    given (an end-to-end size the study did not tune has none: TLI and marginal only), exact
    RDK when ``topk_rows`` is."""
    kernels = {"marginal": MarginalKernel.from_calibration(mu[None, :], vocab_map)}
    if tau_fo is not None:
        kernels["rdk_first_order"] = FirstOrderCovarianceKernel.from_factor(factor, tau_fo)
    if topk_rows is not None:
        kernels["rdk_exact"] = topk_rows.kernel(tau_exact)
    return kernels


def pick_tau(p_cal, q_cal_kept, vocab_map, make_kernel, scale: float, grid=TAU_GRID):
    """The ``tau = g * scale`` of ``grid`` with the best mean acceptance on calibration rows."""
    tli = tli_proposal(q_cal_kept, vocab_map, check=False)
    best, table = None, {}
    for g in grid:
        kern = make_kernel(g * scale)
        a = finite_tau_score(np.mean(acceptance_rate(p_cal, kern.transport(tli), check=False)),
                             g * scale)
        table[g * scale] = a
        if best is None or a > table[best]:
            best = g * scale
    return best, table
