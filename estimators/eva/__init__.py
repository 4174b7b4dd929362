r"""EVA: efficient attention via control variates (Zheng et al., ICLR 2023; ``002_b2e9d84e2f6b65de.txt``).

Notation (register ``../shared/claims/eva.md``): query ``q_n``, keys ``k_m``, values ``v_m``;
``e_m = exp(q_n·k_m)``, ``Z = Σ_m e_m``, ``w_m = e_m/Z``; the positive randomized mapping
``ξ(x, ω) = exp(ω·x - ‖x‖²/2)`` (Eq 3); samples ``ω_s ~ ρ`` (the paper's proposal ``q(ω)``) with density
ratio ``r(ω) = N(ω; 0, I)/ρ(ω)``, and ``λ_{s,m} = r(ω_s) ξ(q_n, ω_s) ξ(k_m, ω_s) > 0``.

What this package provides, each a composition of rfkit's primitives, by module:

* **proposals** — :class:`~rfkit.estimators.proposals.GaussianProposal` ``N(μ, τ²I)`` and
  :class:`~rfkit.estimators.proposals.GaussianMixtureProposal` (re-exported from
  :mod:`rfkit.estimators.proposals`: ``sample``, ``logpdf``; ``log r`` by
  :func:`~rfkit.estimators.proposals.log_ratio`); :func:`~rfkit.estimators.rfa.log_xi` (``log ξ``);
* **RFA as SNIS** (§2.2, Eq 4) — :func:`~rfkit.estimators.rfa.rfa_attention` (defined in
  :mod:`rfkit.estimators.rfa`, re-exported here): ``Σ_{s,m} λ v_m / Σ_{s,m} λ``; shared samples use
  :func:`~rfkit.estimators.attention.linear_attention` with ``form="features"`` (linear in ``N`` and ``M``,
  bidirectional or causal); query-dependent samples the direct ``O(NSMd)`` path;
* **per-token control variates** (§3.1, Eq 7; defined in :mod:`rfkit.estimators.control_variates`,
  re-exported here) — :func:`control_variate_terms` returns :class:`ControlVariateTerms` (``g_m``, ``h_m``,
  ``g``, ``h``, ``β̂``, ``W(ω_s)``, ``f_n(ω_s)``, ``α(ω_s)``, all from ``log λ - log Z`` with the exact
  ``log Z``); :func:`control_variate_family` evaluates ``g̃ = Σ_m [g_m - β_m(h_m - w_m)]`` for any
  coefficient assignment, built by :func:`shared_coefficients` (RFA, Eq 7), :func:`token_coefficients`
  (Prop 1) and :func:`eva_coefficients` (Eq 13);
* **EVA with exact subset masses** (Eq 13 / 15; :mod:`.idealized`) — :func:`eva_ideal`, with partitions
  given as label arrays (:data:`EXACT`, :data:`EXCLUDED`, subset indices), built (:mod:`.partitions`) by
  :func:`contiguous_labels`, :func:`partition_labels` (contiguous, random, k-means clustered, dyadic),
  :func:`exact_set` (local block, top-``|E|``, random) and :func:`block_labels` (§4.2's per-query blocks
  and chunks, optionally causal);
* **practical EVA** (Eq 16, Algorithm 1, App C; :mod:`.practical`) — :func:`eva_practical` with the
  register's options and diagnostic variants, its partition :func:`practical_partition`
  (:mod:`.partitions`), the chunk summary map :class:`LinearLayerNorm` (``σ = LN∘Linear``, Eq 26);
* **causal EVA** (App D, Algorithm 2; :mod:`.causal`) — :func:`eva_causal` (parallel, mask matrices) and
  :func:`eva_causal_incremental` (token by token, set based);
* **Scatterbrain** (App G.5, Eqs 29-30; :mod:`.scatterbrain`) — :func:`scatterbrain_attention`.

Frames: the paper uses the unscaled kernel ``exp(q·k)`` (``frame="theory"``); ``frame="sqrt_d"`` first
replaces ``q ← d^{-1/4} q`` and ``k ← d^{-1/4} k`` (logits ``q·k/√d``). The practical estimators also take
``frame="reference_code"`` (the authors' released code: logits and chunk log-features divided by ``√d``,
proposal means from unscaled ``σ`` outputs).

Numerics: every exponential is formed in log space with a shift that cancels exactly in the ratio
(row maxima over *allowed* logits only, so causal rows never look at the future). Randomness comes only
from ``rng`` or explicit draws (``omega=``, ``eps=``), so estimators can share samples.
"""

from __future__ import annotations

from rfkit.base.laws import EXACT, EXCLUDED

from ..control_variates import (
    ControlVariateTerms,
    control_variate_family,
    control_variate_terms,
    eva_coefficients,
    shared_coefficients,
    token_coefficients,
)
from ..proposals import GaussianMixtureProposal, GaussianProposal
from ..rfa import FRAMES, log_xi, rfa_attention
from .causal import eva_causal, eva_causal_incremental
from .idealized import eva_ideal
from .partitions import (
    EXACT_SETS,
    PARTITION_LAYOUTS,
    PracticalPartition,
    block_labels,
    contiguous_labels,
    exact_set,
    partition_labels,
    practical_partition,
)
from .practical import MU_RULES, PRACTICAL_FRAMES, EvaDetails, LinearLayerNorm, eva_practical
from .scatterbrain import ScatterbrainParts, scatterbrain_attention

__all__ = [
    "FRAMES",
    "PRACTICAL_FRAMES",
    "EXACT",
    "EXCLUDED",
    "MU_RULES",
    "log_xi",
    "GaussianProposal",
    "GaussianMixtureProposal",
    "rfa_attention",
    "ControlVariateTerms",
    "control_variate_terms",
    "control_variate_family",
    "shared_coefficients",
    "token_coefficients",
    "eva_coefficients",
    "contiguous_labels",
    "partition_labels",
    "exact_set",
    "block_labels",
    "PARTITION_LAYOUTS",
    "EXACT_SETS",
    "eva_ideal",
    "LinearLayerNorm",
    "PracticalPartition",
    "practical_partition",
    "EvaDetails",
    "eva_practical",
    "eva_causal",
    "eva_causal_incremental",
    "ScatterbrainParts",
    "scatterbrain_attention",
]
