"""`rfkit validate / show` end to end: outputs, exit statuses, bad input, witness re-evaluation."""

import json

import pytest

from rfkit.estimators import projections as proj_mod
from rfkit.validation.claims import all_claims
from rfkit.validation.cli import main

SMOKE_SUBSET = ["core.is.unbiased", "core.linear_attention.exact", "core.ess.range"]


#: The registry's papers: the whole smoke tier runs one paper per test, so that test workers share it (one run of
#: every claim took ~580 s on one worker, the suite's longest test by 5x).
PAPERS = sorted({claim.paper for claim in all_claims()})


@pytest.mark.parametrize("paper", PAPERS)
def test_validate_smoke_writes_every_output(tmp_path, capsys, paper):
    out = tmp_path / "out"
    assert main(["validate", "--paper", paper, "--tier", "smoke", "--out", str(out), "--latex", "--quiet"]) == 0
    doc = json.loads((out / "verdicts.json").read_text())
    assert {"rfkit_version", "seed", "tier", "created", "claims"} <= set(doc)
    assert doc["tier"] == "smoke" and doc["seed"] == 0
    assert {entry["id"] for entry in doc["claims"]} == {c.id for c in all_claims() if c.paper == paper}
    for entry in doc["claims"]:
        keys = {"id", "paper", "kind", "verdict", "variants", "witness", "resolution", "cells", "seconds", "reason"}
        assert keys <= set(entry)
        assert entry["verdict"] in ("supported", "refuted", "inconclusive")
        assert (out / "results" / f"{entry['id']}.nc").exists()
        # claims without cells (untestable here) have no figure
        assert (out / "figures" / f"{entry['id']}.png").exists() or entry["cells"] == 0
    for name in ("report.md", "report.html", "verdicts.tex"):
        assert (out / name).stat().st_size > 0
    assert "seed 0" in (out / "verdicts.tex").read_text()
    assert capsys.readouterr().out == ""  # --quiet


def test_validate_prints_the_table(tmp_path, capsys):
    assert main(["validate", "--claim", *SMOKE_SUBSET, "--tier", "smoke", "--out", str(tmp_path),
                 "--no-figures"]) == 0
    printed = capsys.readouterr().out
    assert all(cid in printed for cid in SMOKE_SUBSET) and "supported" in printed
    # the per-claim timing summary at the end: total, per paper, the slowest claims
    summary = next(line for line in printed.splitlines() if line.startswith("time: "))
    assert f"in {len(SMOKE_SUBSET)} claims" in summary and "slowest: " in summary


@pytest.mark.parametrize(("argv", "message"), [
    (["validate", "--claim", "core.no.such"], "unknown claim id"),
    (["validate", "--paper", "nature"], "unknown paper"),
    (["show", "core.no.such"], "unknown claim id"),
    (["list", "--paper", "nature"], "unknown paper"),
    (["validate", "--workers", "0", "--claim", "core.ess.range"], "--workers"),
])
def test_bad_input_exits_2_with_a_message(argv, message, capsys):
    assert main(argv) == 2
    assert message in capsys.readouterr().err


def test_unknown_tier_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["validate", "--tier", "huge"])
    assert exc.value.code == 2 and "invalid choice" in capsys.readouterr().err


def test_unwritable_out_exits_2(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert main(["validate", "--claim", "core.ess.range", "--tier", "smoke", "--out", str(blocker / "x")]) == 2
    assert "cannot write" in capsys.readouterr().err


def test_fail_on_and_witness_round_trip(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(proj_mod, "_sign_fix", lambda q, r: q)  # planted bug: ORF not Haar
    args = ["validate", "--claim", "core.orf.haar_law", "--tier", "smoke", "--out", str(tmp_path), "--quiet",
            "--no-figures"]
    assert main(args) == 0
    assert main(args + ["--fail-on", "refuted"]) == 1
    assert main(args + ["--fail-on", "inconclusive"]) == 1
    capsys.readouterr()
    assert main(["show", "core.orf.haar_law", "--witness", "--out", str(tmp_path)]) == 0
    printed = capsys.readouterr().out
    assert "refuted" in printed and "reproduced exactly" in printed


def test_show_describes_a_claim(capsys):
    assert main(["show", "core.features.unbiased"]) == 0
    printed = capsys.readouterr().out
    assert "statement" in printed and "tier quick" in printed and "feature_map.positive" in printed
