"""rfkit.estimators — numpy reference estimators for random-feature attention (float64 by default).

Primitives (this package's modules):

* :mod:`~rfkit.estimators.kernels` — exact kernels (softmax, Gaussian, dot-product kernels);
* :mod:`~rfkit.estimators.projections` — random projections (iid Gaussian, spherical, Haar-orthogonal
  blocks, Rademacher);
* :mod:`~rfkit.estimators.features` — trigonometric, positive and hyperbolic random features;
* :mod:`~rfkit.estimators.attention` — exact softmax/kernel attention and linear attention from
  features (bidirectional and causal);
* :mod:`~rfkit.estimators.importance` — IS, SNIS and effective sample size;
* :mod:`~rfkit.estimators.beautiful` — F̂^iid_m / F̂^ort_m of beautiful functions (Performer F.4);
* :mod:`~rfkit.estimators.structured` — H-ORF and G-ORF projections (fast Walsh–Hadamard, Givens);
* :mod:`~rfkit.estimators.generalized` — the Eq 5 template and generalized-attention features;
* :mod:`~rfkit.estimators.favor` — FAVOR+ attention end to end (Performer Algorithm 1) and its named
  estimators;
* :mod:`~rfkit.estimators.control_variates` — control-variate estimators (coefficient given or estimated);
* :mod:`~rfkit.estimators.eva` — EVA: RFA as per-token control variates, ideal/practical/causal EVA,
  Scatterbrain;
* :mod:`~rfkit.estimators.proposals` — the :class:`~rfkit.estimators.proposals.Proposal` protocol
  (``dim``, ``sample(rng, size)``, ``logpdf``), Gaussian and Gaussian-mixture proposals, the log ratio to
  ``N(0, I)``;
* :mod:`~rfkit.estimators.rfa` — RFA as self-normalised importance sampling (RA/LARA paper §2-3, EVA §2.2):
  the one :func:`~rfkit.estimators.rfa.rfa_attention` (any proposal, every map and form, causal, per-query
  samples), merged coordinates, Algorithm 2;
* :mod:`~rfkit.estimators.ra` — randomized attention (unbiased RA, Eq 30 mixture sampler, biased RA,
  Algorithm 1);
* :mod:`~rfkit.estimators.mis` — multiple importance sampling: Gaussian proposals and weighting functions
  (balance heuristic, Eqs 9, 27, 37);
* :mod:`~rfkit.estimators.lara` — linear randomized attention (LARA, Eqs 10/28, G.3 proposals);
* :mod:`~rfkit.estimators.maclaurin_kernels` — Macformer Table 1 dot-product kernels and their Maclaurin
  coefficients;
* :mod:`~rfkit.estimators.rmf` — random Maclaurin features (Definition 3) and RMFA (Eq 12);
* :mod:`~rfkit.estimators.kernel_features` — references for audited libraries: random-phase Fourier features
  (Rahimi & Recht) and fixed-degree random Maclaurin features of the polynomial kernel (Kar & Karnick);
* :mod:`~rfkit.estimators.ppsbn` — Macformer's pre/post scaling batch normalisation (ppSBN).

The RA/LARA and Macformer modules are imported as submodules (``rfkit.estimators.lara.lara_attention``); their names are
not flattened into this namespace, except :func:`~rfkit.estimators.rfa.rfa_attention`
(``rfkit.estimators.rfa_attention`` is the same object) and the proposals.

Conventions (shapes, scaling, randomness, errors) are those of the project's DESIGN notes: queries
``(..., N, d)``, keys ``(..., M, d)``, values ``(..., M, d_v)``; every random function takes ``rng``;
invalid input raises ``ValueError``/``TypeError`` naming the argument; unavoidable overflow raises
:class:`NumericalError`.
"""

from rfkit.base.checks import NonPositiveDenominatorWarning, NumericalError

from . import kernel_features, lara, maclaurin_kernels, mis, ppsbn, proposals, ra, rfa, rmf
from .attention import (
    AttentionStats,
    kernel_attention,
    linear_attention,
    linear_attention_buffers,
    linear_attention_quadratic,
    softmax_attention,
)
from .beautiful import (
    G_KINDS,
    RADIAL_LAWS,
    IsotropicLaw,
    Maclaurin,
    beautiful_estimate,
    beautiful_projections,
    beautiful_terms,
)
from .control_variates import (
    SnisControlVariate,
    control_variate_estimate,
    control_variate_mean,
    optimal_coefficient,
    snis_control_variate,
)
from .eva import (
    EXACT,
    EXCLUDED,
    ControlVariateTerms,
    EvaDetails,
    LinearLayerNorm,
    PracticalPartition,
    ScatterbrainParts,
    block_labels,
    contiguous_labels,
    control_variate_family,
    control_variate_terms,
    eva_causal,
    eva_causal_incremental,
    eva_coefficients,
    eva_ideal,
    eva_practical,
    exact_set,
    partition_labels,
    practical_partition,
    scatterbrain_attention,
    shared_coefficients,
    token_coefficients,
)
from .favor import (
    FavorStats,
    ScanStats,
    draw_projection,
    favor_attention,
    favor_features,
    favor_from_features,
    generalized_attention,
    parallel_prefix_scan,
    prefix_sum_states,
    sm_hyp,
    sm_ort_hyp,
    sm_ort_pos,
    sm_ort_trig,
    sm_pos,
    sm_trig,
    smreg_ort_pos,
    smreg_pos,
)
from .features import (
    FEATURE_MAPS,
    Features,
    hyperbolic_features,
    positive_features,
    random_features,
    trig_features,
)
from .generalized import GENERALIZED_FUNCTIONS, generalized_features, template_features
from .importance import effective_sample_size, is_estimate, log_importance_weights, snis_estimate
from .kernels import KERNELS, dot_product_kernel, gaussian_kernel, get_kernel, softmax_kernel
from .projections import (
    NORM_LAWS,
    PROJECTIONS,
    gaussian_projection,
    haar_orthogonal,
    orthogonal_projection,
    projection,
    rademacher_projection,
    spherical_projection,
)
from .proposals import GaussianMixtureProposal, GaussianProposal, Proposal, log_ratio
from .rfa import rfa_attention
from .structured import GivensProjection, HadamardProjection, fwht, givens_projection, hadamard_projection

__all__ = [
    "kernel_features", "lara", "maclaurin_kernels", "mis", "ppsbn", "proposals", "ra", "rfa", "rmf",
    "Proposal", "log_ratio",
    "G_KINDS", "RADIAL_LAWS", "IsotropicLaw", "Maclaurin", "beautiful_estimate", "beautiful_projections",
    "beautiful_terms",
    "FavorStats", "ScanStats", "draw_projection", "favor_attention", "favor_features", "favor_from_features",
    "generalized_attention", "parallel_prefix_scan", "prefix_sum_states", "sm_hyp", "sm_ort_hyp", "sm_ort_pos",
    "sm_ort_trig", "sm_pos", "sm_trig", "smreg_ort_pos", "smreg_pos",
    "GENERALIZED_FUNCTIONS", "generalized_features", "template_features",
    "GivensProjection", "HadamardProjection", "fwht", "givens_projection", "hadamard_projection",
    "linear_attention_buffers",
    "SnisControlVariate", "control_variate_estimate", "control_variate_mean", "optimal_coefficient",
    "snis_control_variate",
    "EXACT", "EXCLUDED", "ControlVariateTerms", "EvaDetails", "GaussianMixtureProposal", "GaussianProposal",
    "LinearLayerNorm", "PracticalPartition", "ScatterbrainParts", "block_labels", "contiguous_labels",
    "control_variate_family", "control_variate_terms", "eva_causal", "eva_causal_incremental", "eva_coefficients",
    "eva_ideal", "eva_practical", "exact_set", "partition_labels", "practical_partition", "rfa_attention",
    "scatterbrain_attention", "shared_coefficients", "token_coefficients",
    "AttentionStats", "FEATURE_MAPS", "Features", "KERNELS", "NORM_LAWS", "NonPositiveDenominatorWarning",
    "NumericalError", "PROJECTIONS", "dot_product_kernel", "effective_sample_size", "gaussian_kernel",
    "gaussian_projection", "get_kernel", "haar_orthogonal", "hyperbolic_features", "is_estimate",
    "kernel_attention", "linear_attention", "linear_attention_quadratic", "log_importance_weights",
    "orthogonal_projection", "positive_features", "projection", "rademacher_projection",
    "random_features", "snis_estimate", "softmax_attention", "softmax_kernel", "spherical_projection",
    "trig_features",
]
