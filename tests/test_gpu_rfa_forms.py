"""rfkit.gpu.rfa_attention mirrors rfkit.estimators.rfa_attention: every form, feature map and option, the same
shapes and the same errors; torch on the CPU in float64 agrees with numpy to ~1e-12 relative."""

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from rfkit import gpu  # noqa: E402
from rfkit.estimators import rfa  # noqa: E402
from rfkit.estimators.proposals import GaussianProposal  # noqa: E402

TOL = 1e-12


def _rel(got, want) -> float:
    got = got.detach().numpy() if isinstance(got, torch.Tensor) else np.asarray(got)
    return float(np.abs(got - want).max() / np.abs(want).max())


def _both(args, **kw):
    """``(numpy result, torch result)`` of the same call (torch gets float64 CPU tensors)."""
    want = rfa.rfa_attention(*args, **kw)
    tkw = {name: torch.tensor(val) if isinstance(val, np.ndarray) else val for name, val in kw.items()}
    got = gpu.rfa_attention(*(torch.tensor(a) for a in args), **tkw)
    return want, got


@pytest.fixture
def data():
    gen = np.random.default_rng(7)
    q, k = gen.normal(size=(2, 6, 3)) * 0.5
    v = gen.normal(size=(6, 2))
    omega = gen.normal(size=(5, 3))
    phase = gen.uniform(0.0, 2 * math.pi, size=5)
    return q, k, v, omega, phase


FORMS = [("positive", "softmax"), ("positive", "features"), ("positive", "double_sum"), ("positive", "algorithm"),
         ("trig_sincos", "features"), ("trig_sincos", "double_sum"), ("trig_cos_phase", "features"),
         ("trig_cos_phase", "double_sum"), ("hyperbolic", "features"), ("hyperbolic", "double_sum")]


@pytest.mark.parametrize(("feature_map", "form"), FORMS, ids=[f"{m}-{f}" for m, f in FORMS])
def test_every_form_and_map_matches_numpy(data, feature_map, form):
    q, k, v, omega, phase = data
    kw = dict(omega=omega, feature_map=feature_map, form=form)
    if feature_map == "trig_cos_phase":
        kw["phase"] = phase
    want, got = _both((q, k, v), **kw)
    assert got.dtype == torch.float64 and tuple(got.shape) == want.shape
    assert _rel(got, want) < TOL


@pytest.mark.parametrize("frame", ["theory", "sqrt_d"])
def test_default_form_frame_and_leading_axes_match_numpy(data, frame):
    q, k, v, omega, _ = data
    gen = np.random.default_rng(1)
    qb, kb, vb = (np.stack([a, a[::-1]]) for a in (q, k, v))
    omega_b = gen.normal(size=(2, 5, 3))
    for args, w in (((q, k, v), omega), ((qb, kb, vb), omega), ((qb, kb, vb), omega_b)):
        for form in (None, "features", "double_sum", "algorithm"):
            want, got = _both(args, omega=w, frame=frame, form=form)
            assert tuple(got.shape) == want.shape and _rel(got, want) < TOL, (form, w.shape)


def test_proposals_and_log_ratios_match_numpy(data):
    q, k, v, omega, _ = data
    proposal = GaussianProposal(np.array([0.3, -0.2, 0.1]))
    log_ratio = np.random.default_rng(2).normal(size=5) * 0.3
    for form in ("softmax", "features"):
        want, got = _both((q, k, v), omega=omega, proposal=proposal, form=form)
        assert _rel(got, want) < TOL, form
        want, got = _both((q, k, v), omega=omega, log_ratio=log_ratio, form=form)
        assert _rel(got, want) < TOL, form
    # drawn from the proposal: numpy draws with a numpy seed (the torch path seeds a numpy generator from rng)
    want = rfa.rfa_attention(q, k, v, num_samples=4, rng=np.random.default_rng(3), proposal=proposal)
    got = gpu.rfa_attention(torch.tensor(q), torch.tensor(k), torch.tensor(v), num_samples=4,
                            rng=np.random.default_rng(3), proposal=proposal)
    assert tuple(got.shape) == want.shape and bool(torch.isfinite(got).all())


@pytest.mark.parametrize("causal", [False, True])
def test_per_query_samples_match_numpy(data, causal):
    q, k, v, _, _ = data
    gen = np.random.default_rng(4)
    omega = gen.normal(size=(6, 4, 3))
    log_ratio = gen.normal(size=(6, 4)) * 0.2
    want, got = _both((q, k, v), omega=omega, per_query=True, causal=causal)
    assert tuple(got.shape) == want.shape and _rel(got, want) < TOL
    want, got = _both((q, k, v), omega=omega, log_ratio=log_ratio, per_query=True, causal=causal)
    assert _rel(got, want) < TOL


def test_causal_features_match_numpy_and_use_only_the_past(data):
    q, k, v, omega, phase = data
    want, got = _both((q, k, v), omega=omega, causal=True)
    assert _rel(got, want) < TOL
    for feature_map in ("positive", "trig_sincos", "trig_cos_phase", "hyperbolic"):
        kw = dict(omega=torch.tensor(omega), feature_map=feature_map, form="features")
        if feature_map == "trig_cos_phase":
            kw["phase"] = torch.tensor(phase)
        t = [torch.tensor(a) for a in (q, k, v)]
        y = gpu.rfa_attention(*t, causal=True, **kw)
        y_stats, _ = gpu.rfa_attention(*t, causal=True, return_stats=True, **kw)
        for n in (0, 2, 5):  # row n is the non-causal output on the prefix 0..n
            prefix = gpu.rfa_attention(*(a[:n + 1] for a in t), **kw)
            assert _rel(y[n], prefix[n].numpy()) < 1e-10, (feature_map, n)
            assert _rel(y_stats[n], prefix[n].numpy()) < 1e-10, (feature_map, n)


def test_return_stats_and_gemms_match_numpy(data):
    q, k, v, omega, phase = data
    for kw in (dict(), dict(form="features"), dict(form="double_sum", feature_map="trig_sincos"),
               dict(form="features", feature_map="trig_cos_phase", phase=phase)):
        (want, ws), (got, gs) = _both((q, k, v), omega=omega, return_stats=True, **kw)
        assert _rel(got, want) < TOL
        assert np.allclose(gs.ess.numpy(), ws.ess, rtol=TOL, equal_nan=True), kw
        assert gs.n_nonpositive == ws.n_nonpositive
        assert math.isclose(gs.min_denominator, ws.min_denominator, rel_tol=1e-9) or (
            math.isnan(gs.min_denominator) and math.isnan(ws.min_denominator)), kw
    want_gemms, got_gemms = [], []
    rfa.rfa_attention(q, k, v, omega=omega, gemms=want_gemms)
    gpu.rfa_attention(torch.tensor(q), torch.tensor(k), torch.tensor(v), omega=torch.tensor(omega), gemms=got_gemms)
    assert got_gemms == want_gemms and len(want_gemms) == 4


def test_drawn_samples_have_the_reference_shapes():
    gen = np.random.default_rng(5)
    q, k, v = (torch.tensor(gen.normal(size=(2, 6, 3)) * 0.5) for _ in range(3))
    for feature_map in ("positive", "trig_cos_phase"):
        y = gpu.rfa_attention(q, k, v, num_samples=8, rng=0, feature_map=feature_map)
        assert tuple(y.shape) == (2, 6, 3) and bool(torch.isfinite(y).all())
    a = gpu.rfa_attention(q[0], k[0], v[0], num_samples=8, rng=gpu.make_generator(3, "cpu"))
    b = gpu.rfa_attention(q[0], k[0], v[0], num_samples=8, rng=gpu.make_generator(3, "cpu"))
    assert torch.equal(a, b)


BAD = [
    dict(form="softmax", feature_map="hyperbolic"),
    dict(form="algorithm", feature_map="trig_sincos"),
    dict(form="softmax", causal=True),
    dict(form="features", per_query=True),
    dict(phase=np.zeros(5)),
    dict(feature_map="trig_cos_phase"),
    dict(feature_map="trig_cos_phase", phase=np.zeros(4)),
    dict(log_ratio=np.zeros(5), feature_map="hyperbolic"),
    dict(log_ratio=np.zeros(5), form="algorithm"),
    dict(log_ratio=np.zeros(4)),
    dict(form="double_sum", gemms=[]),
    dict(form="nope"),
    dict(feature_map="nope"),
    dict(frame="nope"),
    dict(omega=np.zeros((5, 4))),
    dict(omega=np.zeros((0, 3))),
    dict(omega=None),
    dict(omega=None, num_samples=4, rng=0, per_query=True),
    dict(proposal=GaussianProposal(np.zeros(2))),
    dict(omega=np.zeros((5, 4, 3)), per_query=True),
]


@pytest.mark.parametrize("bad", BAD, ids=[",".join(f"{key}" for key in b) for b in BAD])
def test_bad_options_raise_the_reference_errors(data, bad):
    q, k, v, omega, _ = data
    kw = dict(omega=omega) | bad
    with pytest.raises((ValueError, TypeError)) as want:
        rfa.rfa_attention(q, k, v, **kw)
    tkw = {name: torch.tensor(val) if isinstance(val, np.ndarray) else val for name, val in kw.items()}
    with pytest.raises(want.type) as got:
        gpu.rfa_attention(torch.tensor(q), torch.tensor(k), torch.tensor(v), **tkw)
    assert str(got.value).replace("torch.Size(", "").replace(")", "") == str(want.value).replace(")", ""), bad
