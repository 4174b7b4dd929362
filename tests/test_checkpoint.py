"""Cell checkpoints: a resumed run skips the stored cells and ends with the same evidence as one uninterrupted run;
a checkpoint from other settings is refused; cells of a claim whose code (its modules, rfkit.validation.cells and
whatever they import) changed are rerun; a record cut short by a kill is dropped, not misread."""

from __future__ import annotations

import pickle

import pytest

from rfkit.validation import checkpoint as ckpt_mod
from rfkit.validation import validate
from rfkit.validation.checkpoint import CheckpointMismatch, claim_digest
from rfkit.validation.claims import get_claim
from rfkit.validation.cli import main
from rfkit.validation.model import Claim

CALLS: list[dict] = []


def _normal_cell(ctx):
    CALLS.append(dict(ctx.params))
    sd = ctx.params["sd"]
    return ctx.mean(lambda rng, n: rng.normal(0.0, sd, n), 0.0, sd=sd)


def _claim():
    # sd 3.0 is undecided at its planned 20,000 replicates, so the engine extends it: both phases are checkpointed
    grid = dict(sd=[0.2, 0.3, 3.0])
    return Claim(id="core.toy.checkpoint", paper="core", source="test", statement="E X = 0", kind="expectation",
                 hypotheses="toy", tolerance=0.05, cell=_normal_cell, grid={"smoke": grid, "quick": grid},
                 replicates=20_000)


def _run(path, resume=False, **kw):
    kw = dict(dict(tier="quick", seed=0, progress=False), **kw)
    return validate([_claim()], checkpoint=path, resume=resume, **kw).claims[0]


def test_resume_skips_stored_cells_and_reproduces_the_run(tmp_path):
    path = tmp_path / "cells.ckpt"
    CALLS.clear()
    first = _run(path)
    assert len(CALLS) == 4  # three grid cells and one extension of sd = 3
    CALLS.clear()
    again = _run(path, resume=True)
    assert CALLS == []
    assert [o.evidence for o in again.outcomes] == [o.evidence for o in first.outcomes]
    assert again.verdict == first.verdict and again.seconds == pytest.approx(first.seconds)
    assert again.cpu_seconds == pytest.approx(first.cpu_seconds) and first.cpu_seconds > 0


def test_cells_of_a_claim_whose_code_changed_are_rerun(tmp_path, monkeypatch):
    path = tmp_path / "cells.ckpt"
    _run(path)
    monkeypatch.setattr(ckpt_mod, "claim_digest", lambda claim, backend: "edited claim module")
    CALLS.clear()
    validate([_claim()], checkpoint=path, resume=True, tier="quick", seed=0, progress=False)
    assert len(CALLS) == 4


def test_interrupted_run_resumes_where_it_stopped(tmp_path):
    path = tmp_path / "cells.ckpt"
    whole = _run(tmp_path / "whole.ckpt")
    _run(path)
    records = _records(path)
    # keep the header and the first grid cell, then half of the second record's bytes (a kill mid-write)
    blob = b"".join(pickle.dumps(r) for r in records[:2]) + pickle.dumps(records[2])[:20]
    path.write_bytes(blob)
    CALLS.clear()
    resumed = _run(path, resume=True)
    assert len(CALLS) == 3  # the two grid cells not stored whole, and the extension
    assert [o.evidence for o in resumed.outcomes] == [o.evidence for o in whole.outcomes]
    assert len(_records(path)) == len(records)  # the torn record was replaced, not followed


def test_other_settings_are_refused(tmp_path):
    path = tmp_path / "cells.ckpt"
    _run(path)
    with pytest.raises(CheckpointMismatch, match="seed"):
        _run(path, resume=True, seed=1)
    with pytest.raises(CheckpointMismatch, match="tier"):
        _run(path, resume=True, tier="smoke")


def test_without_resume_the_checkpoint_starts_afresh(tmp_path):
    path = tmp_path / "cells.ckpt"
    _run(path)
    CALLS.clear()
    _run(path, seed=1)
    assert len(CALLS) == 4
    assert _records(path)[0]["seed"] == 1


def test_claim_digest_follows_the_claim_modules_it_imports(monkeypatch):
    fa, block = get_claim("performer.eq4.fa_identity"), get_claim("performer.b2.block_orf")
    assert claim_digest(fa) == claim_digest(fa) != claim_digest(block)
    seen = ckpt_mod._closure(frozenset({"rfkit.validation.claims.performer.outputs", ckpt_mod.CELLS}))
    assert "rfkit.validation.claims.performer.common" in seen  # imported by outputs
    assert {"rfkit.estimators.features", "rfkit.validation.stats", "rfkit.theory.softmax"} <= seen
    assert "rfkit.validation.claims.performer.beautiful" not in seen  # a sibling it does not import
    assert not {"rfkit.validation.report", "rfkit.validation.cli", "rfkit.validation.plan"} & seen
    # verdict logic, results and progress are not cell code: editing them keeps stored cells
    assert not {"rfkit.validation.engine", "rfkit.validation.results", "rfkit.validation.progress"} & seen
    # an edit of an imported module changes the digest of the claims that import it, not of the others
    orf, unrelated = get_claim("performer.fig4.orf_vs_iid"), get_claim("lara.eq8.mis_unbiased")
    before = claim_digest(orf), claim_digest(unrelated)
    real = ckpt_mod._source
    monkeypatch.setattr(ckpt_mod, "_source", lambda name: real(name) + b"#" * name.endswith("performer.common"))
    assert claim_digest(orf) != before[0] and claim_digest(unrelated) == before[1]
    monkeypatch.setattr(ckpt_mod, "_source", lambda name: real(name) + b"#" * name.endswith("estimators.features"))
    assert claim_digest(orf) != before[0]  # shared code the claim imports


def test_claim_digest_follows_a_reexported_name_to_the_module_that_defines_it(monkeypatch):
    """``from rfkit.estimators import favor_features`` runs estimators/favor.py (and what it imports), not every
    module the package re-exports: an edit of FAVOR+ reruns the claims that use it, not EVA's or LARA's. (Before, the
    package counted whole, and one estimator edit made every stored cell of every paper stale.)"""
    favor, lara = get_claim("performer.alg1.bidirectional"), get_claim("lara.eq8.mis_unbiased")
    assert "rfkit.estimators.favor" in ckpt_mod.claim_modules(favor)
    assert "rfkit.estimators" not in ckpt_mod.claim_modules(favor)
    assert ckpt_mod._defining_module("rfkit.estimators", "favor_features") == "rfkit.estimators.favor"
    assert ckpt_mod._defining_module("rfkit.estimators", "NumericalError") == "rfkit.base.checks"
    assert ckpt_mod._defining_module("rfkit.estimators", "lara") == "rfkit.estimators.lara"  # a submodule
    before = claim_digest(favor), claim_digest(lara)
    real = ckpt_mod._source
    monkeypatch.setattr(ckpt_mod, "_source", lambda name: real(name) + b"#" * (name == "rfkit.estimators.favor"))
    assert claim_digest(favor) != before[0] and claim_digest(lara) == before[1]


def test_a_package_init_that_runs_code_counts_whole(tmp_path, monkeypatch):
    """Only an ``__init__`` made of imports (and its docstring and ``__all__``) is seen through: one that runs
    anything else counts with all it imports."""
    pkg = tmp_path / "rfkit_probe_pkg"
    pkg.mkdir()
    (pkg / "impl.py").write_text("def f():\n    return 1\n")
    (pkg / "__init__.py").write_text('"""doc"""\nfrom .impl import f\n__all__ = ["f"]\n')
    monkeypatch.syspath_prepend(str(tmp_path))
    ckpt_mod._reexports.cache_clear(), ckpt_mod._source.cache_clear()
    assert ckpt_mod._reexports("rfkit_probe_pkg") == {"f": ("rfkit_probe_pkg.impl", "f")}
    (pkg / "__init__.py").write_text('from .impl import f\nf.cache = {}\n')
    ckpt_mod._reexports.cache_clear(), ckpt_mod._source.cache_clear()
    assert ckpt_mod._reexports("rfkit_probe_pkg") == {}
    ckpt_mod._reexports.cache_clear(), ckpt_mod._source.cache_clear()


def test_the_torch_role_table_counts_only_for_torch_cells():
    claim = get_claim("lara.eq8.mis_unbiased")
    assert ckpt_mod.BACKENDS not in ckpt_mod.claim_modules(claim)
    assert ckpt_mod.BACKENDS in ckpt_mod.claim_modules(claim, "torch")
    assert claim_digest(claim) != claim_digest(claim, "torch")


def test_resume_needs_a_checkpoint_and_refuses_third_party_code(tmp_path):
    with pytest.raises(ValueError, match="resume needs"):
        validate([_claim()], tier="quick", progress=False, resume=True)
    with pytest.raises(ValueError, match="third-party"):
        validate([_claim()], tier="quick", progress=False, checkpoint=tmp_path / "c", implementations={"x": abs})


def test_cli_resume_and_mismatch(tmp_path, capsys):
    out = str(tmp_path / "out")
    args = ["validate", "--claim", "performer.eq4.fa_identity", "--tier", "smoke", "--out", out, "--quiet",
            "--no-figures"]
    assert main(args) in (0, 1)
    assert main(args + ["--resume"]) in (0, 1)
    assert main([*args[:4], "quick", *args[5:], "--resume"]) == 2
    assert "other tier" in capsys.readouterr().err


def _records(path):
    records = []
    with open(path, "rb") as f:
        while True:
            try:
                records.append(pickle.load(f))
            except EOFError:
                return records


def test_no_claim_digest_covers_the_engine_or_its_reports():
    """A claim's code digest covers what its cells import; the engine, the checkpoint, results, figures and the
    reports are none of that, so editing them leaves a full-tier run's stored cells valid. (The papers'
    reproductions imported figures.py for one drawing helper, and through results' type hints the engine: an
    engine edit made 33 claims' stored cells stale, lara's Figure 1 among them.)"""
    from rfkit.validation.checkpoint import claim_modules
    from rfkit.validation.claims import all_claims

    outside = {f"rfkit.validation.{name}" for name in ("engine", "checkpoint", "results", "figures", "progress",
                                                       "report", "readme", "site", "plan", "cli")}
    for claim in all_claims():
        assert not outside & set(claim_modules(claim)), (claim.id, sorted(outside & set(claim_modules(claim))))


def test_changed_claims_lists_the_claims_whose_code_changed_since_their_cells_ran(tmp_path, monkeypatch):
    out = tmp_path / "out"
    args = ["validate", "--claim", "performer.eq4.fa_identity", "--tier", "smoke", "--out", str(out), "--quiet",
            "--no-figures"]
    assert main(args) in (0, 1)
    assert ckpt_mod.changed_claims(out / "cells.ckpt") == []
    real = ckpt_mod._source
    monkeypatch.setattr(ckpt_mod, "_source", lambda name: real(name) + b"#" * (name == "rfkit.estimators.attention"))
    assert ckpt_mod.changed_claims(out / "cells.ckpt") == ["performer.eq4.fa_identity"]
    # a resumed run reruns the stale cells and appends them after the old ones: its claims are today's again (the
    # performer full block once listed 77 claims as changed, from the records its resume had superseded)
    monkeypatch.setattr(ckpt_mod, "_DIGESTS", {})  # the run's digest cache: this process saw the old code
    assert main(args + ["--resume"]) in (0, 1)
    assert ckpt_mod.changed_claims(out / "cells.ckpt") == []
    _run(tmp_path / "toy.ckpt")  # a claim that is not in the registry (any more) counts as changed
    assert ckpt_mod.changed_claims(tmp_path / "toy.ckpt") == ["core.toy.checkpoint"]
