"""Audit third-party random-feature libraries: their estimators through rfkit's claims (``rfkit audit``).

A :class:`Library` names a package (pip name, import name, the version found), its *adapters* (callables for
rfkit roles, :mod:`rfkit.validation.adapters`, or the small roles of :mod:`rfkit.validation.claims.peers` where
rfkit had none of that shape) and the *properties* that apply (registered claim ids). :func:`audit` runs those
claims with the library's adapters through the same engine (:func:`rfkit.validation.engine.validate` with
``implementations``), so verdicts, statistics and reports are those of ``rfkit validate``; :func:`audit_table`
gives the property → verdict → witness rows, and :func:`rerun_witness` re-evaluates a stored witness with the
library's adapters (as ``rfkit show ID --witness`` does with rfkit's own).

Adapters are built on demand (they import the library); seeds for libraries that draw from a global generator
(torch) come from the cell's generator, inside ``torch.random.fork_rng``, so every cell, and every witness, is
reproducible and leaves the global generator alone.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import importlib.util
import io
import math
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version

import numpy as np

from rfkit.validation.adapters import adapt

__all__ = ["Library", "LIBRARIES", "get_library", "audit", "audit_table", "format_audit_table", "rerun_witness"]


@dataclass(frozen=True)
class Library:
    """An audited library: how to install and import it, its adapters and the claims that apply."""

    name: str  #: pip name
    module: str  #: import name
    summary: str
    #: ``() -> {role: callable}``: imports the library and builds its adapters
    adapters: Callable[[], dict[str, Callable]] | None
    properties: tuple[str, ...]
    notes: str = ""
    #: How to install it, when not ``pip install <name>``
    install: str = ""

    @property
    def installed(self) -> bool:
        try:
            return importlib.util.find_spec(self.module) is not None
        except (ImportError, ValueError):
            return False

    @property
    def version(self) -> str | None:
        """The installed distribution's version (``None`` when not installed)."""
        if not self.installed:
            return None
        try:
            return version(self.name)
        except PackageNotFoundError:
            return getattr(importlib.import_module(self.module), "__version__", "unknown")

    @property
    def install_command(self) -> str:
        return self.install or f"pip install {self.name}"

    @property
    def status(self) -> str:
        if not self.installed:
            return f"not installed ({self.install_command})"
        return f"installed {self.version}" + ("" if self.properties else " (no adapters yet)")


def _seed(rng) -> int:
    return int(np.random.default_rng(rng).integers(2**62))


@contextlib.contextmanager
def _quiet():
    """Silence a library's import-time and call-time deprecation chatter (warnings and prints)."""
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        yield


# ------------------------------------------------------------------------------------------ performer-pytorch

#: performer-pytorch's ``softmax_kernel`` default ``eps`` (added to every feature after the stabilising shift).
PERFORMER_KERNEL_EPS = 1e-4


def _performer_adapters() -> dict[str, Callable]:
    import torch

    with _quiet():
        from performer_pytorch import performer_pytorch as peer

    def heads(a):
        return np.asarray(a).reshape((-1, 1) + np.shape(a)[-2:])

    def linear_attention(q_features, k_features, v, *, causal):
        """``linear_attention`` role: its ``linear_attention`` / ``causal_linear_attention_noncuda`` (dense)."""
        fn = peer.causal_linear_attention_noncuda if causal else peer.linear_attention
        out = adapt(fn, backend="torch")(heads(q_features.dense()), heads(k_features.dense()), heads(v))
        return out.reshape(q_features.values.shape[:-1] + (np.shape(v)[-1],))

    def orthogonal_projection(m, d, *, rng, size=None, norms="chi", dtype=np.float64):
        """``orthogonal_projection`` role: ``gaussian_orthogonal_random_matrix(m, d, scaling=0)`` (chi norms), run
        with torch's default dtype set to float64 (its float32 default would fail the orthogonality part on
        round-off alone, hiding what the law's part measures)."""
        if norms != "chi":
            raise ValueError("performer-pytorch's scaling=0 gives chi norms only")
        per_call = max(1, 512 // m) if m % d == 0 else 1  # whole blocks only: several draws in one call
        count = 1 if size is None else size
        default = torch.get_default_dtype()
        with torch.random.fork_rng():
            torch.manual_seed(_seed(rng))
            torch.set_default_dtype(torch.float64)  # its torch.randn follows the default dtype: sample in float64
            try:
                rows = torch.cat([peer.gaussian_orthogonal_random_matrix(per_call * m, d, scaling=0)
                                  for _ in range(-(-count // per_call))])
            finally:
                torch.set_default_dtype(default)
        draws = rows.double().numpy().reshape(-1, m, d)[:count].astype(dtype)
        return draws[0] if size is None else draws

    def positive_features(x, omega):
        """``feature_map.positive`` role: ``softmax_kernel(x·d^{1/4}, W, is_query=True)`` times ``exp(shift)``.

        ``softmax_kernel`` is ``m^{-1/2}(exp(ωᵀx - ‖x‖²/2 - shift) + eps)`` after its own ``d^{-1/4}`` scaling
        (undone here), with ``shift`` the row maximum of ``ωᵀx``; multiplying by ``exp(shift)`` (a per-row constant,
        which cancels in attention) gives ``m^{-1/2}exp(ωᵀx - ‖x‖²/2) + eps·exp(shift)/√m``: rfkit's positive map
        plus the library's ``eps`` term, on the scale of ``exp(xᵀy)``.
        """
        x = np.asarray(x, dtype=np.float64)
        omega = np.asarray(omega, dtype=np.float64)
        d = x.shape[-1]
        flat = torch.as_tensor(x.reshape(1, 1, -1, d) * d ** 0.25)
        with _quiet(), torch.no_grad():
            f = peer.softmax_kernel(flat, projection_matrix=torch.as_tensor(omega), is_query=True,
                                    eps=PERFORMER_KERNEL_EPS).numpy()
        shift = (x.reshape(-1, d) @ omega.T).max(axis=-1, keepdims=True)
        return (f.reshape(-1, omega.shape[0]) * np.exp(shift)).reshape(x.shape[:-1] + (omega.shape[0],))

    def fast_attention(q, k, v, *, omega, causal):
        """``favor.fixed_projection`` role: ``FastAttention(dim_heads=d, nb_features=m, causal)`` with its
        projection buffer replaced by ``omega`` (float64); CPU causal path ``causal_linear_attention_noncuda``."""
        omega = torch.as_tensor(np.asarray(omega, dtype=np.float64))
        with _quiet(), torch.random.fork_rng(), torch.no_grad():
            module = peer.FastAttention(dim_heads=omega.shape[1], nb_features=omega.shape[0], causal=causal)
            module.projection_matrix = omega
            out = module(*(torch.as_tensor(np.asarray(a, dtype=np.float64))[None, None] for a in (q, k, v)))
        return out[0, 0].numpy()

    def fast_attention_float32(q, k, v, *, omega, causal):
        """``favor.fixed_projection.float32`` role: the same ``FastAttention`` in float32 (torch's default dtype,
        the library's own use): float32 projection buffer and inputs."""
        omega = torch.as_tensor(np.asarray(omega, dtype=np.float32))
        with _quiet(), torch.random.fork_rng(), torch.no_grad():
            module = peer.FastAttention(dim_heads=omega.shape[1], nb_features=omega.shape[0], causal=causal)
            module.projection_matrix = omega
            out = module(*(torch.as_tensor(np.asarray(a, dtype=np.float32))[None, None] for a in (q, k, v)))
        return out[0, 0].numpy()

    return {"linear_attention": linear_attention, "orthogonal_projection": orthogonal_projection,
            "feature_map.positive": positive_features, "favor.fixed_projection": fast_attention,
            "favor.fixed_projection.float32": fast_attention_float32}


# ------------------------------------------------------------------------------------------------ scikit-learn


def _sklearn_adapters() -> dict[str, Callable]:
    from sklearn.kernel_approximation import PolynomialCountSketch, RBFSampler

    def rbf_sampler(x, *, gamma, m, rng, size):
        """``rff.phase`` role: ``RBFSampler(gamma, n_components=m·size).fit(x).transform(x)``, split into ``size``
        draws of ``m`` features (its columns are iid: ``W ~ N(0, 2γ)``, ``b ~ U[0, 2π]`` per column) and each
        rescaled from ``√(2/(m·size))`` to its own ``√(2/m)``."""
        x = np.asarray(x, dtype=np.float64)
        sampler = RBFSampler(gamma=gamma, n_components=m * size, random_state=_seed(rng) % 2**32).fit(x)
        z = sampler.transform(x).reshape(x.shape[0], size, m) * math.sqrt(size)
        return z.transpose(1, 0, 2)

    def polynomial_count_sketch(x, *, gamma, degree, coef0, m, rng, size):
        """``poly_sketch`` role: ``PolynomialCountSketch(gamma, degree, coef0, n_components=m)`` fitted once per draw
        (its hashes couple all components, so draws cannot share one fit)."""
        x = np.asarray(x, dtype=np.float64)
        seeds = np.random.default_rng(_seed(rng)).integers(2**31, size=size)
        return np.stack([PolynomialCountSketch(gamma=gamma, degree=degree, coef0=coef0, n_components=m,
                                               random_state=int(s)).fit(x).transform(x) for s in seeds])

    return {"rff.phase": rbf_sampler, "poly_sketch": polynomial_count_sketch}


# ----------------------------------------------------------------------------------------------------- GPyTorch


def _gpytorch_adapters() -> dict[str, Callable]:
    import torch
    from gpytorch.kernels import RFFKernel

    def rff_kernel(x, *, gamma, m, rng, size):
        """``rff.paired`` role: ``RFFKernel(num_samples=m·size)`` with lengthscale ``ℓ = (2γ)^{-1/2}`` (its kernel is
        ``exp(-‖Δ‖²/(2ℓ²))``); its ``_featurize`` gives ``[cos(Wx/ℓ) | sin(Wx/ℓ)]``, split into ``size`` draws of
        ``m`` frequencies, each normalised by its own ``m^{-1/2}`` (as ``forward`` normalises by
        ``num_samples^{-1/2}``)."""
        x = np.asarray(x, dtype=np.float64)
        with torch.random.fork_rng(), torch.no_grad():
            torch.manual_seed(_seed(rng))
            kernel = RFFKernel(num_samples=m * size, num_dims=x.shape[-1]).double()
            kernel.lengthscale = math.sqrt(0.5 / gamma)
            z = kernel._featurize(torch.as_tensor(x), normalize=False).numpy()
        z = z.reshape(x.shape[0], 2, size, m).transpose(2, 0, 1, 3).reshape(size, x.shape[0], 2 * m)
        return z / math.sqrt(m)

    return {"rff.paired": rff_kernel}


# --------------------------------------------------------------------------------------- rfkit (the reference)


def _rfkit_adapters() -> dict[str, Callable]:
    from rfkit.estimators import orthogonal_projection, positive_features
    from rfkit.estimators.kernel_features import polynomial_maclaurin_features, random_phase_features
    from rfkit.validation.claims import peers

    return {"rff.phase": random_phase_features, "rff.paired": peers.rfkit_rff_paired,
            "poly_sketch": polynomial_maclaurin_features,
            "favor.fixed_projection": peers.rfkit_favor_fixed,
            "favor.fixed_projection.float32": peers.rfkit_favor_fixed_float32,
            "orthogonal_projection": orthogonal_projection, "feature_map.positive": positive_features}


_FAVOR_PROPERTIES = ("core.features.positive_exact_opposite", "core.favor.exact_given_projection",
                     "core.favor.no_future_leak", "core.orf.haar_law", "core.favor.float32_forward_error")
_RFF_PHASE = ("core.rff.phase.unbiased", "core.rff.phase.variance")
_RFF_PAIRED = ("core.rff.paired.unbiased", "core.rff.paired.variance")

#: The audited libraries, by pip name (``rfkit audit --list``).
LIBRARIES: dict[str, Library] = {lib.name: lib for lib in (
    Library("performer-pytorch", "performer_pytorch",
            "Performer FAVOR+ in PyTorch: softmax_kernel features, gaussian_orthogonal_random_matrix, FastAttention "
            "(bidirectional and causal), linear_attention", _performer_adapters,
            _FAVOR_PROPERTIES[:3] + ("core.linear_attention.exact", "core.orf.haar_law",
                                     "core.favor.float32_forward_error")),
    Library("scikit-learn", "sklearn", "kernel_approximation.RBFSampler: random Fourier features with a random "
            "phase; PolynomialCountSketch: TensorSketch of the polynomial kernel", _sklearn_adapters,
            _RFF_PHASE + ("core.poly.sketch_unbiased",),
            notes="PolynomialCountSketch is fitted once per draw: its property takes ~1 min at smoke"),
    Library("gpytorch", "gpytorch", "kernels.RFFKernel: paired cos/sin random Fourier features of the RBF kernel",
            _gpytorch_adapters, _RFF_PAIRED),
    Library("pytorch-fast-transformers", "fast_transformers", "feature_maps.Favor (FAVOR+ feature map)", None, (),
            notes="no adapter yet; PyPI has only an sdist whose build imports torch and compiles C++ extensions",
            install="pip install --no-build-isolation pytorch-fast-transformers"),
    Library("pyrfm", "pyrfm.random_feature", "random feature maps (RandomFourier, RandomMaclaurin, TensorSketch, ...)",
            None, (), notes="no adapter yet; not on PyPI (the PyPI package 'pyrfm' is an unrelated PDE solver)",
            install="pip install git+https://github.com/neonnnnn/pyrfm"),
    Library("rfkit", "rfkit", "rfkit's own estimators through the same adapters (the reference: nothing should be "
            "refuted)", _rfkit_adapters, _RFF_PHASE + _RFF_PAIRED + ("core.poly.sketch_unbiased",) + _FAVOR_PROPERTIES),
)}


def get_library(name: str) -> Library:
    """The audited library ``name`` (pip or import name); ``KeyError`` listing them otherwise."""
    for lib in LIBRARIES.values():
        if name in (lib.name, lib.module):
            return lib
    raise KeyError(f"unknown library {name!r}; audited libraries: {', '.join(LIBRARIES)}")


def _ready(library: str | Library) -> Library:
    lib = library if isinstance(library, Library) else get_library(library)
    if not lib.installed:
        raise ModuleNotFoundError(f"{lib.name} is not installed: {lib.install_command}")
    if lib.adapters is None or not lib.properties:
        raise ValueError(f"{lib.name}: no adapters yet ({lib.notes or 'nothing to audit'})")
    return lib


def audit(library: str | Library, tier: str = "smoke", seed: int = 0, *,
          implementations: Mapping[str, Callable] | None = None, properties: Sequence[str] | None = None,
          **options):
    """Run ``library``'s properties with its adapters through the engine; returns the
    :class:`~rfkit.validation.results.RunResult` (``options`` go to :func:`~rfkit.validation.engine.validate`).

    ``implementations`` replaces or adds adapters (e.g. to audit a patched adapter); ``properties`` runs a subset
    of the library's properties.
    """
    from rfkit.validation.claims import get_claim
    from rfkit.validation.engine import validate

    lib = _ready(library)
    chosen = lib.properties if properties is None else tuple(properties)
    unknown = sorted(set(chosen) - set(lib.properties))
    if unknown or not chosen:
        raise ValueError(f"{lib.name}: {unknown or 'no'} propert(ies) to run; its properties: {lib.properties}")
    adapters = {**lib.adapters(), **(implementations or {})}
    claims = [get_claim(cid) for cid in chosen]
    options.setdefault("progress", False)
    return validate(claims, tier=tier, seed=seed, implementations=adapters, **options)


def _witness_text(witness: dict | None) -> str:
    if not witness:
        return ""
    where = ", ".join(f"{k}={v}" for k, v in witness["params"].items()) or "the single cell"
    return (f"{where} ({witness['kind']}, seed {witness['seed']}): violation {witness['effect']:.3g} (estimate "
            f"{witness['estimate']:.4g}, prediction {witness['prediction']:.4g}; {witness['method']}), adjusted p "
            f"{witness['p_adjusted']:.3g}")


def audit_table(run) -> list[dict]:
    """Property → verdict → witness rows of an audit run (one per claim)."""
    return [dict(property=c.claim.id, verdict=c.verdict, tolerance=f"{c.claim.tolerance:g} {c.claim.units}".strip(),
                 witness=_witness_text(c.witness) + (f"; holds on {c.holds_on}" if c.witness and c.holds_on else ""),
                 reason=c.reason) for c in run.claims]


def format_audit_table(rows: list[dict], library: Library | None = None) -> str:
    """The rows as a markdown table (headed by the library and its version when given)."""
    def cell(text):
        return str(text).replace("|", "\\|").replace("\n", " ")

    lines = [f"### {library.name} {library.version or ''}".rstrip(), ""] if library else []
    lines += ["| property | verdict | witness (refuted) or reason |", "|---|---|---|"]
    lines += [f"| `{r['property']}` | {r['verdict']} | {cell(r['witness'] or r['reason'])} |" for r in rows]
    return "\n".join(lines)


def rerun_witness(library: str | Library, claim_id: str, witness: dict):
    """Re-evaluate a stored witness cell with the library's adapters; returns the
    :class:`~rfkit.validation.cells.CellOutcome` (compare its evidence with the stored fields)."""
    from rfkit.validation.cells import run_cell, spec_from_witness
    from rfkit.validation.claims import get_claim

    lib = _ready(library)
    spec = spec_from_witness(witness, get_claim(claim_id))
    return run_cell(dataclasses.replace(spec, implementations=lib.adapters()))
