"""Pre-post Scaling Batch Normalization (Algorithm 1), Theorem 3, post-SBN's γ = t, β = r, attention after pre-SBN."""

import functools
import math
from dataclasses import replace

import numpy as np

from rfkit.estimators import softmax_attention
from rfkit.estimators.ppsbn import BN_STATS, VAR_ESTIMATORS, matrix_norm, postsbn, presbn, signed_power
from rfkit.estimators.rmf import rmfa_replicates
from rfkit.theory import maclaurin as theory
from rfkit.validation.domain import Choice, Integers, Range, Reading
from rfkit.validation.harness import quiet, shared
from rfkit.validation.model import CellContext, Claim, per_tier, tiers
from rfkit.validation.search import minimize_margin
from rfkit.validation.stats import Evidence, binomial_test, combine, mean_test

from .common import _capped, _exact, _readings, _rel_error

EPS = 1e-12  # the toy experiment's ε ("ε = 10^-12")

#: Step-2 norm readings: ``fro_tensor`` is the Frobenius norm of the whole tensor, the others are per matrix.
PRESBN_READINGS = _readings(norm=["row", "fro", "fro_tensor", "spec"], bn_stats=list(BN_STATS),
                            var=list(VAR_ESTIMATORS))
RAW_INPUTS = ("gaussian", "student1", "student2", "low_rank", "constant_cols", "duplicated", "same", "offset_scale")


def _raw(kind: str, rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """One raw ``(B, H, n, d)`` input of a family (``duplicated``: every row twice; ``constant_cols``: one row)."""
    b, h, n, d = shape
    if kind in ("student1", "student2"):
        return rng.standard_t(int(kind[-1]), size=shape)
    if kind == "low_rank":
        return rng.standard_normal((b, h, n, 1)) * rng.standard_normal((b, h, 1, d))
    if kind == "constant_cols":
        return np.broadcast_to(rng.standard_normal((b, h, 1, d)), shape).copy()
    if kind == "duplicated":
        return np.repeat(rng.standard_normal((b, h, (n + 1) // 2, d)), 2, axis=2)[:, :, :n]
    if kind == "offset_scale":
        return 10.0 ** rng.choice([-6, 6]) * rng.standard_normal(shape) + 10.0 ** rng.choice([-6, 6])
    return rng.standard_normal(shape)


def _presbn_outputs(ctx: CellContext, q: np.ndarray, k: np.ndarray):
    reading = PRESBN_READINGS[ctx.variant]
    norm, scope = ("fro", "tensor") if reading["norm"] == "fro_tensor" else (reading["norm"], "matrix")
    return quiet(ctx.impl("presbn", presbn), q, k, eps=ctx.params.get("eps", EPS), bn_stats=reading["bn_stats"],
                 var_estimator=reading["var"], norm_reading=norm, norm_scope=scope)


def _domain_score(out) -> tuple[float, float, dict]:
    """``max_ai x_ai - 1`` for ``x_ai = q^SBN_a·k^SBN_i/√d`` (undefined: 1), its violation ``1[>= 0]``, extra."""
    with np.errstate(all="ignore"):
        x = out.q @ np.swapaxes(out.k, -1, -2) / math.sqrt(out.q.shape[-1])
    finite = np.isfinite(x)
    largest = float(np.max(np.where(finite, x, -np.inf)))
    value = largest - 1.0 if finite.all() else 1.0
    return value, float(value >= 0.0), dict(max_x=largest, max_abs_x=float(np.max(np.where(finite, np.abs(x), 0.0))),
                                            nonfinite=int((~finite).sum()))


def _ball_score(out) -> tuple[float, float, dict]:
    """``max ‖X^SBN‖ - 1`` in the step-2 norm's ball (undefined counts as 1), also the violation; extra: each ball's."""
    norms = {b: np.concatenate([matrix_norm(x, b).ravel() for x in (out.q, out.k)]) for b in ("row", "fro", "spec")}
    table = {b: float(x.max()) if np.isfinite(x).all() else math.inf for b, x in norms.items()}
    value = table[out.norm_reading] - 1.0 if math.isfinite(table[out.norm_reading]) else 1.0
    return value, value, dict(norms=table, nonfinite=out.n_nonfinite)


def _presbn_cell(score, ctx: CellContext) -> Evidence:
    p = ctx.params
    b, h = map(int, p["bh"].split("x"))
    q = _raw("gaussian" if p["input"] == "same" else p["input"], ctx.rng, (b, h, p["n"], p["d"]))
    k = q.copy() if p["input"] == "same" else _raw(p["input"], ctx.rng, q.shape)
    _, violation, extra = score(_presbn_outputs(ctx, q, k))
    return _exact([violation], ctx, extra)


def _presbn_search(score, ctx: CellContext) -> Evidence:
    """Adversarial search over raw ``Q, K`` (entries in ``[-5, 5]``, ε = 1e-12) of a small shape (restart ``r``:
    ``(n, d)`` number ``r mod 4`` of (2, 1), (2, 2), (3, 2), (1, 3)) maximising the continuous ``score``."""
    n, d = [(2, 1), (2, 2), (3, 2), (1, 3)][(ctx.restart or 0) % 4]

    def outputs(z):
        return _presbn_outputs(ctx, z[: n * d].reshape(1, 1, n, d), z[n * d:].reshape(1, 1, n, d))

    res = minimize_margin(lambda z: -score(outputs(z))[0], [(-5.0, 5.0)] * (2 * n * d), rng=ctx.rng,
                          restart=(ctx.restart or 0) // 4, maxiter=25)
    _, violation, extra = score(outputs(res.x))
    return _exact([violation], ctx, dict(extra, n=n, d=d, raw=res.x.tolist()))


#: The quick and smoke tiers run these cases (n, d, B×H, input, ε): boundary values, every input family, a large ε;
#: the full tier runs the register's product (``design="product"``; ε = 1e6 on Gaussian inputs).
PRESBN_CASES = {(2, 1, "1x1", "gaussian", EPS), (1, 4, "4x2", "gaussian", EPS), (64, 64, "4x2", "gaussian", EPS),
                (16, 4, "1x1", "student1", EPS), (16, 4, "1x1", "student2", EPS), (8, 2, "1x1", "constant_cols", EPS),
                (8, 4, "1x1", "duplicated", EPS), (8, 16, "1x1", "low_rank", EPS), (8, 16, "1x1", "same", EPS),
                (8, 16, "1x1", "offset_scale", EPS), (8, 16, "1x1", "gaussian", 1e6)}
PRESBN_DECLARATION = dict(
    domain=dict(
        n=Integers("any n (n = 1 and n = 2 included)", 1, math.inf, points=(1, 2), up_to=64,
                   why="x_ai and the norms are closed forms in the rows; n enters only through the statistics, "
                       "which degenerate at n = 1 (zero variance) and n = 2 (step 1 gives ±1); n to 4000 at the "
                       "full tier"),
        d=Integers("any d (d = 1 included)", 1, math.inf, points=(1,), up_to=64,
                   why="|x_ai| <= ‖q_a‖‖k_i‖/√d shrinks with d; d = 1 is where x_ai can reach 1; d = 128 at the "
                       "full tier"),
        input=Choice("no assumption on the raw Q and K", RAW_INPUTS),
        eps=Range("ε > 0", 0.0, math.inf, strict=(True, False), up_to=(None, 1e6),
                  why="for ε far above σ step 1 is (X - μ)/√ε, whose scale step 2 divides out; 1e6 exceeds the "
                      "variance of every raw family but the 1e6-scaled one")),
    searched=("input",), universal=True, roles=("presbn",), plot_x="n", kind="inequality",
    readings={name: Reading(f"step 2 by the {r['norm']} norm, {r['bn_stats']} statistics, {r['var']} variance")
              for name, r in PRESBN_READINGS.items()},
    grid=tiers(dict(design=["cases"], n=[1, 2, 8, 16, 64], d=[1, 2, 4, 16, 64], bh=["1x1", "4x2"],
                    input=list(RAW_INPUTS), eps=[EPS, 1e6]),
               smoke=dict(n=[2, 8], d=[1, 2], bh=["1x1"], input=["gaussian", "constant_cols"], eps=[EPS]),
               full=dict(design=["product"], n=[1, 2, 3, 8, 200, 1000, 4000], d=[1, 2, 4, 16, 64, 128],
                         bh=["1x1", "16x8"])),
    where=lambda p, v: (p["eps"] == EPS or p["input"] == "gaussian") if p["design"] == "product" else
    (p["n"], p["d"], p["bh"], p["input"], p["eps"]) in PRESBN_CASES,
    restarts=tiers(1, full=8),
)

DOMAIN_PPSBN = Claim(
    id="macformer.table1.domain_ppsbn", source="paragraph after Table 1; Pre-post SBN section",
    statement="After pre-SBN (Algorithm 1 steps 1-2), every kernel argument x_ai = q^SBN_a·k^SBN_i/√d satisfies "
              "x_ai < 1, so the inv, log and sqrt kernels are defined.",
    tolerance=0.5, units="indicator: some x_ai >= 1 or undefined (nan)", **PRESBN_DECLARATION,
    cell=functools.partial(_presbn_cell, _domain_score), search=functools.partial(_presbn_search, _domain_score),
    notes="The search maximises max x_ai over raw inputs of small shapes.",
)
PRESBN_L2_BALL = Claim(
    id="macformer.alg1.presbn_l2_ball", source="Algorithm 1 steps 1-2 and the paragraph after it",
    statement="Pre-SBN puts its outputs in the unit ball: Q^SBN ∈ ℓ2(0,1) and K^SBN ∈ ℓ2(0,1).",
    tolerance=1e-12, units="norm above 1 in the ball of the step-2 norm (undefined counts as 1)", **PRESBN_DECLARATION,
    cell=functools.partial(_presbn_cell, _ball_score), search=functools.partial(_presbn_search, _ball_score),
    notes="The matched pairing (ball of the step-2 norm) decides; each cell's extra holds the largest norm under all "
          "three balls (e.g. row-normalised outputs have Frobenius norm √n, outside the Frobenius ball for n >= 2).",
)

#: Readings where Theorem 3's r is a scalar: matrix norms and scalar statistics of one matrix (row norms make r an
#: n×n array and per-feature statistics a d-vector: not evaluable).
THM3_READINGS = _readings(norm=["fro", "spec"], r_norm_of=["raw", "bn"], t=["matmul", "fit_scalar", "fit_column"],
                          power_sign=["real", "signed", "abs"])
THM3_NOTES = {name: f"‖·‖₂ {r['norm']}, r from the {r['r_norm_of']} norms, t by {r['t']}, negative bases "
              f"{r['power_sign']}" for name, r in THM3_READINGS.items()}
#: Theorem 3's "≈" compares whole outputs (``total``) or their query-dependent parts (``query``: rows minus their
#: mean over queries; with nearly uniform attention a constant RHS is "close" in total only).
RESTORATION_READINGS = {f"{name}|{ref}": dict(r, reference=ref) for name, r in THM3_READINGS.items()
                        for ref in ("total", "query")}
PRESBN_SCORE_READINGS = _readings(norm=["row", "fro", "spec"], r_norm_of=["raw", "bn"])
V_AXIS = Choice("nothing on V: positive and signed V", ("positive", "signed"))
THM3_FULL = dict(length=[2, 4, 16, 128, 512], d=[1, 4, 16, 64])


def _nd_axes(n_words: str, n_up_to: int, d_words: str, more: str = "; the register's largest n") -> dict:
    return dict(length=Integers(f"{n_words} (n >= 2: at n = 1 the statistics can leave Q^SBN = 0/0 undefined, which "
                                "refutes alg1.presbn_l2_ball, not this statement)", 2, math.inf, up_to=n_up_to,
                                why="n enters only through the softmax sums and the statistics" + more),
                d=Integers(d_words, 1, math.inf, up_to=64, why="d enters only through 1/√d and the statistics"))


def _thm3_inputs(rng: np.random.Generator, n: int, d: int, v_sign: str, centred: bool = False, c: float = 1.0):
    """Raw ``Q, K`` (times ``c``) with feature-dependent scales and offsets, and ``V`` (positive or signed)."""
    scales, offsets = rng.uniform(0.3, 3.0, size=(2, 1, d)), rng.uniform(-2.0, 2.0, size=(2, 1, d))
    q, k = ((rng.standard_normal((n, d)) * scales[i] + (0.0 if centred else offsets[i])) * c for i in range(2))
    v = rng.uniform(0.1, 1.0, size=(n, d)) if v_sign == "positive" else rng.standard_normal((n, d))
    return q, k, v


def _thm3_pre(q, k, norm: str):
    return quiet(presbn, q, k, eps=EPS, bn_stats="scalar_matrix", norm_reading=norm)


def _r_norms(q, k, pre, reading: dict) -> tuple[np.ndarray, np.ndarray]:
    """The norms in Theorem 3's ``r``: of the raw inputs or of the step-1 outputs."""
    return (matrix_norm(q, reading["norm"]), matrix_norm(k, reading["norm"])) if reading["r_norm_of"] == "raw" \
        else (pre.norm_q, pre.norm_k)


def _theorem3_r(q, k, pre, reading: dict) -> float:
    return theory.theorem3_r(*(float(np.ravel(x)[0]) for x in (*_r_norms(q, k, pre, reading), pre.var_q, pre.var_k)),
                             EPS)


def _rhs(left: np.ndarray, attn: np.ndarray, k, v, pre, r: float, reading: dict) -> np.ndarray:
    """``(1/t)·attn^{1/r}`` with ``t`` printed (``matmul``) or fitted to ``left`` by least squares (one positive
    scalar per instance, or one per output column). Leading axes are instances."""
    if reading["t"] == "matmul":
        t = theory.theorem3_t(float(pre.mean_q.ravel()[0]), k, v, r, reading["power_sign"])
        return theory.theorem3_rhs(attn, t, r, reading["power_sign"])
    powered = signed_power(attn, 1.0 / r, reading["power_sign"])
    axes = (-2, -1) if reading["t"] == "fit_scalar" else (-2,)
    with np.errstate(all="ignore"):
        inverse_t = (np.nansum(left * powered, axis=axes, keepdims=True)
                     / np.nansum(powered * powered, axis=axes, keepdims=True))
    return powered * np.maximum(inverse_t, 0.0)


def _discrepancy(left, right, reference: str = "total") -> np.ndarray:
    """``‖LHS - RHS‖_F / ‖LHS‖_F`` (or over the query-dependent part ``‖LHS - mean_a LHS_a‖_F``), capped at 1."""
    base = left if reference == "total" else left - left.mean(axis=-2, keepdims=True)
    with np.errstate(all="ignore"):
        return _capped(np.linalg.norm(left - right, axis=(-2, -1)) / np.linalg.norm(base, axis=(-2, -1)))


def _thm3_cell(ctx: CellContext) -> Evidence:
    p = ctx.params
    restoration = "D" in p
    reading = (RESTORATION_READINGS if restoration else THM3_READINGS)[ctx.variant]
    # the RMFA readings of a point share its inputs and its RMFA draws (computed once: 72 readings, 4 RMFA runs)
    q, k, v = _thm3_inputs(ctx.shared_rng("inputs") if restoration else ctx.rng, p["length"], p["d"], p["v"],
                           p.get("centred", False))
    pre = _thm3_pre(q, k, reading["norm"])
    r = _theorem3_r(q, k, pre, reading)
    if not restoration:
        left = softmax_attention(pre.q, pre.k, v)
        right = _rhs(left, softmax_attention(q, k, v), k, v, pre, r, reading)
        return _exact([_discrepancy(left, right)], ctx, dict(r=r, query_part=float(_discrepancy(left, right, "query"))))
    estimator = ctx.impl("rmfa_replicates", rmfa_replicates)
    point = (ctx.claim_id, ctx.seed, tuple(sorted(p.items())), ctx.replicates, estimator)
    sizes = _look_sizes(ctx)
    left_draws = shared(point + (f"sbn|{reading['norm']}",),
                        lambda: _Draws(ctx, estimator, pre.q, pre.k, v, f"sbn|{reading['norm']}", sizes))
    raw_draws = shared(point + ("raw",), lambda: _Draws(ctx, estimator, q, k, v, "raw", sizes))
    for look, size in enumerate(sizes):
        left, raw = left_draws.first(size), raw_draws.first(size)
        values = _discrepancy(left, quiet(_rhs, left, raw, k, v, pre, r, reading), reading["reference"])
        saturated = int((values >= 1.0).sum())
        extra = dict(r=r, median=float(np.median(values)), saturated=saturated)
        if len(sizes) > 1:
            extra.update(looks=sizes[: look + 1])
        # Bounded values: the betting sequence (non-asymptotic); saturated ones (at the cap) by the exact binomial
        # test of P(discrepancy = 1) <= tolerance, a lower bound on the mean (Markov); Bonferroni over the two and
        # over the looks
        parts = 2 * len(sizes)
        ev = combine([mean_test(values, 0.0, alternative="less", bounds=(0.0, 1.0), **ctx.sub_test(parts),
                                extra=extra),
                      binomial_test(saturated, values.size, 0.0, **ctx.sub_test(parts),
                                    extra=dict(test="P(discrepancy = 1) <= tolerance"))], extra=extra)
        ev = replace(ev, p_value=min(1.0, len(sizes) * ev.p_value))
        if ev.p_value <= ctx.alpha or (ev.upper <= ctx.tolerance and not ev.flags):
            break
    return ev


#: Looks of a restoration cell (Bonferroni over them): doublings up to the tier's replicates (full: 25, 50, 100,
#: 200, 400). The readings of a point share its draws; each stops at the first look that decides it, so a point
#: whose readings all fail by far (quick: every reading, violation ~1 at p ~1e-62) costs its first look only.
THM3_LOOKS = tiers(1, full=5)


def _look_sizes(ctx: CellContext) -> list[int]:
    looks = per_tier(THM3_LOOKS, ctx.tier)
    return [max(1, ctx.replicates >> (looks - 1 - i)) for i in range(looks)]


class _Draws:
    """RMFA replicates of one input pair, drawn look by look and kept for the readings of the point
    (:func:`~rfkit.validation.harness.shared` holds the object): the replicates between looks ``i - 1`` and ``i``
    come from their own shared stream (the first look's from ``label`` itself), so every reading sees the same
    draws whatever the order in which the readings run or how far each goes."""

    def __init__(self, ctx: CellContext, estimator, a, b, v, label: str, sizes: list[int]):
        self.ctx, self.estimator, self.a, self.b, self.v, self.label = ctx, estimator, a, b, v, label
        self.sizes, self.parts = sizes, []

    def first(self, n: int) -> np.ndarray:
        """The first ``n`` replicates (``n`` one of the looks' sizes), ``(n, L, d_v)``."""
        look = self.sizes.index(n)
        for i in range(len(self.parts), look + 1):
            start = self.sizes[i - 1] if i else 0
            rng = self.ctx.shared_rng(self.label if not i else f"{self.label}|{start}")
            self.parts.append(quiet(self.estimator, self.a, self.b, self.v, replicates=self.sizes[i] - start,
                                    num_features=self.ctx.params["D"], rng=rng).out)
        return np.concatenate(self.parts[: look + 1])


def _presbn_scores_cell(ctx: CellContext) -> Evidence:
    """Both sides of the score identity (``r_ai = ‖q_a‖‖k_i‖ sqrt((σ_Q+ε)(σ_K+ε))`` under ``row``) and their outputs."""
    reading, p, n, d = PRESBN_SCORE_READINGS[ctx.variant], ctx.params, ctx.params["length"], ctx.params["d"]
    q, k, _ = _thm3_inputs(ctx.rng, n, d, "positive", centred=not p["offsets"])
    if p["scales"] == "equal":
        q, k = q / q.std(axis=0), k / k.std(axis=0)
    pre = _thm3_pre(q, k, reading["norm"])
    nq, nk = _r_norms(q, k, pre, reading)
    r = nq.reshape(-1, 1) * nk.reshape(1, -1) * math.sqrt((pre.var_q.item() + EPS) * (pre.var_k.item() + EPS))
    printed = (q - pre.mean_q) @ (k - pre.mean_k).T / r
    v = ctx.rng.standard_normal((n, 3))
    outputs = softmax_attention(pre.q, pre.k, v), softmax_attention(printed, np.eye(n), v, scale=1 / math.sqrt(d))
    errors = np.concatenate([_rel_error(pre.q @ pre.k.T, printed, float(np.abs(printed).max())).ravel(),
                             _rel_error(*outputs, float(np.abs(v).max())).ravel()])
    return _exact(errors, ctx)


THM3_EXACT_CORE = Claim(
    id="macformer.thm3.exact_core", source="proof of Theorem 3 (the chain between its ≈)",
    statement="attn_exp(Q^SBN, K^SBN, V) = (1/t)·attn_exp(Q, K, V)^{1/r}, with r = ‖Q‖₂‖K‖₂sqrt((σ_Q+ε)(σ_K+ε)) and "
              "t = Softmax(μ_Q Kᵀ/√d)^{1/r} / V^{(r-1)/r}.",
    kind="identity", tolerance=1e-9, units="‖LHS - RHS‖_F / ‖LHS‖_F (capped at 1; non-finite counts as 1)",
    domain=dict(**_nd_axes("nothing on n", 128, "nothing on d", "; n = 512 at the full tier"), v=V_AXIS,
                centred=Choice("Q and K centred or not", (False, True))),
    readings={name: Reading(note) for name, note in THM3_NOTES.items()}, cell=_thm3_cell, plot_x="length",
    grid=tiers(dict(length=[2, 128], d=[1, 64], v=["positive", "signed"], centred=[False, True]),
               smoke=dict(length=[16], d=[4], v=["positive"], centred=[False]), full=THM3_FULL),
    notes="Pre-SBN with scalar statistics of one matrix (ε = 1e-12). The fitted-t readings give Theorem 3 its best "
          "chance (least-squares t); each cell's extra has the discrepancy over the query-dependent part.",
)
THM3_SCALE_RESTORATION = Claim(
    id="macformer.thm3.scale_restoration", source="Theorem 3 (the statement)",
    statement="RMFA_exp(Q^SBN, K^SBN, V) ≈ (1/t)·RMFA_exp(Q, K, V)^{1/r}, with r and t as in Theorem 3.",
    kind="identity", tolerance=0.1, units="mean relative discrepancy ‖LHS - RHS‖_F/‖LHS‖_F (each capped at 1)",
    domain=dict(**_nd_axes("nothing on n", 512, "nothing on d"), v=V_AXIS,
                D=Integers("nothing on D", 1, math.inf, up_to=4096,
                           why="the register's largest D; the D → ∞ limit is thm3.exact_core")),
    readings={name: Reading(THM3_NOTES[name.rsplit("|", 1)[0]] + f", discrepancy over the {r['reference']} output")
              for name, r in RESTORATION_READINGS.items()},
    cell=_thm3_cell, roles=("rmfa_replicates",), plot_x="D",
    grid=tiers(dict(length=[16], d=[16], v=["positive", "signed"], D=[256]), smoke=dict(v=["positive"]),
               full=dict(THM3_FULL, D=[1, 64, 256, 1024, 4096])),
    replicates=tiers(64, full=400),
    notes="'≈' is read as a mean discrepancy of at most 10% between independent RMF draws on the two sides; quick "
          "runs one (n, d, D) point (covering the axes for 72 readings is a full-tier cost). The readings of a point "
          "share its inputs and its RMF draws (common random numbers: one RMFA run of the raw inputs and one per "
          "norm reading of Pre-SBN's, not two per reading). The full tier looks at 25, 50, 100, 200 and 400 "
          "replicates (Bonferroni over the looks; the draws between two looks are shared too): a reading stops at "
          "the first look that decides it, so a point costs what its slowest reading needs.",
)
PRESBN_SCORES = Claim(
    id="macformer.thm3.presbn_scores", source="proof of Theorem 3, first equality",
    statement="Q^SBN (K^SBN)ᵀ = (Q - μ_Q)(K - μ_K)ᵀ / r entrywise with r as printed; hence attn_exp(Q^SBN, K^SBN, V) "
              "= Softmax[(Q - μ_Q)(K - μ_K)ᵀ/(r√d)] V.",
    kind="identity", tolerance=1e-12, units="max |difference| / max |scores| (and / max |V| for the outputs)",
    domain=dict(**_nd_axes("as in Theorem 3: nothing on n", 256, "nothing on d"),
                scales=Choice("features with equal and unequal scales", ("equal", "unequal")),
                offsets=Choice("with and without offsets", (False, True))),
    readings={name: Reading(f"‖·‖₂ {r['norm']}, r from the {r['r_norm_of']} norms (scalar statistics; per-feature "
                            "statistics make r a d-vector: not evaluable)")
              for name, r in PRESBN_SCORE_READINGS.items()},
    cell=_presbn_scores_cell, plot_x="length",
    grid=tiers(dict(length=[2, 16, 256], d=[1, 4, 64], scales=["equal", "unequal"], offsets=[False, True]),
               smoke=dict(length=[16], d=[4], scales=["unequal"], offsets=[True])),
)

GAMMA_BETA_READINGS = _readings(fit=["plugin", "instance", "shared"], reference=["total", "query"])
SHARED_INSTANCES = 100


def _fit_power(att: np.ndarray, target: np.ndarray, power_sign: str) -> tuple[float, float]:
    """Least-squares ``(γ > 0, β)`` of ``Σ ((γ·a)^β - T)²``: ``(γa)^β = γ^β a^β``, so ``s = γ^β >= 0`` is linear given
    ``β``; ``β`` is scanned on [-40, 40] in steps of 1 and refined by bounded Brent. A power undefined somewhere (a
    negative base under ``power_sign="real"``) has infinite loss."""
    from scipy import optimize

    def fit(beta):  # (s, loss) for each β
        powered = signed_power(att[None, :], np.atleast_1d(beta)[:, None], power_sign)
        with np.errstate(all="ignore"):
            s = np.maximum((powered * target).sum(axis=1) / (powered * powered).sum(axis=1), 0.0)
            loss = ((s[:, None] * powered - target) ** 2).sum(axis=1)
        return s, np.where(np.isfinite(loss), loss, np.inf)

    losses = fit(grid := np.linspace(-40.0, 40.0, 81))[1]
    start = float(grid[int(np.argmin(losses))])
    res = optimize.minimize_scalar(lambda b: float(fit(b)[1][0]), bounds=(start - 1.0, start + 1.0), method="bounded")
    beta = float(res.x) if res.fun <= losses.min() else start
    scale = float(fit(beta)[0][0])
    return (scale ** (1.0 / beta) if beta != 0 and scale > 0 else 1.0), beta


def _gamma_beta_cell(ctx: CellContext) -> Evidence:
    reading, p = GAMMA_BETA_READINGS[ctx.variant], ctx.params
    instances = [_thm3_inputs(ctx.rng, p["length"], p["d"], p["v"], c=p["c"])
                 for _ in range(SHARED_INSTANCES if reading["fit"] == "shared" else 1)]
    pres = [_thm3_pre(q, k, "fro") for q, k, _ in instances]  # Frobenius norms, scalar statistics
    atts = np.stack([softmax_attention(pre.q, pre.k, v) for pre, (_, _, v) in zip(pres, instances, strict=True)])
    targets = np.stack([softmax_attention(q, k, v) for q, k, v in instances])
    if reading["fit"] == "plugin":
        (q, k, v), pre = instances[0], pres[0]
        r = _theorem3_r(q, k, pre, dict(norm="fro", r_norm_of="bn"))
        t = theory.theorem3_t(float(pre.mean_q.ravel()[0]), k, v, r, p["power_sign"])
        outputs = postsbn(atts[0], t, r, power_sign=p["power_sign"])[None]
    else:  # one (γ, β) for all entries, or one per value column (the columns decouple)
        columns = [slice(None)] if p["shape"] == "scalar" else range(atts.shape[-1])
        fits = np.array([_fit_power(atts[..., c].ravel(), targets[..., c].ravel(), p["power_sign"]) for c in columns])
        outputs = postsbn(atts, *(fits[0] if p["shape"] == "scalar" else fits.T), power_sign=p["power_sign"])
    values = _discrepancy(targets, outputs, reading["reference"])
    return _exact(values, ctx, dict(mean_residual=float(values.mean())))


GAMMA_BETA_RESTORE = Claim(
    id="macformer.sec_ppsbn.gamma_beta_restore", source="paragraph after Theorem 3; Algorithm 1 step 4; Figure 1",
    statement="The trainable parameters of step 4 can take the values γ = t and β = r, with which "
              "(γ·RMFA_exp(Q^SBN, K^SBN, V))^β recovers RMFA_exp(Q, K, V) ≈ attn_exp(Q, K, V): post-SBN restores "
              "the output scale that pre-SBN removed.",
    kind="identity", tolerance=0.1,
    units="relative residual ‖(γ·att)^β - attn‖_F / ‖attn‖_F (or over attn's query-dependent part), capped at 1",
    domain=dict(**_nd_axes("nothing on inputs: n", 512, "any d"),
                c=Range("nothing on inputs: any scale c > 0 of Q and K", 0.0, math.inf, strict=(True, False),
                        up_to=(None, 10.0), why="the register's largest multiplier; pre-SBN removes the scale"),
                v=V_AXIS),
    readings={name: Reading(f"γ, β {'= t, r (plug-in)' if r['fit'] == 'plugin' else 'fitted per ' + r['fit']}; "
                            f"residual over {'‖attn‖' if r['reference'] == 'total' else 'the query-dependent part'}")
              for name, r in GAMMA_BETA_READINGS.items()},
    cell=_gamma_beta_cell, plot_x="c",
    grid=tiers(dict(length=[16], d=[16], c=[0.1, 1.0, 10.0], v=["positive", "signed"], power_sign=["signed"],
                    shape=["scalar", "per_feature"]),
               smoke=dict(c=[1.0], v=["positive"], power_sign=["real"], shape=["scalar"]),
               full=dict(length=[2, 16, 128, 512], d=[1, 16, 64], c=[0.01, 0.1, 1.0, 10.0],
                         power_sign=["real", "signed", "abs"])),
    where=lambda p, v: not (v.startswith("plugin") and p["shape"] != "scalar"),
    notes="Exact attention inside (the D → ∞ limit of RMFA); pre-SBN with Frobenius norms and scalar statistics, where "
          "the plug-in t and r are defined. 'shared' fits one (γ, β) over 100 instances (what trained parameters "
          "would be) and reports the largest in-sample residual.",
)

PRESBN_EXP_READINGS = _readings(norm=["row", "fro", "spec"], bn_stats=list(BN_STATS))


def _presbn_exp_cell(ctx: CellContext) -> Evidence:
    reading, n, d = PRESBN_EXP_READINGS[ctx.variant], ctx.params["length"], ctx.params["d"]
    q, k = (ctx.rng.standard_normal((2, 2, n, d)) * ctx.rng.uniform(0.5, 2.0, size=d) + ctx.rng.uniform(-1, 1, size=d)
            for _ in range(2))
    v = ctx.rng.standard_normal((2, 2, n, 3))
    pre = presbn(q, k, eps=EPS, bn_stats=reading["bn_stats"], norm_reading=reading["norm"])
    got = softmax_attention(pre.q, pre.k, v)
    fields = ("mean_q", "var_q", "mean_k", "var_k", "norm_q", "norm_k")
    errors = []
    for b, h in np.ndindex(2, 2):
        stats = {f: np.broadcast_to(getattr(pre, f), (2, 2) + getattr(pre, f).shape[2:])[b, h] for f in fields}
        logits = theory.presbn_argument(q[b, h], k[b, h], eps=pre.eps, norm_reading=reading["norm"], **stats)
        want = softmax_attention(logits, np.eye(n), v[b, h], scale=1.0)
        errors.append(_rel_error(got[b, h], want, float(np.abs(v[b, h]).max())).ravel())
    return _exact(np.concatenate(errors), ctx)


PRESBN_EXP_ATTENTION = Claim(
    id="macformer.derived.presbn_exp_attention", source="derived (register)",
    statement="For every query a, attn_exp(Q^SBN, K^SBN, V)_a = Σ_i softmax_i((q_a - μ_Q)ᵀΛ_QΛ_K k_i/(ν_Qν_K√d)) V_i "
              "under matrix norms (the μ_K term cancels), and with (k_i - μ_K) and row norms ν_{Q,a}ν_{K,i} under "
              "the row reading.",
    kind="identity", tolerance=1e-12, units="max |difference| / max |V|",
    domain=_nd_axes("every query a of any Q, K, V: n", 256, "any d", ""),
    readings={name: Reading(f"{r['norm']} norm, {r['bn_stats']} statistics; (B, H) = (2, 2), float64")
              for name, r in PRESBN_EXP_READINGS.items()},
    cell=_presbn_exp_cell, plot_x="length",
    grid=tiers(dict(length=[2, 256], d=[1, 64]), full=dict(length=[2, 16, 256], d=[1, 8, 64])),
)
