"""One proposal protocol: every proposal class is a runtime Proposal whose sample and logpdf agree (sample means
vs the mean; logpdf integrates to 1 in d = 1 by quadrature), and log_ratio is one function for all of them."""

import numpy as np
import pytest

from rfkit.base.numerics import log_normal
from rfkit.estimators import lara, mis, ra
from rfkit.estimators.proposals import GaussianMixtureProposal, GaussianProposal, Proposal, log_ratio


def _proposals(d: int):
    rng = np.random.default_rng(0)
    q, k = 0.5 * rng.normal(size=(6, d)), 0.5 * rng.normal(size=(6, d))
    mix = GaussianMixtureProposal(rng.normal(size=(2, d)), [1.0, 0.5], [0.3, 0.7])
    return {
        "GaussianProposal": (GaussianProposal(rng.normal(size=d)), None),
        "GaussianProposal(batched, scale 0.7)": (GaussianProposal(rng.normal(size=(3, d)), 0.7), None),
        "GaussianMixtureProposal": (mix, mix.weights @ mix.means),
        "mis.GaussianProposals": (mis.GaussianProposals(rng.normal(size=(3, d))), None),
        "ra.GaussianMixtures": (ra.attention_mixture(q, k), None),
        "ra.GaussianMixtures(symmetric)": (ra.attention_mixture(q, k, feature_map="hyperbolic"), None),
        "lara.LaraProposals(eq34)": (lara.lara_proposals(q, k, 2, proposal="eq34"), None),
        "lara.LaraProposals(eq32)": (lara.lara_proposals(q, k, 2, proposal="eq32"), None),
    }


def _mean(p, given):
    if given is not None:
        return given
    return p.mean if isinstance(p, GaussianProposal) else p.mean()


NAMES = list(_proposals(1))


@pytest.mark.parametrize("name", NAMES)
def test_every_proposal_follows_the_protocol(name):
    p, given = _proposals(2)[name]
    assert isinstance(p, Proposal)
    assert p.dim == 2
    draws = p.sample(np.random.default_rng(1), 40_000)
    mean = np.broadcast_to(_mean(p, given), draws.shape[:-2] + (2,))
    assert draws.shape[-2:] == (40_000, 2)
    # every coordinate of every proposal: within 6 standard errors (sd <= 3 for these inputs)
    assert np.abs(draws.mean(axis=-2) - mean).max() < 6 * 3 / np.sqrt(40_000)
    logp = p.logpdf(draws[..., :5, :])
    assert logp.shape == draws.shape[:-2] + (5,)


@pytest.mark.parametrize("name", NAMES)
def test_logpdf_integrates_to_one_in_one_dimension(name):
    p, _ = _proposals(1)[name]
    grid = np.linspace(-40.0, 40.0, 40_001)
    batch = p.sample(np.random.default_rng(0), 1).shape[:-2]
    omega = np.broadcast_to(grid[:, None], batch + grid.shape + (1,))
    mass = np.trapezoid(np.exp(p.logpdf(omega)), grid, axis=-1)
    np.testing.assert_allclose(mass, 1.0, atol=1e-9)


@pytest.mark.parametrize("name", NAMES)
def test_log_ratio_is_one_function(name):
    p, _ = _proposals(3)[name]
    omega = p.sample(np.random.default_rng(2), 4)
    np.testing.assert_allclose(log_ratio(p, omega), log_normal(omega) - p.logpdf(omega), rtol=1e-12, atol=1e-12)


def test_families_also_give_every_density_at_every_point():
    p, _ = _proposals(2)["mis.GaussianProposals"]
    omega = p.sample(np.random.default_rng(3), 2)                          # (C, 2, D)
    cross = p.logpdf_cross(omega)                                          # (C, 2, C)
    np.testing.assert_allclose(cross[np.arange(3), :, np.arange(3)], p.logpdf(omega), atol=1e-12)
