"""The per-kind claim figures (rfkit.validation.figures): each kind draws from a real smoke run without warnings,
writes non-empty PNG and SVG, and has the structure that makes its argument; planted bugs are caught."""

from __future__ import annotations

import pickle
import warnings

import matplotlib

matplotlib.use("Agg")
import matplotlib.axes  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from rfkit.validation.claims import get_claim  # noqa: E402
from rfkit.validation.engine import validate  # noqa: E402
from rfkit.validation.figures import claim_figure, draw_figure, figure_spec, render_figure  # noqa: E402
from rfkit.validation.model import Claim  # noqa: E402
from rfkit.validation.results import cell_verdict  # noqa: E402
from rfkit.validation.stats import binomial_test, exact_test, slope_test  # noqa: E402

#: One fast smoke claim per kind (each under ~1.5 s), with a verdict that exercises the figure.
CLAIMS = {
    "expectation": "macformer.thm1.rmfa_unbiased",     # refuted by a search witness, flagged cells
    "moment": "performer.lemma2.mse_pos",               # supported
    "rate": "core.snis.bias_rate",                      # slope cells carrying their points
    "tail-bound": "performer.lemma4.iid_chernoff",      # binomial and closed-form margin cells
    "inequality": "performer.lemma2.hyp_vs_pos_2m",     # refuted, grid witness
    "identity": "performer.alg1.unidirectional",        # refuted, errors spanning decades
    "complexity": "lara.sec2_2.rfa_linear_complexity",  # flop counts, traced memory, CPU time
    "reproduction": "performer.fig2.critical_region",
}


def _binomial_claim() -> Claim:
    """A hand-built tail bound whose cells are all binomial: exceedances of a fair coin against bounds 0.4-0.6."""
    def cell(ctx):
        n = 2000
        return binomial_test(int(ctx.rng.binomial(n, 0.5)), n, ctx.params["bound"], **ctx.test)

    return Claim(id="core.test.coin_tail", source="test", statement="P(heads) <= bound", kind="tail-bound",
                 tolerance=0.02, cell=cell, plot_x="bound",
                 grid={t: dict(bound=[0.4, 0.5, 0.6]) for t in ("smoke", "quick", "full")})


@pytest.fixture(scope="module")
def results():
    out = {kind: validate([get_claim(cid)], tier="smoke", progress=False).claims[0] for kind, cid in CLAIMS.items()}
    out["binomial"] = validate([_binomial_claim()], tier="smoke", progress=False).claims[0]
    return out


def _figure(result):
    spec = figure_spec(result)
    assert spec is not None
    return spec, render_figure(spec)


def _labels(fig) -> set[str]:
    return {label for ax in fig.axes for label in ax.get_legend_handles_labels()[1]}


def _band(ax, prefix: str) -> tuple[float, float] | None:
    """The y extent of ``ax``'s shaded patch whose label starts with ``prefix`` (None without one)."""
    for patch in ax.patches:
        if str(patch.get_label()).startswith(prefix):
            y = patch.get_patch_transform().transform(patch.get_path().vertices)[:, 1]
            return float(y.min()), float(y.max())
    return None


def _loglog(fig) -> bool:
    return any(ax.get_xscale() == "log" and ax.get_yscale() == "log" for ax in fig.axes)


@pytest.mark.parametrize("kind", [*CLAIMS, "binomial"])
def test_every_kind_draws_png_and_svg_without_warnings(results, kind, tmp_path):
    result = results[kind]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        backend = matplotlib.get_backend()
        assert claim_figure(result, tmp_path / "f.png")
    assert plt.get_fignums() == [] and matplotlib.get_backend() == backend  # drawn outside pyplot
    assert (tmp_path / "f.png").stat().st_size > 5000
    svg = (tmp_path / "f.svg").read_text()
    assert svg.lstrip().startswith("<?xml") and "<svg" in svg
    spec, fig = _figure(result)
    try:
        assert fig._suptitle.get_text() == f"{result.claim.id}: {result.verdict}"
        captions = [t.get_text() for t in fig.texts]
        assert any("Colour: cell verdict" in t for t in captions)  # a caption says what is drawn
        assert fig.legends and all(not ax.get_legend() for ax in fig.axes)  # one legend, outside the data
    finally:
        plt.close(fig)


def test_the_spec_is_picklable_plain_data(results, tmp_path):
    spec = pickle.loads(pickle.dumps(figure_spec(results["rate"])))
    draw_figure(spec, tmp_path / "r.png")
    assert (tmp_path / "r.png").stat().st_size > 0 and (tmp_path / "r.svg").stat().st_size > 0


def test_expectation_shades_the_tolerance_band_and_marks_the_search_witness(results):
    result = results["expectation"]
    spec, fig = _figure(result)
    try:
        tol = result.claim.tolerance
        bands = [_band(ax, "tolerance band") for ax in fig.axes]
        assert bands and all(b == pytest.approx((-tol, tol)) for b in bands)
        assert len(fig.axes) >= 2  # a panel per swept axis that matters, and the search
        assert "witness" in _labels(fig) and result.witness["kind"] == "search"
        assert {"cell: violation", "cell: flagged", "cell: ok"} <= _labels(fig)
    finally:
        plt.close(fig)


def test_panels_skip_axes_that_split_the_cells_like_an_earlier_one(results):
    # mse_pos sweeps angle, route, norm_x and norm_y together (exact route vs one Monte Carlo point): one panel
    spec, fig = _figure(results["moment"])
    try:
        names = [ax.get_xlabel() for ax in fig.axes]
        assert "angle" in names and not {"route", "norm_x", "norm_y"} & set(names)
    finally:
        plt.close(fig)


def test_rate_is_log_log_with_the_fitted_and_the_claimed_slope(results):
    spec, fig = _figure(results["rate"])
    try:
        assert _loglog(fig)
        labels = _labels(fig)
        assert any(lab.startswith("fit: slope") for lab in labels)
        assert "claimed: slope -1" in labels
        assert _band(fig.axes[1], "claimed slope") is not None or "claimed slope ± 0.25" in labels
    finally:
        plt.close(fig)


def _mixed_rate_claim(slopes: bool) -> Claim:
    """A hand-built rate claim: slope cells (``route="fit"``, when ``slopes``) beside cells judged without a fit,
    one of which (``b = 2``) is a violation."""
    def cell(ctx):
        if ctx.params["route"] == "fit":
            x = np.array([1.0, 2.0, 4.0, 8.0, 16.0])
            return slope_test(x, 1 / x, 0.01 / x, -1.0, **ctx.test)
        return exact_test(0.0, 0.1 * ctx.params["b"], tolerance=0.15)

    routes = ["fit", "closed_form"] if slopes else ["closed_form"]
    return Claim(id="core.test.mixed_rate", source="test", statement="s", kind="rate", tolerance=0.15, cell=cell,
                 grid={t: dict(route=routes, b=[1, 2]) for t in ("smoke", "quick", "full")})


@pytest.mark.parametrize("slopes", [True, False], ids=["mixed", "no_slope"])
def test_a_rate_draws_the_cells_it_judged_without_a_fit(slopes):
    # performer.b2.hg_orf_bias (no slope cell) once drew an empty slope panel; thm7's closed-form cells, its
    # violations and its witness were missing beside its slope cells
    result = validate([_mixed_rate_claim(slopes)], tier="smoke", progress=False).claims[0]
    spec, fig = _figure(result)
    try:
        def finite_points(label):  # cells drawn at a finite position (an errorbar's markers, or the witness star)
            lines = [c.lines[0] for ax in fig.axes for c in ax.containers if c.get_label() == label]
            lines += [ln for ax in fig.axes for ln in ax.get_lines() if ln.get_label() == label]
            return sum(int(np.isfinite(np.asarray(ln.get_ydata(), dtype=float)).sum()) for ln in lines)

        verdicts = [cell_verdict(result, i) for i in range(len(result.outcomes))]
        assert verdicts.count("violation") == 1  # b = 2
        assert all(finite_points(f"cell: {v}") >= verdicts.count(v) for v in set(verdicts))  # once a panel
        assert finite_points("witness") >= 1
    finally:
        plt.close(fig)


def test_complexity_is_log_log_with_the_claimed_order(results):
    spec, fig = _figure(results["complexity"])
    try:
        assert _loglog(fig) and "claimed: slope 1" in _labels(fig)
    finally:
        plt.close(fig)


def test_identity_errors_on_a_log_axis_with_the_tolerance_and_the_witness(results):
    result = results["identity"]
    spec, fig = _figure(result)
    try:
        assert all(ax.get_yscale() == "log" for ax in fig.axes)
        tol_lines = [ln for ax in fig.axes for ln in ax.get_lines() if str(ln.get_label()).startswith("tolerance")]
        assert tol_lines and np.allclose(tol_lines[0].get_ydata(), result.claim.tolerance)
        witness = [ln for ax in fig.axes for ln in ax.get_lines() if ln.get_label() == "witness"]
        assert witness and float(witness[0].get_ydata()[0]) > result.claim.tolerance
    finally:
        plt.close(fig)


@pytest.mark.parametrize("kind", ["identity", "complexity", "rate"])
def test_log_axis_labels_are_plain_text_not_mathtext(results, kind):
    # log and symlog tick labels as Unicode (10⁻², 2×10⁻¹): a mathtext label costs a pyparsing parse per draw
    from rfkit.validation.figures import _plain_tick_label

    spec, fig = _figure(results[kind])
    try:
        fig.canvas.draw()
        logs = [axis for ax in fig.axes for axis, scale in ((ax.xaxis, ax.get_xscale()), (ax.yaxis, ax.get_yscale()))
                if scale in ("log", "symlog")]
        labels = [t.get_text() for axis in logs for t in axis.get_ticklabels(which="both")]
        assert logs and any(labels) and not any("$" in t for t in labels)
    finally:
        plt.close(fig)
    assert _plain_tick_label(r"$\mathdefault{2\times10^{-13}}$") == "2×10⁻¹³"
    assert _plain_tick_label(r"$\mathdefault{-10^{3}}$") == "−10³" and _plain_tick_label("0.5") == "0.5"


def test_inequality_shades_the_violation_region_below_minus_tolerance(results):
    result = results["inequality"]
    spec, fig = _figure(result)
    try:
        tol = result.claim.tolerance
        band = _band(fig.axes[0], "violation")
        assert band is not None and band[1] == pytest.approx(-tol) and band[0] < -tol
        assert "witness" in _labels(fig)
    finally:
        plt.close(fig)


def test_tail_bound_draws_frequencies_against_the_bound(results):
    spec, fig = _figure(results["binomial"])
    try:
        ax = fig.axes[0]
        assert ax.get_yscale() == "log" and len(fig.axes) == 1  # all binomial: no margin panel
        bounds = sorted(round(float(ln.get_ydata()[0]), 6) for ln in ax.get_lines() if ln.get_color() == "black"
                        and len(ln.get_xdata()) == 2)
        assert bounds == [0.4, 0.5, 0.6]
        assert "cell: violation" in _labels(fig) and "cell: ok" in _labels(fig)  # 0.5 > 0.4 + tolerance
    finally:
        plt.close(fig)
    spec, fig = _figure(results["tail-bound"])  # mixed cells: the margin cells get panels of their own
    try:
        assert len(fig.axes) > 1 and fig.axes[0].get_yscale() == "log"
    finally:
        plt.close(fig)


def test_nothing_to_plot_is_reported(tmp_path):
    claim = Claim(id="core.test.empty_figure", source="test", statement="s", kind="identity", tolerance=0.1,
                  cell=lambda ctx: exact_test([], [], tolerance=0.1), grid={"smoke": dict(x=[1, 2])})
    result = validate([claim], tier="smoke", progress=False).claims[0]
    assert not claim_figure(result, tmp_path / "e.png") and not (tmp_path / "e.png").exists()


def test_grid_axes_named_like_figure_columns_keep_their_values(tmp_path):
    # eva.eq20.variance_expansion sweeps an axis named ``source``: it once overwrote the grid/search marker
    claim = Claim(id="core.test.source_axis", source="test", statement="s", kind="identity", tolerance=0.1,
                  cell=lambda ctx: exact_test(0.0, 0.01 * ctx.params["slope"], tolerance=0.1),
                  grid={"smoke": dict(source=["sample", "closed_form"], slope=[1, 20], curve=[0, 1])})
    result = validate([claim], tier="smoke", progress=False).claims[0]
    spec = figure_spec(result)
    assert set(spec.frame["source"]) == {"sample", "closed_form"} and set(spec.frame["slope"]) == {1, 20}
    assert claim_figure(result, tmp_path / "s.png")
    fig = render_figure(spec)
    try:
        assert {"source", "slope", "curve"} <= {ax.get_xlabel() for ax in fig.axes}
        assert "cell: violation" in _labels(fig)  # slope 20: error 0.2 > 0.1
    finally:
        plt.close(fig)


# planted bugs: the structure checks above can fail


def test_a_dropped_band_is_caught(results, monkeypatch):
    monkeypatch.setattr(matplotlib.axes.Axes, "axhspan", lambda self, *a, **k: None)
    spec, fig = _figure(results["expectation"])
    try:
        assert all(_band(ax, "tolerance band") is None for ax in fig.axes)
    finally:
        plt.close(fig)


def test_linear_axes_on_a_rate_are_caught(results, monkeypatch):
    monkeypatch.setattr(matplotlib.axes.Axes, "set_xscale", lambda self, *a, **k: None)
    spec, fig = _figure(results["rate"])
    try:
        assert not _loglog(fig)
    finally:
        plt.close(fig)


def test_a_process_pool_draws_the_same_figures(results, tmp_path):
    """draw_figures in 2 spawned workers writes byte-identical PNGs to the in-process drawing (SVGs carry a date)."""
    from rfkit.validation.figures import PARALLEL_MIN_FIGURES, draw_figures

    spec = figure_spec(next(iter(results.values())))
    jobs = [(spec, tmp_path / "pool" / f"{i}.png") for i in range(PARALLEL_MIN_FIGURES)]
    (tmp_path / "pool").mkdir()
    done = []
    draw_figures(jobs, workers=2, on_done=lambda: done.append(1))
    draw_figure(spec, tmp_path / "one.png")
    assert len(done) == len(jobs)
    assert all(path.read_bytes() == (tmp_path / "one.png").read_bytes() for _, path in jobs)
