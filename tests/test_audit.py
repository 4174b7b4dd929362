"""``rfkit audit``: third-party libraries through rfkit's claims (:mod:`rfkit.validation.audit`).

Each installed library's audit runs at smoke size; performer-pytorch's known defects (the ``eps`` added to its
features, its causal key stabiliser over the whole sequence, the ``1e-6`` in its causal prefix sums, QR without the
sign fix) come out refuted with witnesses that reproduce; rfkit's own estimators plugged in as a library are not
refuted, and planted defects in them are (so the properties can fail). Tests skip with a reason when a library is
missing.
"""

import importlib.util
import json
import math

import numpy as np
import pytest

from rfkit.estimators.favor import favor_attention
from rfkit.estimators.kernel_features import polynomial_maclaurin_features, random_phase_features
from rfkit.theory.rff import rff_squared_error_sd, rff_term_raw_moments, rff_term_variance
from rfkit.validation.audit import LIBRARIES, audit, audit_table, get_library, rerun_witness
from rfkit.validation.cells import CellSpec, run_cell
from rfkit.validation.claims import get_claim
from rfkit.validation.claims.peers import rfkit_rff_paired
from rfkit.validation.cli import main

pytestmark = pytest.mark.peers


def needs(module: str):
    return pytest.mark.skipif(importlib.util.find_spec(module) is None,
                              reason=f"{module} is not installed (pip install 'rfkit[peers]')")


def verdicts(run) -> dict[str, str]:
    return {c.claim.id: c.verdict for c in run.claims}


# ------------------------------------------------------------------------------------------------- theory


def test_rff_closed_forms_against_monte_carlo():
    """The per-frequency moments of both maps (rfkit.theory.rff) against a direct simulation of the maps."""
    rng = np.random.default_rng(20_261_127)
    gamma, delta, s = 0.7, np.array([0.6, -0.3]), np.array([0.2, 0.9])
    w = rng.normal(scale=math.sqrt(2 * gamma), size=(400_000, 2))
    b = rng.uniform(0, 2 * math.pi, size=400_000)
    for kind, term in (("paired", np.cos(w @ delta)), ("phase", np.cos(w @ delta) + np.cos(w @ s + 2 * b))):
        raw = rff_term_raw_moments(kind, float(delta @ delta), gamma)
        for j in range(4):  # 400k draws of terms bounded by 2: the 4th moment to ~1%
            assert np.mean(term ** (j + 1)) == pytest.approx(raw[j], rel=0.02, abs=0.01)
        assert term.var() == pytest.approx(rff_term_variance(kind, float(delta @ delta), gamma), rel=0.02)
    assert rff_term_variance("phase", 0.3, 2.0) - rff_term_variance("paired", 0.3, 2.0) == pytest.approx(0.5)
    assert rff_squared_error_sd("paired", 0.0, 1.0, 4) == 0.0  # Δ = 0: the paired estimate is exactly 1
    with pytest.raises(ValueError, match="unknown random Fourier feature map"):
        rff_term_variance("sincos", 0.1, 1.0)
    with pytest.raises(ValueError, match="gamma"):
        rff_term_variance("phase", 0.1, 0.0)


# ------------------------------------------------------------------------------------------------ registry


def test_list_shows_every_library(capsys):
    assert main(["audit", "--list"]) == 0
    out = capsys.readouterr().out
    listed = [name for name in LIBRARIES if out.count(f"\n{name} ") or out.startswith(f"{name} ")]
    assert len(listed) >= 4 and len(LIBRARIES) >= 5
    for lib in LIBRARIES.values():
        assert (f"{lib.name:28} not installed ({lib.install_command})" in out) != lib.installed
        for prop in lib.properties:
            get_claim(prop)  # every property is a registered claim
            assert f"- {prop}" in out


def test_unknown_and_missing_libraries_are_clear(capsys):
    assert main(["audit", "no-such-lib"]) == 2
    assert "unknown library 'no-such-lib'" in capsys.readouterr().err
    with pytest.raises(KeyError, match="audited libraries"):
        get_library("no-such-lib")
    missing = [lib for lib in LIBRARIES.values() if not lib.installed]
    if missing:
        assert main(["audit", missing[0].name]) == 2
        assert missing[0].install_command in capsys.readouterr().err
    with pytest.raises(ValueError, match="propert"):
        audit("rfkit", properties=["core.is.unbiased"])


# ------------------------------------------------------------------------------- rfkit as a library (reference)

RFF = ("core.rff.phase.unbiased", "core.rff.phase.variance", "core.rff.paired.unbiased", "core.rff.paired.variance",
       "core.poly.sketch_unbiased")
FAVOR = ("core.features.positive_exact_opposite", "core.favor.exact_given_projection", "core.favor.no_future_leak")


def test_rfkit_plugged_in_as_a_library_is_not_refuted():
    run = audit("rfkit", "smoke", 0, properties=RFF + FAVOR)
    assert not run.failed
    assert set(verdicts(run).values()) == {"supported"}, audit_table(run)


def test_planted_defects_are_refuted():
    """The properties can fail: a 5% bias, the paired map passed off as the random-phase one (variance short by
    1/2 per frequency), performer's eps in rfkit's own FAVOR+ and an eps added to rfkit's positive features."""
    def biased(x, **kw):
        return random_phase_features(x, **kw) * math.sqrt(1.05)

    def eps_favor(q, k, v, *, omega, causal):
        return favor_attention(q, k, v, omega=omega, causal=causal, jax_stabilizer=1e-4)

    def eps_positive(x, omega):
        from rfkit.estimators import positive_features

        return positive_features(x, omega).dense() + 1e-3 / math.sqrt(omega.shape[0])

    run = audit("rfkit", "smoke", 0, properties=("core.rff.phase.unbiased",), implementations={"rff.phase": biased})
    assert verdicts(run) == {"core.rff.phase.unbiased": "refuted"}
    run = audit("rfkit", "smoke", 0, properties=("core.rff.phase.variance",),
                implementations={"rff.phase": rfkit_rff_paired})
    assert verdicts(run) == {"core.rff.phase.variance": "refuted"}
    run = audit("rfkit", "smoke", 0, properties=("core.poly.sketch_unbiased",),
                implementations={"poly_sketch": lambda x, **kw: polynomial_maclaurin_features(x, **kw)
                                 * math.sqrt(1.1)})
    assert verdicts(run) == {"core.poly.sketch_unbiased": "refuted"}
    run = audit("rfkit", "smoke", 0, properties=FAVOR[:2],
                implementations={"favor.fixed_projection": eps_favor, "feature_map.positive": eps_positive})
    assert set(verdicts(run).values()) == {"refuted"}


F32 = "core.favor.float32_forward_error"


def _float16_sums(q, k, v, *, omega, causal):
    """Planted defect: rfkit's float32 features (key scales relative to their maximum), the sums in float16."""
    from rfkit.estimators import positive_features

    scale = q.shape[-1] ** -0.25
    qf, kf = positive_features(q * scale, omega, dtype=np.float32), positive_features(k * scale, omega,
                                                                                     dtype=np.float32)
    a = qf.values.astype(np.float16) @ (kf.values * np.exp(kf.log_scale - kf.log_scale.max())[:, None]).astype(
        np.float16).T
    a = np.tril(a) if causal else a
    return (a @ v.astype(np.float16)) / a.sum(axis=-1, keepdims=True)


def _unstabilised(q, k, v, *, omega, causal):
    """Planted defect: float32 features exp(ωᵀx - ‖x‖²/2)/√m without a stabiliser (underflow at large norms)."""
    def features(x):
        x = x * np.float32(x.shape[-1] ** -0.25)
        return np.exp(x @ omega.T - 0.5 * (x * x).sum(axis=-1, keepdims=True)) / np.float32(math.sqrt(len(omega)))

    a = features(q) @ features(k).T
    a = np.tril(a) if causal else a
    with np.errstate(all="ignore"):
        return (a @ v) / a.sum(axis=-1, keepdims=True)


def test_float32_forward_error_bound():
    """rfkit's float32 FAVOR+ stays within the stated bound (at < 1% of it); float16 sums and an unstabilised exp
    (0/0 at σ = 8 in float32 only) are refuted."""
    from rfkit.theory.rounding import favor_float32_bound, gamma_n
    from rfkit.validation.claims.peers import FAVOR_D, FAVOR_M

    run = audit("rfkit", "smoke", 0, properties=(F32,))
    assert verdicts(run) == {F32: "supported"}, audit_table(run)
    assert max(o.evidence.estimate for o in run.claims[0].outcomes) < 0.05
    for planted in (_float16_sums, _unstabilised):
        run = audit("rfkit", "smoke", 0, properties=(F32,),
                    implementations={"favor.fixed_projection.float32": planted})
        assert verdicts(run) == {F32: "refuted"}, planted.__name__
    only_sums = favor_float32_bound(np.zeros((2, FAVOR_D)), np.ones((FAVOR_M, FAVOR_D)), 1024)
    assert only_sums == pytest.approx(gamma_n(1024 + FAVOR_M + 3) + 4 * 2.0 ** -24)
    with pytest.raises(ValueError, match="gamma_n"):
        gamma_n(2 ** 24)
    with pytest.raises(ValueError, match="omega"):
        favor_float32_bound(np.zeros((2, 3)), np.zeros((4, 5)), 8)


# ---------------------------------------------------------------------------------------------- the libraries


@needs("sklearn")
def test_sklearn_rbf_sampler_is_unbiased_with_the_random_phase_variance():
    run = audit("scikit-learn", "smoke", 0, properties=("core.rff.phase.unbiased", "core.rff.phase.variance"))
    assert verdicts(run) == {"core.rff.phase.unbiased": "supported", "core.rff.phase.variance": "supported"}
    # ... and not the paired map's variance: its adapter in place of the paired map is refuted there
    sampler = get_library("scikit-learn").adapters()["rff.phase"]
    run = audit("rfkit", "smoke", 0, properties=("core.rff.paired.variance",), implementations={"rff.paired": sampler})
    assert verdicts(run) == {"core.rff.paired.variance": "refuted"}


@needs("gpytorch")
def test_gpytorch_rff_kernel_is_unbiased_with_the_paired_variance():
    run = audit("gpytorch", "smoke", 0)
    assert verdicts(run) == {"core.rff.paired.unbiased": "supported", "core.rff.paired.variance": "supported"}


@needs("performer_pytorch")
def test_performer_float32_is_within_the_bound():
    """performer-pytorch in float32 (its default) against its own float64 on the same inputs: within the bound."""
    run = audit("performer-pytorch", "smoke", 0, properties=(F32,))
    assert verdicts(run) == {F32: "supported"}, audit_table(run)


@needs("performer_pytorch")
def test_performer_known_defects_are_refuted_with_reproducible_witnesses():
    properties = FAVOR + ("core.linear_attention.exact",)
    run = audit("performer-pytorch", "smoke", 0, properties=properties)
    assert verdicts(run) == dict.fromkeys(properties, "refuted")
    for claim in run.claims:
        witness = claim.witness
        again = rerun_witness("performer-pytorch", claim.claim.id, witness).evidence
        assert (again.estimate, again.statistic, again.p_value) == (witness["estimate"], witness["statistic"],
                                                                    witness["p_value"])


@needs("performer_pytorch")
def test_performer_orthogonal_sampler_is_not_haar():
    """One cell of core.orf.haar_law at 1000 draws (the whole claim draws ~200k blocks through the library's Python
    loop, ~2 min; `rfkit audit performer-pytorch` runs it):
    QR without the sign fix fails the Kolmogorov-Smirnov part, sampled in float64 (orthogonality holds)."""
    adapters = get_library("performer-pytorch").adapters()
    spec = CellSpec(get_claim("core.orf.haar_law"), "default", {"d": 8, "m": "d"}, "smoke", 0,
                    implementations=adapters, budget=1_000)  # 1000 draws: the sign bias is a KS distance ~1/2
    ev = run_cell(spec).evidence
    assert ev.effect > 0.04 and ev.p_value < 1e-6
    assert ev.extra["max_gram_error"] < 64 * 8 * np.finfo(float).eps


@needs("performer_pytorch")
def test_cli_audit_writes_the_table_and_reruns_the_witness(tmp_path, capsys):
    out = tmp_path / "audit"
    assert main(["audit", "performer-pytorch", "--property", "core.favor.no_future_leak", "--out", str(out),
                 "--quiet"]) == 0
    doc = json.loads((out / "audit.json").read_text())
    assert doc["library"] == "performer-pytorch" and doc["version"]
    assert [r["verdict"] for r in doc["rows"]] == ["refuted"]
    assert "| `core.favor.no_future_leak` | refuted |" in (out / "audit.md").read_text()
    assert (out / "verdicts.json").exists() and (out / "report.md").exists()
    capsys.readouterr()
    assert main(["audit", "performer-pytorch", "--witness", "core.favor.no_future_leak", "--out", str(out)]) == 0
    assert "reproduced exactly" in capsys.readouterr().out


@needs("sklearn")
def test_sklearn_polynomial_count_sketch_is_unbiased():
    """One cell of core.poly.sketch_unbiased at 1000 draws (one fit per draw: the whole property takes ~1 min)."""
    spec = CellSpec(get_claim("core.poly.sketch_unbiased"), "default",
                    {"degree": 3, "coef0": 1.0, "angle": math.pi / 3}, "smoke", 0,
                    implementations=get_library("scikit-learn").adapters(), budget=1_000)
    ev = run_cell(spec).evidence
    assert not ev.flags and ev.p_value > 1e-3 and abs(ev.estimate - ev.prediction) < 0.05
