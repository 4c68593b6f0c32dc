"""rdk-theory: exact acceptance calculators and lossless samplers for speculative sampling with
pruned or mismatched drafter vocabularies (vanilla, TLI, exact RDK, first-order RDK).

Notation (MATH.md): ``p`` target law over ``T``, ``q`` drafter law over ``D``, ``I`` the target
ids reachable from the drafter, ``r`` a proposal, ``alpha(p, r) = sum_x min(p(x), r(x))``.
"""
from . import synthetic
from .acceptance import acceptance_rate, oov_cap, residual, step_output_law, total_variation
from .first_order import FirstOrderCovarianceKernel
from .kernels import (
    CovarianceSoftmaxKernel,
    DenseKernel,
    IdentityKernel,
    MarginalKernel,
    SparseKernel,
    as_kernel,
    calibration_covariance,
    cosine_affinity,
    covariance_affinity,
    covariance_softmax_kernel,
    sparse_topk_kernel,
)
from .proposals import (
    SAMPLERS,
    build_proposals,
    rdk_proposal,
    rdk_proposal_with_acceptance,
    tli_proposal,
    vanilla_proposal,
)
from .sampling import (InverseCdf, draw, emitted_counts, sample_counts, sample_steps, verify_draft,
                       verify_step)
from .validation import InputError
from .vocab import VocabMap, keep_most_frequent, pruned_draft_probs

__version__ = "0.1.0"

__all__ = [
    "SAMPLERS", "CovarianceSoftmaxKernel", "DenseKernel", "FirstOrderCovarianceKernel", "IdentityKernel", "InputError",
    "MarginalKernel", "SparseKernel", "VocabMap", "acceptance_rate", "as_kernel",
    "build_proposals", "draw", "verify_draft", "InverseCdf", "calibration_covariance", "cosine_affinity", "covariance_affinity",
    "covariance_softmax_kernel", "emitted_counts", "keep_most_frequent", "oov_cap", "pruned_draft_probs",
    "rdk_proposal", "rdk_proposal_with_acceptance", "residual", "sample_counts", "sample_steps",
    "sparse_topk_kernel", "step_output_law",
    "synthetic", "tli_proposal", "total_variation", "vanilla_proposal", "verify_step",
]
