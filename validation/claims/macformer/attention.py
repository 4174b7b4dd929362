"""Definition 2, the RMFA display (mask conversion, factorisation) and Theorems 1-2."""

import math

import numpy as np

from rfkit.estimators import softmax_attention
from rfkit.estimators.maclaurin_kernels import MASK_FILLS, kernelized_attention
from rfkit.estimators.rmf import RMFDraw, draw_rmf, rmf_features, rmfa, rmfa_replicates
from rfkit.validation.domain import Choice, Integers, Range, Reading
from rfkit.validation.harness import chunks, quiet
from rfkit.validation.model import CellContext, Claim, tiers
from rfkit.validation.search import minimize_margin
from rfkit.validation.stats import Evidence, binomial_test, combine, mean_test

from .common import (
    KERNEL_NAMES,
    MASK_KINDS,
    _ball_matrix,
    _ball_matrix_like,
    _capped,
    _exact,
    _mask,
    _mask_options,
    _p_range,
    _presbn_qk,
    _rel_error,
)

FILLS = dict(zip(MASK_FILLS, map(Reading, ("S + M with M ∈ {0, -inf}", "masked fill with -inf", "masked fill with "
                                             "-1e9", "masked fill with the dtype minimum")), strict=True))


def _filled(ctx: CellContext, q, k, v, kernel: str, keep) -> tuple[np.ndarray, np.ndarray]:
    """``attn_K`` with Definition 1's literal masked fill (the variant) and in the M' form (masked weights 0)."""
    attention = ctx.impl("kernelized_attention", kernelized_attention)
    return (quiet(attention, q, k, v, kernel, mask=keep, mask_fill=ctx.variant, on_nonfinite="propagate"),
            attention(q, k, v, kernel, mask=keep))


def _def2_cell(ctx: CellContext) -> Evidence:
    n, d = ctx.params["length"], ctx.params["d"]
    scale = math.sqrt(ctx.params["score"]) * d**0.25  # uniformly random unit rows times scale: |q·k|/√d <= score
    q, k = (_ball_matrix(ctx.rng, n, d, "row", "boundary") * scale for _ in range(2))
    v, keep = ctx.rng.standard_normal((n, 4)), _mask(ctx.params["mask"], n, ctx.rng)
    reference, top = softmax_attention(q, k, v, mask=keep), float(np.abs(v).max())
    errors = [_rel_error(out, reference, top).ravel() for out in _filled(ctx, q, k, v, "exp", keep)]
    return _exact(np.concatenate(errors), ctx, dict(max_score=float(np.abs(q @ k.T).max() / math.sqrt(d))))


DEF2_EXP_SOFTMAX = Claim(
    id="macformer.def2.exp_equals_softmax", source="Definitions 1-2; the RMFA display",
    statement="With f = exp, kernelized attention equals softmax attention: attn_K(Q,K,V) = Softmax(QKᵀ/√d ⊙ M)V, "
              "with or without a mask.",
    kind="identity", tolerance=1e-12, units="max |difference| / max |V| (non-finite counts as 1)",
    domain=dict(
        length=Integers("attn_K(Q,K,V) for any n rows", 1, points=(1, 2), up_to=300,
                        why="both sides are per-row weighted means over the keys: more rows repeat the same "
                            "computation (1000 and 4000 at the full tier)"),
        d=Integers("Q, K ∈ R^{n×d}", 1, points=(1,), up_to=64,
                   why="d enters only through the scores QKᵀ/√d, whose size the score axis sweeps"),
        mask=Choice("with or without a mask (every row keeps a key)", MASK_KINDS),
        score=Range("scores QKᵀ/√d of any size, up to |x| = 50 (the stabilisation)", 0.0, up_to=(None, 50.0),
                    why="the register's stabilisation test: e^50 ≈ 5e21, far from float64's overflow at 709 only "
                        "once stabilised")),
    readings=FILLS, cell=_def2_cell,
    grid=tiers(dict(length=[1, 2, 300], d=[1, 64], mask=list(MASK_KINDS), score=[0.0, 1.0, 50.0]),
               smoke=dict(score=[0.0, 50.0]), full=dict(length=[1, 2, 16, 1000, 4000], d=[1, 16, 64])),
    where=lambda p, v: (p["length"] > 1 or p["mask"] == "none") and (p["score"] > 0 or p["d"] == 1),
    roles=("kernelized_attention",), plot_x="length",
    notes="The M' form and Definition 1's literal masked fill, against rfkit.estimators.softmax_attention "
          "(log-sum-exp, -inf masking). A length-1 mask keeps its only key; zero scores are the same at every d.",
)


def _mask_conversion_cell(ctx: CellContext) -> Evidence:
    n, kernel, d = ctx.params["length"], ctx.params["kernel"], 8
    if ctx.params["inputs"] == "presbn":
        q, k = _presbn_qk(ctx.rng, n, d, eps=1e-12)
    else:
        q, k = (_ball_matrix(ctx.rng, n, d, "row", "interior") for _ in range(2))
    v, keep = ctx.rng.standard_normal((n, 3)), _mask(ctx.params["mask"], n, ctx.rng)
    filled, kept = _filled(ctx, q, k, v, kernel, keep)
    return _exact(_rel_error(filled, kept, float(np.abs(v).max())), ctx,
                  dict(nonfinite=int((~np.isfinite(filled)).sum())))


MASK_CONVERSION = Claim(
    id="macformer.eq_rmfa.mask_conversion", source="the RMFA display, first to second line",
    statement="For every query a, with S = QKᵀ/√d: Σ_i f(S_ai ⊙ M_ai) V_i / Σ_j f(S_aj ⊙ M_aj) = "
              "Σ_i f(S_ai) M'_ai V_i / Σ_j f(S_aj) M'_aj, where ⊙ M is the masked fill and M' = 1[M >= 0].",
    kind="identity", tolerance=1e-12, units="max |difference| / max |V| (non-finite counts as 1)",
    domain=dict(
        kernel=Choice("the kernels of Table 1 (closed forms as printed)", KERNEL_NAMES),
        mask=Choice("any mask M", ("padding", "causal", "general")),
        length=Integers("for every query a of n", 1, points=(1, 2), up_to=16,
                        why="each output row is one query's ratio over its own keys; 256 at the full tier")),
    readings=FILLS, cell=_mask_conversion_cell,
    grid=tiers(dict(kernel=list(KERNEL_NAMES), mask=["padding", "causal", "general"], inputs=["presbn", "unit_ball"],
                    length=[1, 2, 16]),
               smoke=dict(mask=["causal"], inputs=["presbn"], length=[16]), full=dict(length=[1, 2, 16, 256])),
    where=lambda p, v: p["length"] > 1 or p["inputs"] != "presbn",  # pre-SBN of one row is 0/0 (alg1)
    roles=("kernelized_attention",), plot_x="kernel",
    notes="Inputs: pre-SBN outputs and unit-ball rows (d = 8); nan/inf outputs are counted in extra.",
)


def _grouped_features(x: np.ndarray, draws: list[RMFDraw], sharing: str, kernel: str) -> np.ndarray:
    """Φ of ``(B, H, n, d)`` inputs with one draw per group, from Definition 3 (not rmfa's grouping)."""
    (b, h), (sb, sh) = x.shape[:2], {"shared": (0, 0), "per_head": (0, 1), "per_batch_head": (x.shape[1], 1)}[sharing]
    return np.array([[rmf_features(x[i, j], draws[i * sb + j * sh], kernel) for j in range(h)] for i in range(b)])


def _factorization_cell(ctx: CellContext) -> Evidence:
    n, d, sharing, kernel, route = (ctx.params[a] for a in ("length", "d", "sharing", "kernel", "mask"))
    b, groups = {"shared": (1, 1), "per_head": (2, 2), "per_batch_head": (2, 4)}[sharing]
    q, k = (_ball_matrix(ctx.rng, n, d, "row", "interior")[None, None] * np.ones((b, 2, 1, 1)) for _ in range(2))
    v = ctx.rng.standard_normal((b, 2, n, 3))
    draws = [draw_rmf(ctx.params["D"], d, rng=ctx.rng, p=ctx.params["p"]) for _ in range(groups)]
    keep = np.ones((n, n), dtype=bool) if route == "none" else _mask(route, n, ctx.rng)
    result = quiet(ctx.impl("rmfa", rmfa), q, k, v, kernel=kernel, draw=draws if groups > 1 else draws[0],
                   draw_sharing=sharing, return_details=True, **_mask_options(route, keep))
    phi_q, phi_k = (_grouped_features(x * d**-0.25, draws, sharing, kernel) for x in (q, k))
    scores = (phi_q @ np.swapaxes(phi_k, -1, -2)) * keep
    ones = np.concatenate([v, np.ones(v.shape[:-1] + (1,))], axis=-1)
    got = np.concatenate([result.numerator, result.denominator[..., None]], axis=-1)
    magnitude = np.maximum(np.abs(scores) @ np.abs(ones), np.finfo(float).tiny)
    return _exact(_rel_error(got, scores @ ones, magnitude), ctx,
                  dict(width=result.width, nonpositive=result.n_nonpositive))


_FACTORIZATION_BASE = dict(mask="none", length=17, D=8, d=4, p=2.0, kernel="exp", sharing="shared")


def _factorization_where(p: dict, variant: str) -> bool:
    """Design ``star`` varies the axes one at a time from the base, ``cross`` also crosses mask × length × D,
    ``product`` runs every combination; one key has nothing to pad, and 256 keys need D > 1."""
    free = {"star": (), "cross": ("mask", "length", "D"), "product": tuple(_FACTORIZATION_BASE)}[p["design"]]
    off = sum(p[k] != b for k, b in _FACTORIZATION_BASE.items() if k not in free)
    short = p["length"] == 1 and p["mask"] in ("padding", "general")
    return off <= 1 and not short and not (p["length"] >= 256 and p["D"] == 1)


FACTORIZATION = Claim(
    id="macformer.eq_rmfa.factorization", source="the RMFA display; Figure 2b",
    statement="With one RMF draw, Σ_i [Φ(q̃_a)·Φ(k̃_i) M'_ai] V_i / Σ_j [Φ(q̃_a)·Φ(k̃_j) M'_aj] = "
              "Φ(q̃_a)ᵀ Σ_i [M'_ai Φ(k̃_i) ⊗ V_i] / Φ(q̃_a)ᵀ Σ_j M'_aj Φ(k̃_j): the factored forms (no mask, key "
              "padding, causal prefix sums) compute exactly the quadratic form.",
    kind="identity", tolerance=1e-10, units="max |difference| / Σ|terms| of numerators and denominators (float64)",
    domain=dict(
        mask=Choice("the factored forms: no mask, key padding, causal prefix sums (and a general M')", MASK_KINDS),
        length=Integers("n keys", 1, points=(1,), up_to=256, why="the causal prefix sums run in chunks of 128 rows: "
                        "256 carries a chunk's sums into the next (2048 at the full tier)"),
        D=Integers("one RMF draw of D features", 1, points=(1,), up_to=128,
                   why="the features enter as one (n, W) matrix; 1024 at the full tier"),
        d=Integers("q̃, k̃ ∈ R^d", 1, points=(1,), up_to=64,
                   why="d enters only through the projections ⟨ω, x⟩ (one matrix product)"),
        p=_p_range("the draw's p > 1", "p changes only the degrees drawn; the register's largest p"),
        kernel=Choice("the kernels of Table 1", KERNEL_NAMES),
        sharing=Choice("est.rmfa's draw_sharing", ("shared", "per_head", "per_batch_head"))),
    cell=_factorization_cell,
    grid=tiers(dict(design=["cross"], mask=list(MASK_KINDS), length=[17, 1, 256], D=[8, 1, 128], d=[4, 1, 64],
                    p=[2.0, 1.04, 4.0], kernel=list(KERNEL_NAMES), sharing=["shared", "per_head", "per_batch_head"]),
               smoke=dict(design=["star"]),
               full=dict(design=["product"], length=[1, 2, 17, 256, 2048], D=[1, 8, 128, 1024], d=[1, 4, 64],
                         p=[1.04, 1.5, 2.0, 4.0])),
    where=_factorization_where, roles=("rmfa",), plot_x="length",
    notes="Numerators and denominators are compared separately (a ratio amplifies round-off where the denominator "
          "is small); inputs (B, 2, n, d) exercise draw sharing.",
)


BALLS = {b: Reading(f"ℓ2(0,1) read with the {b} norm") for b in ("row", "fro", "spec")}

#: Inputs (n, d, inputs, mask) of the ``listed`` design. ``line``: d = 1 with positive q, k (RMF products are then
#: non-negative, RMFA a convex combination of V); ``cancel``: ±-paired keys whose single-feature denominators nearly
#: cancel. The first five are crossed with the core settings; the last four cover the domain's ends.
CASES = ((2, 1, "line", "none"), (4, 1, "line", "causal"), (4, 4, "interior", "none"), (2, 2, "cancel", "none"),
         (8, 4, "boundary", "padding"),
         (1, 1, "line", "none"), (16, 4, "interior", "none"), (4, 64, "interior", "none"), (4, 4, "presbn", "general"))


def _thm_domain(D_up_to: int) -> dict:
    return dict(
        n=Integers("every V ∈ R^{n×d_v} (n keys)", 1, points=(1, 2), up_to=16,
                   why="RMFA's numerator and denominator are sums over the keys; 256 keys at the full tier"),
        d=Integers("Q, K ∈ R^{n×d}", 1, points=(1,), up_to=64, why="the register's largest d"),
        inputs=Choice("Q, K ∈ ℓ2(0,1): inside, on the boundary, structured (a line, cancelling keys) and pre-SBN "
                      "outputs", ("line", "interior", "boundary", "cancel", "presbn")),
        mask=Choice("masks through M'", MASK_KINDS),
        kernel=Choice("Φ an RMF map for a dot-product kernel K of Table 1", KERNEL_NAMES),
        D=Integers("D >= 1 features", 1, points=(1,), up_to=D_up_to,
                   why="D = 1 is the most variable estimate; larger D at the full tier (up to 1024)"),
        p=_p_range("any p > 1", "the register's largest p (p = 2 in every experiment of the paper)"))


def _thm_where(rule, core_kernels=("exp", "inv"), core=5):
    """``where`` of a Theorem 1-2 grid with the claim's ``rule``: a line has d = 1, p ≠ 2 runs with exp at D = 1.
    Design ``listed`` crosses the first ``core`` CASES with the core kernels at p = 2, and runs D = 1 on the other
    cases with exp at p = 2 and on the first case with every setting; design ``product`` runs every combination."""
    def where(p: dict, variant: str) -> bool:
        if not (rule(p) and (p["inputs"] != "line" or p["d"] == 1)
                and (p["p"] == 2.0 or (p["kernel"], p["D"]) == ("exp", 1))):
            return False
        if p["design"] == "product":
            return True
        case, base = (p["n"], p["d"], p["inputs"], p["mask"]), p["kernel"] == "exp" and p["p"] == 2.0
        crossed = case in CASES[:core] and p["kernel"] in core_kernels and p["p"] == 2.0
        return case in CASES and (crossed or p["D"] == 1 and (case == CASES[0] or base))
    return where


def _thm_grid(quick: dict, smoke: dict, full: dict) -> dict:
    return tiers(dict(design=["listed"], n=[1, 2, 4, 8, 16], d=[1, 2, 4, 64], inputs=["line", "interior", "boundary",
                      "cancel", "presbn"], mask=list(MASK_KINDS), p=[2.0, 1.04, 4.0], **quick),
                 smoke=dict(n=[2, 4], d=[1, 4], inputs=["line", "interior"], mask=["none"], p=[2.0], **smoke),
                 full=dict(design=["product"], n=[1, 2, 4, 16, 256], d=[1, 2, 4, 16, 64], p=[1.04, 1.5, 2.0, 4.0],
                           **full))


def _thm_samples(ctx: CellContext, ball: str, replicates: int, rows: int | None = None):
    """``V`` (entries in [-1, 1]), ``attn_K`` and RMFA replicates of the first ``rows`` queries, ``Q, K`` in a ball."""
    n, d, geometry, rng = ctx.params["n"], ctx.params["d"], ctx.params["inputs"], ctx.rng
    if geometry == "line":
        q, k = (_ball_matrix_like(_ball_matrix(rng, n, 1, ball, "interior", positive=True) + 0.05, ball)
                for _ in range(2))
    elif geometry == "cancel":  # keys paired k, -0.9k along coordinates: their Rademacher projections cancel often
        q, keys = _ball_matrix(rng, n, d, ball, "boundary"), np.zeros((n, d))
        keys[np.arange(n), np.arange(n) % d] = np.where(np.arange(n) % 2 == 0, 1.0, -0.9)
        k = _ball_matrix_like(keys + 0.01 * rng.standard_normal((n, d)), ball)
    elif geometry == "presbn":
        q, k = _presbn_qk(rng, n, d, norm_reading=ball)
    else:
        q, k = (_ball_matrix(rng, n, d, ball, geometry) for _ in range(2))
    v = rng.uniform(-1.0, 1.0, size=(n, 2))
    if geometry == "cancel":  # signs alternating with the keys' pairs
        v[:, 0] = np.where(np.arange(n) % 2 == 0, 1.0, -1.0)
    v[0, 0] = 1.0
    keep, kernel = _mask(ctx.params["mask"], n, rng), ctx.params["kernel"]
    target = kernelized_attention(q, k, v, kernel, mask=keep)[:rows]
    keep = None if keep is None else keep[:rows]
    return v, target, _rmfa_samples(ctx, q[:rows], k, v, keep, kernel, ctx.params["D"], replicates, ctx.params["p"])


def _feature_budget(ctx: CellContext, num_features: int) -> int:  # an estimate's variance falls like 1/D
    return max(2_000, ctx.replicates // num_features)


def _rmfa_samples(ctx: CellContext, q, k, v, keep, kernel: str, num_features: int, replicates: int,
                  p: float = 2.0) -> np.ndarray:
    """``(replicates, n_q, d_v)`` RMFA outputs with fresh draws (the ``rmfa_replicates`` role), in chunks."""
    estimator, mask = ctx.impl("rmfa_replicates", rmfa_replicates), {} if keep is None else dict(mask=keep)
    size = max(1, 2_000_000 // (num_features * k.shape[0] * 2))
    return np.concatenate([np.asarray(quiet(estimator, q, k, v, kernel, replicates=r, num_features=num_features,
                                             rng=ctx.rng, p=p, **mask).out) for r in chunks(replicates, size)])


def _thm1_cell(ctx: CellContext) -> Evidence:
    v, target, samples = _thm_samples(ctx, ctx.variant, _feature_budget(ctx, ctx.params["D"]), rows=3)
    entries = list(np.ndindex(target.shape))
    parts = [mean_test(samples[:, a, c], target[a, c], scale=float(np.abs(v).max()), **ctx.sub_test(len(entries)),
                       extra=dict(entry=(a, c))) for a, c in entries]
    return combine(parts, extra=dict(nonfinite_fraction=float((~np.isfinite(samples)).mean()), target=target.tolist()))


def _line_expectation(q: float, keys: np.ndarray, values: np.ndarray, p: float) -> tuple[float, float]:
    """Exact ``(E[RMFA], attn_exp)`` for one query, d = D = 1, positive q, k: only N ~ geom enters (signs and weights
    cancel), ``RMFA = Σ_i k_i^N V_i / Σ_j k_j^N``, with ``k_i / max_j k_j`` powered (no 0/0 on underflow)."""
    n = np.arange(400)
    log_pi = math.log1p(-1.0 / p) - n * math.log(p)
    powers, weights = (keys / keys.max())[None, :] ** n[:, None], np.exp(q * keys)
    return float(np.exp(log_pi) @ (powers @ values / powers.sum(axis=1))), float(weights @ values / weights.sum())


def _thm1_search(ctx: CellContext) -> Evidence:
    res = minimize_margin(lambda z: -abs(np.subtract(*_line_expectation(z[0], z[1:3], z[3:5], 2.0))),
                          [(0.05, 1.0)] * 3 + [(-1.0, 1.0)] * 2, rng=ctx.rng, restart=ctx.restart or 0)
    q, keys = _ball_matrix_like(res.x[:1, None], ctx.variant), _ball_matrix_like(res.x[1:3, None], ctx.variant)
    values = res.x[3:5, None]
    samples = _rmfa_samples(ctx, q, keys, values, None, "exp", 1, _feature_budget(ctx, 1))
    exact = _line_expectation(float(q[0, 0]), keys[:, 0], values[:, 0], 2.0)[0]
    extra = dict(q=q.ravel().tolist(), k=keys.ravel().tolist(), v=values.ravel().tolist(), exact_expectation=exact)
    return mean_test(samples[:, 0, 0], kernelized_attention(q, keys, values, "exp")[0, 0],
                     scale=float(np.abs(values).max()), **ctx.test, extra=extra)


THM1_UNBIASED = Claim(
    id="macformer.thm1.rmfa_unbiased", source="Theorem 1 and its proof; abstract",
    statement="If Q, K ∈ ℓ2(0,1) and Φ is an RMF map for a dot-product kernel K, then for every V, "
              "E[RMFA_K(Q,K,V)] = attn_K(Q,K,V) (masks through M').",
    kind="expectation", tolerance=0.02, units="|bias| / max |V| per output entry",
    domain=_thm_domain(D_up_to=64), readings=BALLS, cell=_thm1_cell, search=_thm1_search,
    grid=_thm_grid(quick=dict(kernel=list(KERNEL_NAMES), D=[1, 4, 64]), smoke=dict(kernel=["exp"], D=[1, 64]),
                   full=dict(D=[1, 2, 4, 16, 64, 256, 1024])),
    where=_thm_where(lambda p: p["kernel"] == "exp" or p["D"] == 1),
    replicates=tiers(40_000, smoke=8_000, full=1_000_000), restarts=tiers(2, smoke=1, full=10),
    roles=("rmfa_replicates",), plot_x="D",
    notes="Per cell: the first three queries' outputs, each a mean test against attn_K (Bonferroni). The search "
          "maximises the exact bias of the d = 1 line geometry (E over N in closed form) and re-tests the optimum.",
)


def _hoeffding_bound(num_features: int, eps_over_l: float) -> float:
    return 2.0 * num_features * math.exp(-num_features * eps_over_l**2 / 2.0)


def _tail_cell(ctx: CellContext) -> Evidence:
    (ball, norm), ratio = ctx.variant.split("|"), ctx.params["eps_over_L"]
    bound = _hoeffding_bound(ctx.params["D"], ratio)
    if bound >= 1:  # a probability is at most 1: the statement holds for every estimator
        return _exact([0.0], ctx, dict(bound=bound, vacuous=True))
    v, target, samples = _thm_samples(ctx, ball, ctx.replicates)
    with np.errstate(invalid="ignore"):
        exceed = ~(np.abs(samples - target) <= ratio * float(np.abs(v).max()))  # non-finite outputs exceed
    if norm == "max":
        return binomial_test(int(exceed.any(axis=(1, 2)).sum()), len(samples), bound, **ctx.test)
    counts = exceed.reshape(len(samples), -1).sum(axis=0)
    return combine([binomial_test(int(c), len(samples), bound, **ctx.sub_test(counts.size)) for c in counts],
                   extra=dict(counts=counts.tolist(), bound=bound))


TAIL_BOUND = Claim(
    id="macformer.thm2.tail_bound", source="Theorem 2 and its proof",
    statement="If Q, K ∈ ℓ2(0,1) and |V_ij| <= L, then for any ε > 0, "
              "P(|RMFA_K(Q,K,V) - attn_K(Q,K,V)| > ε) <= 2D exp(-Dε²/(2L²)).",
    kind="tail-bound", tolerance=0.01, units="exceedance probability above the bound",
    domain=dict(_thm_domain(D_up_to=16),
                eps_over_L=Range("any ε > 0 (as ε/L, L = max |V_ij|: the strongest test)", 0.0, strict=(True, False),
                                 up_to=(None, 3.0), why="the register's largest ε/L; the bound is >= 1 (vacuous) for "
                                 "ε/L <= sqrt(2 ln(2D)/D) and below 1e-3 (beyond the replicates) soon after")),
    readings={f"{b}|{norm}": Reading(f"ball read with the {b} norm; |·| "
                                     + ("per output entry" if norm == "entry" else "as the largest entry"))
              for b in BALLS for norm in ("entry", "max")},
    cell=_tail_cell,
    grid=_thm_grid(quick=dict(kernel=list(KERNEL_NAMES), D=[1, 4, 16], eps_over_L=[0.05, 1.0, 1.5, 3.0]),
                   smoke=dict(kernel=["exp"], D=[1, 4], eps_over_L=[1.5, 3.0]),
                   full=dict(D=[1, 2, 4, 8, 16, 64, 512], eps_over_L=[0.05, 0.1, 0.25, 0.5, 1.0, 1.5, 2.0, 3.0])),
    where=_thm_where(lambda p: 1e-3 <= _hoeffding_bound(p["D"], p["eps_over_L"]) <= 0.5
                     or p["eps_over_L"] <= 0.05 and p["D"] == 1, core_kernels=("exp",), core=4),
    replicates=tiers(8_000, smoke=3_000, full=200_000), roles=("rmfa_replicates",), plot_x="D",
    notes="Exact binomial tests of the exceedance frequency (non-finite outputs exceed); grid points run where the "
          "bound lies in [1e-3, 0.5], and at the open end ε/L = 0.05 (a vacuous bound, recorded as such).",
)


def _range_cell(ctx: CellContext) -> Evidence:
    v, _, samples = _thm_samples(ctx, ctx.variant, ctx.replicates)
    with np.errstate(invalid="ignore"):
        ratio = np.abs(samples) / float(np.abs(v).max())
    return _exact(ratio.ravel() - 1.0, ctx, dict(fraction_outside=float((~(ratio <= 1.0)).mean()),
                                                max_ratio=float(np.nanmax(ratio))))


def _range_search(ctx: CellContext) -> Evidence:
    """Maximise |RMFA|/L over ``(q, k_1, k_2, v_2)``, ``V = (1, v_2)``, one degree-1 feature with ω = +1 (d = 1)."""
    draw = RMFDraw(np.array([1]), np.array([0]), np.ones((1, 1), np.int8), 2.0, "geom")

    def ratio(z):
        q, keys = _ball_matrix_like(z[:1, None], ctx.variant), _ball_matrix_like(z[1:3, None], ctx.variant)
        out = quiet(ctx.impl("rmfa", rmfa), q, keys, np.array([[1.0], [z[3]]]), draw=draw)
        return float(_capped(np.abs(out), 1e6).max())

    res = minimize_margin(lambda z: 1.0 - ratio(z), [(0.05, 1.0)] + [(-1.0, 1.0)] * 3, rng=ctx.rng,
                          restart=ctx.restart or 0)
    return _exact([ratio(res.x) - 1.0], ctx, dict(inputs=res.x.tolist()))


RMFA_RANGE = Claim(
    id="macformer.thm2.rmfa_range", source="proof of Theorem 2, first step",
    statement="For all Q, K ∈ ℓ2(0,1) and all V with |V_ij| <= L, every draw gives RMFA_K(Q,K,V)_ij ∈ [-L, L].",
    kind="inequality", tolerance=1e-9, units="|RMFA_ij|/L - 1 (capped at 1; non-finite counts as 1)",
    domain=_thm_domain(D_up_to=4), readings=BALLS, cell=_range_cell, search=_range_search, universal=True,
    grid=_thm_grid(quick=dict(kernel=list(KERNEL_NAMES), D=[1, 4]), smoke=dict(kernel=["exp"], D=[1, 4]),
                   full=dict(D=[1, 2, 4, 16, 64, 512])),
    where=_thm_where(lambda p: True),
    replicates=tiers(2_000, smoke=1_000, full=100_000), restarts=tiers(2, smoke=1, full=10),
    roles=("rmfa_replicates", "rmfa"), plot_x="D",
    notes="The search uses an explicit draw (D = 1, N = 1, ω = +1) so the witness is deterministic.",
)
