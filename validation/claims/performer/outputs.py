r"""``performer.*`` claims on the attention matrix and its normalised output (Choromanski et al. 2021).

Entrywise unbiasedness of the attention matrix under iid, R-ORF, H-ORF and G-ORF (Abstract, Sec 1, B.2),
the normalised output (Sec 5) and its delta-method MSE (register derived predictions), and Fig 4's
output-MSE comparisons. Shared grids and pairs: :mod:`.common`.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from rfkit.estimators import (
    givens_projection,
    hadamard_projection,
    softmax_attention,
    softmax_kernel,
)
from rfkit.theory import softmax as theory
from rfkit.validation.claims.performer.common import (
    KINDS,
    _feature_map,
    _projections,
)
from rfkit.validation.domain import Choice
from rfkit.validation.harness import (
    chunks,
    gram_estimates,
)
from rfkit.validation.model import CellContext, Claim, tiers
from rfkit.validation.reproductions.performer import (
    coupled_projections,
    fig4_inputs,
    fig4_output_mse,
)
from rfkit.validation.stats import Evidence, combine, mean_test

#: Input generators for attention-level claims: I1 (iid N(0, c²) entries, scaled by d^{-1/4} inside
#: attention) and I3 (rows of scaled norm ρ with random directions).
ATTENTION_INPUTS = {"I1(c=0.25)": ("I1", 0.25), "I1(c=0.5)": ("I1", 0.5), "I1(c=1)": ("I1", 1.0),
                    "I3(rho=0.5)": ("I3", 0.5)}
#: Entries tested per cell at most (a uniformly random subset beyond it; all entries of small L).
MAX_ENTRIES = 64


def _attention_rows(ctx: CellContext, length: int, d: int) -> tuple[np.ndarray, np.ndarray]:
    """Scaled queries and keys ``x_i = q_i/d^{1/4}``, ``y_j = k_j/d^{1/4}`` of shape ``(L, d)``."""
    generator, size = ATTENTION_INPUTS[ctx.params["inputs"]]
    if generator == "I1":
        q, k = ctx.rng.normal(0.0, size, size=(2, length, d))
        return q / d**0.25, k / d**0.25
    rows = ctx.rng.standard_normal((2, length, d))
    rows *= size / np.linalg.norm(rows, axis=-1, keepdims=True)
    return rows[0], rows[1]


def _gram_draws(ctx: CellContext, kind: str, xs, ys, m: int, projection: str, n: int) -> np.ndarray:
    """``(n, N, M)`` estimated attention matrices ``Â = Q'K'ᵀ`` (``projection``: iid, orthogonal = R-ORF,
    hadamard = H-ORF, givens = G-ORF)."""
    fmap, d = _feature_map(ctx, kind), xs.shape[1]
    size = max(1, 4_000_000 // (m * (d + 2 * (xs.shape[0] + ys.shape[0]))))  # projections + (2m-wide) features
    if projection in STRUCTURED:
        return np.concatenate([gram_estimates(fmap, xs, ys, _structured_rows(ctx, projection, c, m, d), c)
                               for c in chunks(n, size)])
    return np.concatenate([gram_estimates(fmap, xs, ys, _projections(ctx, projection, c, m, d), c)
                           for c in chunks(n, size)])


#: The structured samplers of B.2(2), as in performer.b2.hg_orf_bias (default sizes, chi norms).
STRUCTURED = ("hadamard", "givens")


class _ReplicateRows:
    """``n`` replicates of ``m`` rows from one structured operator of ``n`` runs of whole independent blocks:
    replicate ``r`` owns the first ``m`` rows of run ``r`` (the operator protocol of
    :func:`rfkit.estimators.features.project`: ``apply``, ``m``, ``d``; ``shape`` for the harness)."""

    def __init__(self, op, n: int, m: int):
        self.op, self.n, self.run, self.rows = op, n, op.m // n, m
        self.m, self.d = n * m, op.d
        self.shape = (n * m, op.d)

    def apply(self, x, *, dtype=np.float64) -> np.ndarray:
        proj = self.op.apply(x, dtype=dtype)
        lead = proj.shape[:-1]
        return proj.reshape(*lead, self.n, self.run)[..., : self.rows].reshape(*lead, self.m)


def _structured_rows(ctx: CellContext, projection: str, n: int, m: int, d: int) -> _ReplicateRows:
    """``n`` independent H-ORF (``k = 3`` HD factors) or G-ORF (``K = ⌈d log₂ d⌉`` rotations) projections of ``m``
    rows, chi norms: ``⌈m/b⌉`` whole blocks of ``b`` rows each (``b = d``, H-ORF: the padded ``2^⌈log₂ d⌉``)."""
    if projection == "hadamard":
        block = 1 << max(d - 1, 0).bit_length()
        op = ctx.impl("hadamard_projection", hadamard_projection)(n * -(-m // block) * block, d, rng=ctx.rng, k=3,
                                                                  norms="chi")
    else:
        op = ctx.impl("givens_projection", givens_projection)(n * -(-m // d) * d, d, rng=ctx.rng, norms="chi")
    return _ReplicateRows(op, n, m)


def _entry_variances(kind: str, xs, ys, m: int, projection: str) -> np.ndarray:
    """Exact ``Var Â_ij`` (iid: diagonal of the kernel covariance; R-ORF: the block MSE)."""
    if projection == "iid":
        return np.stack([np.diag(theory.kernel_covariance(kind, x, ys, m)) for x in xs])
    return np.array([[theory.orthogonal_mse(kind, x, y, m) for y in ys] for x in xs])


def _entrywise_unbiased(ctx: CellContext, kind: str, projection: str, test: dict | None = None) -> Evidence:
    """``E Â_ij = A_ij`` for every tested entry (Bonferroni over entries). Entries whose Monte Carlo
    resolution would exceed half the tolerance (huge ``‖x_i + y_j‖²``) are left to the exact parts of the
    per-pair claims and counted in ``extra``.

    H/G-ORF (``projection`` in :data:`STRUCTURED`): the claim is a *small* bias, ``|bias| <= HG_SMALL_BIAS·A_ij``;
    effects are reported in units of the claim's tolerance (scale ``A_ij·HG_SMALL_BIAS/tolerance``), with
    ``(tolerance/HG_SMALL_BIAS)²`` times the replicates and an asymptotic test (no exact variance for these
    samplers; the R-ORF variance sizes the Monte Carlo domain)."""
    test = test or ctx.test
    length, d, m = ctx.params["L"], ctx.params["d"], ctx.params["m"]
    xs, ys = _attention_rows(ctx, length, d)
    exact = softmax_kernel(xs, ys)
    structured = projection in STRUCTURED
    sd = np.sqrt(_entry_variances(kind, xs, ys, m, "orthogonal" if structured else projection))
    relative = HG_SMALL_BIAS if structured else test["tolerance"]
    replicates = ctx.replicates * (math.ceil((test["tolerance"] / relative) ** 2) if structured else 1)
    rel_sd = sd / exact
    feasible = rel_sd <= relative / 2 * math.sqrt(replicates) / 6
    entries = np.argwhere(feasible)
    if len(entries) > MAX_ENTRIES:
        entries = entries[ctx.rng.choice(len(entries), MAX_ENTRIES, replace=False)]
    if len(entries) == 0:
        return Evidence(math.nan, 0.0, math.nan, math.nan, 1.0, math.inf, math.nan, math.inf, 0, "entrywise mean",
                        ("no entry inside the Monte Carlo domain",))
    draws = _gram_draws(ctx, kind, xs, ys, m, projection, replicates)
    sub = dict(test, alpha=test["alpha"] / len(entries))
    units = test["tolerance"] / relative
    parts = [mean_test(draws[:, i, j], exact[i, j], scale=exact[i, j] / units,
                       **({} if structured else dict(sd=float(sd[i, j]))), **sub) for i, j in entries]
    return combine(parts, extra=dict(entries=len(entries), outside_mc_domain=int((~feasible).sum()),
                                     relative_tolerance=relative,
                                     max_relative_bias=float(max(abs(draws[:, i, j].mean() / exact[i, j] - 1)
                                                                 for i, j in entries))))


#: Projection names of the statement and the samplers that draw them.
MATRIX_PROJECTIONS = {"iid": "iid", "R-ORF": "orthogonal", "H-ORF": "hadamard", "G-ORF": "givens"}
#: What "a small bias" of H/G-ORF means here: at most 2% of A_ij, performer.b2.hg_orf_bias's tolerance.
HG_SMALL_BIAS = 0.02


def _unbiased_matrix_cell(ctx: CellContext) -> Evidence:
    return _entrywise_unbiased(ctx, ctx.params["kind"], MATRIX_PROJECTIONS[ctx.params["projection"]])


# Budget: quick ~3-4 s (heavy): up to 64 entrywise tests per cell, R-ORF blocks sampled per replicate; H/G cells
# draw (0.05/0.02)² = 6.25 -> 7 times the replicates.
UNBIASED_ATTENTION_MATRIX = Claim(
    id="performer.abstract.unbiased_attention_matrix", source="Abstract; Sec 1; Sec 2.3; B.2",
    statement="Â = Q'K'ᵀ estimates A = exp(QKᵀ/√d) without bias (iid, R-ORF) or with a small bias (H/G-ORF).",
    kind="expectation",
    domain=dict(
        projection=Choice("iid, R-ORF (without bias); H/G-ORF (with a small bias)", tuple(MATRIX_PROJECTIONS)),
        kind=Choice("Q', K': the softmax estimators of this paper (trig, positive, hyperbolic)", tuple(KINDS))),
    tolerance=0.05,
    units="relative bias of an entry (iid, R-ORF); H/G-ORF: relative bias in units of 0.02/0.05, i.e. 'small "
          "bias' = |E Â_ij - A_ij| <= 0.02 A_ij (performer.b2.hg_orf_bias's tolerance)",
    cell=_unbiased_matrix_cell,
    grid=tiers(dict(kind=list(KINDS), projection=list(MATRIX_PROJECTIONS), d=[4, 16], m=[16], L=[8],
                    inputs=["I1(c=0.25)"]),
               smoke=dict(d=[4], L=[4], inputs=["I3(rho=0.5)"]),
               full=dict(d=[4, 16, 64], m=[4, 16, 256], L=[8, 64], inputs=["I1(c=0.25)", "I3(rho=0.5)"])),
    replicates=tiers(8_000, smoke=4_000, full=100_000),
    roles=tuple(f"feature_map.{k}" for k in KINDS) + ("orthogonal_projection", "hadamard_projection",
                                                       "givens_projection"), plot_x="kind",
    notes="Extra grid axes d, m, L and inputs are the register's sweep (I1 with c = 0.25, I3 with ρ = 0.5); every "
          f"entry (at most {MAX_ENTRIES} random ones) whose Monte Carlo resolution is below half the tolerance "
          "(exact per-entry sd; R-ORF's for H/G) is tested, the rest is left to the exact parts of the per-pair "
          "claims (sec2_3.trig_unbiased, lemma1.prf_estimators). H/G-ORF as in performer.b2.hg_orf_bias: H-ORF "
          "with k = 3 HD factors, G-ORF with K = ⌈d log₂ d⌉ Givens rotations, chi norms, whole independent blocks "
          "per replicate (d padded to a power of 2 for H-ORF). 'Small bias' is b2.hg_orf_bias's criterion, a "
          "relative bias of at most 0.02; that claim tests it at d >= 64 (its d → ∞ limit), this statement names no "
          "d, so it is tested at every d of the grid. H/G cells are asymptotic (no exact variance for these "
          "samplers) and draw (0.05/0.02)² -> 7 times the replicates.",
)


def _attention_outputs(ctx: CellContext, kind: str, xs, ys, v, m: int, projection: str, n: int) -> np.ndarray:
    """``(n, L, d_v)`` normalised outputs ``D̂⁻¹ÂV`` (bidirectional), one per feature draw."""
    gram = _gram_draws(ctx, kind, xs, ys, m, projection, n)
    return (gram @ v) / gram.sum(axis=-1, keepdims=True)


def _unbiased_output_cell(ctx: CellContext) -> Evidence:
    kind, projection = ctx.params["kind"], ctx.params["projection"]
    if ctx.variant == "matrix":
        return _entrywise_unbiased(ctx, kind, projection)
    length, d, m = ctx.params["L"], ctx.params["d"], ctx.params["m"]
    xs, ys = _attention_rows(ctx, length, d)
    v = ctx.rng.standard_normal((length, d))
    exact = softmax_attention(xs * d**0.25, ys * d**0.25, v)
    out = _attention_outputs(ctx, kind, xs, ys, v, m, projection, ctx.replicates)
    entries = [(i, a) for i in range(length) for a in range(d)]
    if len(entries) > MAX_ENTRIES:
        entries = [entries[k] for k in ctx.rng.choice(len(entries), MAX_ENTRIES, replace=False)]
    sub = ctx.sub_test(len(entries))
    parts = [mean_test(out[:, i, a], exact[i, a], **sub) for i, a in entries]
    return combine(parts, extra=dict(entries=len(entries)))


UNBIASED_OUTPUT = Claim(
    id="performer.sec5.unbiased_output", paper="performer", source="Sec 5; Sec 2 opening; Abstract",
    statement="FAVOR+ gives an unbiased estimate of softmax attention.",
    kind="expectation",
    hypotheses="positive softmax estimators (SM⁺, hyp+), iid or R-ORF; I1 inputs (c in {0.5, 1}), "
               "L in {4, 8, 32}, d in {2, 4, 16}, m in {4, 16, 64, 256}; values N(0, 1), d_v = d; at most "
               f"{MAX_ENTRIES} random entries per cell; (a) entries inside the Monte Carlo domain as in "
               "abstract.unbiased_attention_matrix (c = 0.5 only: at c = 1 no entry is)",
    tolerance=0.02, units="(a) relative bias of Â entries; (b) bias of output entries in units of the values' sd",
    cell=_unbiased_output_cell,
    variants=("matrix", "output"),
    variant_notes={"matrix": "(a) the unnormalised matrix Â is unbiased entrywise",
                   "output": "(b) the normalised output D̂⁻¹ÂV is unbiased for D⁻¹AV"},
    grid={"smoke": dict(kind=["positive"], projection=["iid"], L=[4], d=[2], m=[4], inputs=["I1(c=0.5)"]),
          "quick": dict(kind=["positive"], projection=["iid", "orthogonal"], L=[4], d=[2], m=[4, 16],
                        inputs=["I1(c=0.5)", "I1(c=1)"]),
          "full": dict(kind=["positive", "hyperbolic"], projection=["iid", "orthogonal"], L=[4, 8, 32],
                       d=[2, 4, 16], m=[4, 16, 64, 256], inputs=["I1(c=0.5)", "I1(c=1)"])},
    replicates={"smoke": 8_000, "quick": 20_000, "full": 200_000},
    where=lambda p, v: v == "output" or p["inputs"] == "I1(c=0.5)",  # (a): c = 1 is outside the MC domain
    roles=("feature_map.positive", "feature_map.hyperbolic", "orthogonal_projection"), plot_x="m",
)


def _delta_method_cell(ctx: CellContext) -> Evidence:
    """Monte Carlo bias (along the predicted bias direction) and total MSE of ``D̂⁻¹ÂV`` against the delta method."""
    kind, length, d, m = ctx.params["kind"], ctx.params["L"], ctx.params["d"], ctx.params["m"]
    xs, ys = _attention_rows(ctx, length, d)
    v = ctx.rng.standard_normal((length, d))
    exact = softmax_attention(xs * d**0.25, ys * d**0.25, v)
    bias, mse = theory.output_delta_method(kind, xs, ys, v, m)
    direction = bias / np.linalg.norm(bias)
    along, total = [], []
    for n in chunks(ctx.replicates, max(1, 400_000 // (m * length))):
        err = _attention_outputs(ctx, kind, xs, ys, v, m, "iid", n) - exact
        along.append(np.einsum("nia,ia->n", err, direction))
        total.append(np.einsum("nia,nia->n", err, err))
    sub = ctx.sub_test(2)
    norm_bias, total_mse = float(np.linalg.norm(bias)), float(mse.sum())
    return combine([mean_test(np.concatenate(along), norm_bias, scale=norm_bias, **sub),
                    mean_test(np.concatenate(total), total_mse, scale=total_mse, **sub)],
                   extra=dict(m_times_bias_norm=m * norm_bias, m_times_total_mse=m * total_mse))


OUTPUT_DELTA_METHOD = Claim(
    id="performer.derived.output_delta_method", paper="performer", source="register: derived predictions",
    statement="For unbiased Â, the normalised output o_i = N_i/D_i has bias (1/D_i²) Σ_jk Σ_i[j,k](o_i - v_j) and "
              "per-coordinate MSE (1/D_i²) Σ_jk Σ_i[j,k](v_j - o_i)(v_k - o_i) up to higher order, with "
              "Σ_i[j,k] = (1/m)[Λ_ij Λ_ik exp(‖2x_i + y_j + y_k‖²/2) - SM_ij SM_ik] for iid positive features "
              "(so m·bias has a finite limit).",
    kind="moment",
    hypotheses="iid positive features; L <= 8, d <= 4, rows of small scaled norm (I3, ρ = 0.5); "
               "m in {32, 128, 512}; the bias is tested along its predicted direction, the MSE summed over "
               "entries; the neglected terms are O(1/m²)",
    tolerance=0.2, units="relative error of the leading-order prediction",
    cell=_delta_method_cell,
    grid={"smoke": dict(kind=["positive"], L=[4], d=[2], m=[32], inputs=["I3(rho=0.5)"]),
          "quick": dict(kind=["positive"], L=[4], d=[2, 4], m=[32], inputs=["I3(rho=0.5)"]),
          "full": dict(kind=["positive"], L=[4, 8], d=[2, 4], m=[32, 128, 512], inputs=["I3(rho=0.5)"])},
    replicates={"smoke": 40_000, "quick": 100_000, "full": 1_000_000},
    roles=("feature_map.positive",), plot_x="m",
)

# ================================================================================ Fig 4

#: Sizes per tier: input samples × feature draws per input (>= 64 replicates for batch means). L = 4096 (the
#: paper's) costs ~0.3 s per replicate pair; 1024 replicates per cell make it the reproduction's job
#: (``rfkit reproduce performer.fig4 --option L=4096``), the claim uses L <= 1024.
#: Fig 4 sequence length per tier.
FIG4_SIZES = {"smoke": dict(L=64), "quick": dict(L=64), "full": dict(L=1024)}


def _fig4_pairs(ctx: CellContext, worse: dict, better: dict, coupled: bool, rng: np.random.Generator,
                n: int) -> tuple[np.ndarray, np.ndarray]:
    """Output MSEs of the two estimators for ``n`` iid replicates: each draws its own inputs (Q, K, V) and
    one feature draw from ``rng``, so the replicates of a sequential cell are independent.

    ``worse``/``better``: keyword sets for :func:`fig4_output_mse` (feature, projection, m); the claim says
    ``better`` has the lower output MSE. ``coupled``: the iid and R-ORF projections of a replicate come from
    one Gaussian matrix (:func:`coupled_projections`: each has its exact law, the pair is strongly
    correlated); otherwise both estimators share the iid rows they have in common (common random numbers).
    """
    length = FIG4_SIZES[ctx.tier]["L"]
    d, c = ctx.params["d"], ctx.params["c"]
    pairs = np.empty((n, 2))
    for i in range(n):
        q, k, v = fig4_inputs(length, d, c, rng)
        exact = softmax_attention(q, k, v)
        omegas = _fig4_omegas(ctx, worse, better, coupled, d, rng)
        pairs[i] = [fig4_output_mse(q, k, v, rng=rng, exact=exact, omega=omega,
                                    feature_map=_feature_map(ctx, est["feature"]), **est)
                    for est, omega in zip((worse, better), omegas, strict=True)]
    return pairs[:, 0], pairs[:, 1]


def _fig4_omegas(ctx: CellContext, worse: dict, better: dict, coupled: bool, d: int, rng: np.random.Generator):
    if coupled:
        iid, ort = coupled_projections(worse["m"], d, rng)
        return (iid, ort) if worse["projection"] == "iid" else (ort, iid)
    rows = max(worse["m"], better["m"])
    shared = _projections(ctx, worse["projection"], 1, rows, d, rng)
    return shared[: worse["m"]], shared[: better["m"]]


def _fig4_test(ctx: CellContext, statistic: str, worse: dict, better: dict, coupled: bool) -> Evidence:
    """Paired test on ``ctx.replicates`` iid replicates (inputs and features drawn per replicate).
    ``mean``: E[MSE_worse - MSE_better] >= 0 relative to E MSE_worse; ``log``: E log(MSE_worse/MSE_better) >= 0.
    Asymptotic: output MSEs have no variance bound in theory. With trigonometric features the output MSE has
    an infinite mean (:func:`rfkit.theory.softmax.renormalised_output_mean_exists`: the renormaliser has a
    positive density at 0), so a mean reading comparing two trig estimators has no estimand: it is flagged
    from theory without sampling. A fixed sample, not a sequential cell: at the quick tier's sizes no budget
    the tier can afford decides the trig log cells (see :data:`_FIG4_NOTES`), so the claim's reserve is not
    spent on them."""
    if statistic == "mean" and not any(theory.renormalised_output_mean_exists(e["feature"]) for e in (worse, better)):
        reason = ("infinite mean: E MSE = ∞ for both estimators (trig renormalisers D̂_i have a positive density "
                  "at 0, so each output N̂/D̂ has tails P(|ô| > t) ~ c/t; rfkit.theory.softmax."
                  "renormalised_output_mean_exists), so E[MSE_a - MSE_b] does not exist and no budget decides the "
                  "mean reading for trig features; the log reading has finite moments")
        return Evidence(math.nan, 0.0, math.nan, math.nan, 1.0, math.inf, math.nan, math.inf, 0,
                        "theory: infinite mean", (reason,), extra=dict(statistic=statistic), validity="exact",
                        assumption="rfkit.theory.softmax.renormalised_output_mean_exists")
    a, b = _fig4_pairs(ctx, worse, better, coupled, ctx.rng, ctx.replicates)
    extra = dict(mean_mse_worse=float(a.mean()), mean_mse_better=float(b.mean()),
                 median_log_ratio=float(np.median(np.log(a / b))))
    if statistic == "log":
        ev = mean_test(np.log(a / b), 0.0, alternative="greater", **ctx.test, extra=extra)
    else:
        ev = mean_test(a - b, 0.0, alternative="greater", scale=float(a.mean()), **ctx.test, extra=extra)
    if any(f.startswith("heavy tails") for f in ev.flags):
        if worse["feature"] != "trig":
            hint = "; deciding it needs more iid pairs (a larger tier)"
        elif statistic == "log":
            hint = ("; log MSE_trig has exponential tails (finite variance, no closed form for it): deciding it "
                    "needs more iid pairs (a larger tier)")
        else:
            hint = ("; E MSE_trig = ∞ (rfkit.theory.softmax.renormalised_output_mean_exists), so the sample mean "
                    "does not settle at any budget")
        ev = replace(ev, flags=tuple(f + hint if f.startswith("heavy tails") else f for f in ev.flags))
    return ev


def _fig4_orf_cell(ctx: CellContext) -> Evidence:
    feature, m = ctx.params["feature"], ctx.params["m"]
    return _fig4_test(ctx, ctx.variant, dict(feature=feature, projection="iid", m=m),
                      dict(feature=feature, projection="orthogonal", m=m), coupled=True)


def _fig4_pos_trig_cell(ctx: CellContext) -> Evidence:
    projection, m = ctx.params["projection"], ctx.params["m"]
    budget, statistic = ctx.variant.split("/")
    m_pos = 2 * m if budget == "same_features" else m
    return _fig4_test(ctx, statistic, dict(feature="trig", projection=projection, m=m),
                      dict(feature="positive", projection=projection, m=m_pos), coupled=False)


_FIG4_STATISTICS = {
    "mean": "lower mean output MSE (the figure's mean ± sd): E[MSE_a - MSE_b] >= 0, relative to E MSE_a",
    "log": "lower error on the figure's log scale (geometric mean): E log(MSE_a/MSE_b) >= 0",
}

_FIG4_HYPOTHESES = ("the Fig 4 setting (R2): Q, K, V with iid N(0, c²) entries (V: N(0, 1)), bidirectional "
                    "renormalised attention with A = exp(QKᵀ/√d), stabiliser 0, one feature draw per replicate, "
                    "R-ORF with chi norms (B.2 blocks for m > d); paired test on iid replicates, each with its own "
                    "inputs and one feature draw (64 pairs a cell at smoke, 512 at quick, 2048 at full). Sizes: "
                    "L = 1024 (full), 64 (quick, smoke); d = 16 (the paper's), "
                    "8 and 64 at full; c in {0.25, 0.5, 1, 2}")

#: Paired iid replicates of a Fig 4 cell (the same number of output MSEs as before: smoke 8×8, quick 32×16,
#: full 32×64 input samples × feature draws, now each pair with its own inputs).
FIG4_REPLICATES = {"smoke": 64, "quick": 512, "full": 2048}
#: What decides the Fig 4 claims (stated in their notes): the log readings need a confidence radius <= 0.05,
#: about (5 sd/0.05)² iid pairs with sd the spread of log(MSE_a/MSE_b): ~1.5e3 pairs for positive features
#: (sd ~0.4), 1e4-1e5 for trig (sd 0.8 at c = 0.5, ~3 at c = 1) at L = 64; at c = 1 the trig log ratio of
#: orf_vs_iid is -0.03 ± 0.07 (2000 pairs, seed 1), so even 1e6 pairs may leave it undecided. Mean readings:
#: the output MSE of trig features has an infinite mean (rfkit.theory.softmax.renormalised_output_mean_exists),
#: so orf_vs_iid's trig mean cells have no estimand and pos_vs_trig's sample means never settle.
_FIG4_NOTES = ("Decided by: log readings: ~(5·sd/0.05)² iid pairs per cell (sd of log(MSE_a/MSE_b): ~0.4 for "
               "positive features, 0.8 (c = 0.5) to 3 (c = 1) for trig features at L = 64), i.e. 1e3-1e5 pairs "
               "against 512 at quick; for trig features at c = 1 the ORF/iid log ratio is -0.03 ± 0.07 (2000 pairs), "
               "so the cell may stay undecided at any feasible budget. Mean readings with trig features: no budget "
               "decides them, since the output MSE of trig features has an infinite mean (its renormaliser has a "
               "positive density at 0: rfkit.theory.softmax.renormalised_output_mean_exists); with two trig "
               "estimators the mean difference does not exist.")

FIG4_ORF_VS_IID = Claim(
    id="performer.fig4.orf_vs_iid", paper="performer", source="Sec 4.2; Fig 4",
    statement="In the Fig 4 setting, orthogonal features give a lower output-approximation MSE than unstructured "
              "(iid) features.",
    kind="reproduction", hypotheses=_FIG4_HYPOTHESES,
    tolerance=0.05, units="(MSE_iid - MSE_ort)/MSE_iid (mean) or log(MSE_iid/MSE_ort) (log); violation: ORF "
                          "worse by more than this",
    cell=_fig4_orf_cell,
    variants=tuple(_FIG4_STATISTICS), variant_notes=_FIG4_STATISTICS,
    grid={"smoke": dict(feature=["positive"], m=[16], d=[16], c=[1.0]),
          "quick": dict(feature=["trig", "positive"], m=[16], d=[16], c=[0.5, 1.0]),
          "full": dict(feature=["trig", "positive"], m=[4, 8, 16, 32, 64, 128, 256, 512], d=[8, 16, 64],
                       c=[0.25, 0.5, 1.0, 2.0])},
    replicates=FIG4_REPLICATES, notes=_FIG4_NOTES,
    roles=("feature_map.trig", "feature_map.positive", "orthogonal_projection"), plot_x="m",
)

FIG4_POS_VS_TRIG = Claim(
    id="performer.fig4.pos_vs_trig", paper="performer", source="Sec 4.2; Fig 4",
    statement="In the Fig 4 setting, positive features give a lower error than trigonometric sin/cos features.",
    kind="reproduction", hypotheses=_FIG4_HYPOTHESES,
    tolerance=0.05, units="(MSE_trig - MSE_pos)/MSE_trig (mean) or log(MSE_trig/MSE_pos) (log); violation: "
                          "positive worse by more than this",
    cell=_fig4_pos_trig_cell,
    variants=tuple(f"{b}/{s}" for b in ("same_m", "same_features") for s in _FIG4_STATISTICS),
    variant_notes={f"{b}/{s}": f"{note}; {_FIG4_STATISTICS[s]}" for b, note in (
        ("same_m", "both use m projections (trig has 2m features, positive m)"),
        ("same_features", "same feature dimension: positive with 2m projections")) for s in _FIG4_STATISTICS},
    grid={"smoke": dict(projection=["iid"], m=[16], d=[16], c=[1.0]),
          "quick": dict(projection=["iid"], m=[16], d=[16], c=[0.5, 1.0]),
          "full": dict(projection=["iid", "orthogonal"], m=[4, 8, 16, 32, 64, 128, 256, 512], d=[8, 16, 64],
                       c=[0.25, 0.5, 1.0, 2.0])},
    replicates=FIG4_REPLICATES, notes=_FIG4_NOTES,
    roles=("feature_map.trig", "feature_map.positive", "orthogonal_projection"), plot_x="m",
)
