"""`rfkit cite`: the sentence, BibTeX and commands come from a stored run (a small fake verdicts.json here, so
no validation runs), LaTeX escaping, a missing run, an unknown id, the booktabs table and the CLI entry."""

import json
import subprocess
import sys

import pytest

from rfkit.validation import cite
from rfkit.validation.claims import all_claims, closest_ids, papers
from rfkit.validation.cli import main
from rfkit.validation.engine import VERDICTS
from rfkit.validation.report import latex_table
from rfkit.validation.results import RunResult

IDS = [c.id for c in all_claims()]
#: A reason with every character LaTeX treats specially, plus math symbols.
ODD_REASON = "violation 5% & more at d_0=#1, x~y^2, {a}\\b $c$ | E[X] = ∞ ≤ Σ_t x²ᵀ — π_1^D"


def fake_run(folder, entries, **meta):
    """A verdicts.json as `rfkit validate --out folder` writes it, holding only ``entries``."""
    folder.mkdir(parents=True, exist_ok=True)
    doc = dict(rfkit_version="9.8.7", seed=11, tier="quick", alpha=1e-3, created="2031-02-03T04:05:06+00:00",
               seconds=1.0, claims=[dict(dict(paper=e["id"].split(".")[0], kind="expectation", witness=None,
                                              cells=1, reason=""), **e) for e in entries])
    doc.update(meta)
    (folder / "verdicts.json").write_text(json.dumps(doc))
    return folder


@pytest.fixture(scope="module")
def every_id_run(tmp_path_factory):
    """Every registered id with a verdict cycling through the three and a reason naming the id."""
    return fake_run(tmp_path_factory.mktemp("all"), [
        dict(id=cid, verdict=VERDICTS[i % 3], reason=f"stored reason {i} of {cid}") for i, cid in enumerate(IDS)])


def test_every_registered_id_renders_in_every_format(every_id_run):
    assert len(IDS) > 200
    for i, cid in enumerate(IDS):
        c = cite.citation(cid, every_id_run)
        sentence = cite.latex_sentence(c)
        assert sentence.startswith(rf"Claim \texttt{{{cite.latex_escape(cid)}}}")
        assert f" is {VERDICTS[i % 3]}: stored reason {i} of {cite.latex_escape(cid)} (rfkit 9.8.7, " in sentence
        assert sentence.endswith(", seed 11, tier quick).")
        paper = cite.PAPERS.get(cid.split(".")[0])
        assert (rf"\citet{{{paper.key}}}" in sentence) if paper else (r"\citet" not in sentence)
        for fmt in cite.FORMATS:
            assert cite.render(c, fmt)
        doc = json.loads(cite.render(c, "json"))
        assert doc["verdict"] == VERDICTS[i % 3] and doc["sentence"] == sentence
        assert f"rfkit validate --claim {cid} --tier quick --seed 11 --out" in doc["commands"][-1 - c.witness
                                                                                               - bool(c.figure)]


def test_the_verdict_and_reason_are_the_runs(tmp_path):
    cid = "performer.thm3.ort_tail"
    for verdict in VERDICTS:
        run = fake_run(tmp_path / verdict, [dict(id=cid, verdict=verdict, reason=f"because {verdict}-x")])
        sentence = cite.latex_sentence(cite.citation(cid, run))
        assert f" is {verdict}: because {verdict}-x (" in sentence
        assert all(f" is {v}" not in sentence for v in VERDICTS if v != verdict)


def test_the_run_metadata_pins_the_sentence_and_commands(tmp_path):
    cid = "core.is.unbiased"
    run = fake_run(tmp_path, [dict(id=cid, verdict="refuted", reason="r", witness={"seed": 3})], seed=5,
                   tier="full", alpha=0.01, commit="abc1234")
    c = cite.citation(cid, run)
    assert (c.commit, c.commit_from, c.version) == ("abc1234", "run", "9.8.7")
    assert cite.latex_sentence(c).endswith(r"(rfkit 9.8.7, commit \texttt{abc1234}, seed 5, tier full).")
    assert cite.commands(c) == ["git checkout abc1234", "pip install .  # rfkit 9.8.7",
                                f"rfkit validate --claim {cid} --tier full --seed 5 --alpha 0.01 --out rfkit-cite",
                                f"rfkit show {cid} --witness --out rfkit-cite"]
    assert "@misc{rfkit987," in cite.bibtex(c) and "git commit abc1234}" in cite.bibtex(c)


def test_a_run_without_a_commit_uses_the_checkout_and_says_so(tmp_path, monkeypatch):
    monkeypatch.setattr(cite, "source_commit", lambda: "fed4321+dirty")
    cid = "lara.fig1.mse_ordering"
    c = cite.citation(cid, fake_run(tmp_path, [dict(id=cid, verdict="supported")]))
    assert (c.commit, c.commit_from) == ("fed4321+dirty", "checkout")
    text = cite.render(c, "latex")
    assert "does not record the run's commit" in text
    assert "%   git checkout fed4321  # that checkout had local changes on top" in text
    assert "%   rfkit reproduce lara.fig1 --out rfkit-cite/reproductions" in text
    assert cite.latex_sentence(c).startswith(r"Claim \texttt{lara.fig1.mse\_ordering} of \citet{zheng2022linear}")
    assert " is supported (rfkit" in cite.latex_sentence(c)  # no reason stored: none invented


def test_latex_escape():
    assert cite.latex_escape(r"a_b 5% &c #d ~e ^f {g} $h$ \i") == (
        r"a\_b 5\% \&c \#d \textasciitilde{}e \textasciicircum{}f \{g\} \$h\$ \textbackslash{}i")
    assert cite.latex_escape("∞ ≤ x² Σ — ‖") == (
        r"\ensuremath{\infty} \ensuremath{\le} x\ensuremath{^2} \ensuremath{\Sigma} --- \ensuremath{\|}")
    assert cite.latex_escape("a|b<c") == r"a\textbar{}b\textless{}c"
    assert cite.unicode_left("ζ ∞ é ζ") == ["ζ", "é"]
    with pytest.raises(TypeError, match="needs a str"):
        cite.latex_escape(None)


def test_the_sentence_escapes_the_stored_reason(tmp_path):
    cid = "eva.eq21.coefficient_consistency"
    c = cite.citation(cid, fake_run(tmp_path, [dict(id=cid, verdict="refuted", reason=ODD_REASON + "; second")]))
    sentence = cite.latex_sentence(c)
    assert rf": {cite.latex_escape(ODD_REASON)} (rfkit" in sentence  # the summary: the worst case's first clause
    body = sentence.replace(r"\%", "").replace(r"\&", "").replace(r"\#", "").replace(r"\$", "")
    assert not any(ch in body for ch in "%&#$")  # every special character escaped
    assert sentence.count("{") == sentence.count("}")
    assert "second" not in sentence and "shortened" in cite.render(c, "text")


@pytest.mark.parametrize("where", ["nothing", "other_claim", "not_json"])
def test_missing_run_says_so_and_names_the_command(tmp_path, where):
    cid = "core.ess.range"
    if where == "other_claim":
        fake_run(tmp_path, [dict(id="core.is.unbiased", verdict="supported")])
    elif where == "not_json":
        (tmp_path / "verdicts.json").write_text("{not json")
    with pytest.raises(cite.NoStoredRun, match=f"(?s)no stored run of {cid}.*rfkit validate --claim {cid} --out"):
        cite.citation(cid, tmp_path)
    c = cite.citation(cid, tmp_path, need_run=False)  # BibTeX needs no run
    assert c.verdict is None and c.run_path is None
    with pytest.raises(ValueError, match="no stored verdict"):
        cite.latex_sentence(c)


def test_unknown_id_lists_close_matches():
    with pytest.raises(KeyError, match="did you mean performer.thm3.ort_tail"):
        cite.citation("perfomer.thm3.ort_tial", None)
    assert closest_ids("eva.zzz", IDS)[0].startswith("eva.")


def test_one_bibtex_entry_per_paper():
    assert set(cite.PAPERS) == set(papers()) - {"core"}
    assert len({p.key for p in cite.PAPERS.values()}) == len(cite.PAPERS)
    for p in cite.PAPERS.values():
        assert {"title", "author", "year"} <= {k for k, _ in p.fields}
    c = cite.citation("macformer.fig4a.error_decreases_with_d", None, need_run=False)
    assert c.figure == "macformer.fig4" and "Random Maclaurin Feature Attention" in cite.bibtex(c)
    assert cite.citation("performer.fig3.near_optimal", None, need_run=False).figure is None  # no such reproduction


def test_cli_cite(tmp_path, capsys, monkeypatch):
    cid = "performer.lemma2.limit_sm_to_zero"
    run = fake_run(tmp_path / "run", [dict(id=cid, verdict="refuted", reason="violation 5.3e+07 at d=2")])
    assert main(["cite", cid, "--from", str(run)]) == 0
    printed = capsys.readouterr().out
    assert r"is refuted: violation 5.3e+07 at d=2 (rfkit 9.8.7" in printed and "@inproceedings{choromanski" in printed
    monkeypatch.chdir(tmp_path)
    assert main(["cite", cid]) == 2  # no ./rfkit-out
    err = capsys.readouterr().err
    assert "no stored run" in err and f"rfkit validate --claim {cid} --out rfkit-out" in err
    (tmp_path / "run").rename(tmp_path / "rfkit-out")  # the default folder
    assert main(["cite", cid, "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["verdict"] == "refuted"
    assert main(["cite", "core.ess.rnage", "--format", "bibtex"]) == 2
    assert "did you mean core.ess.range" in capsys.readouterr().err
    assert main(["cite", "core.ess.range", "--format", "bibtex"]) == 0  # no stored run needed
    assert capsys.readouterr().out.startswith("@misc{rfkit")


def test_console_entry(tmp_path):
    cid = "core.is.unbiased"
    run = fake_run(tmp_path, [dict(id=cid, verdict="supported", reason="all cells agree")])
    done = subprocess.run([sys.executable, "-m", "rfkit.validation", "cite", cid, "--from", str(run), "--format",
                           "text"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"{cid} (core; ") and "supported" in done.stdout


def test_latex_table_uses_booktabs():
    run = RunResult(claims=[], tier="quick", seed=0, alpha=1e-3, created="now", version="1.0_rc", seconds=0.0)
    table = latex_table(run)
    assert all(rule in table for rule in (r"\toprule", r"\midrule", r"\bottomrule")) and r"\hline" not in table
    assert r"rfkit 1.0\_rc" in table


def test_citation_cff_names_the_installed_version():
    from importlib.metadata import version
    from pathlib import Path

    cff = (Path(__file__).parents[1] / "CITATION.cff").read_text()
    assert f"\nversion: {version('rfkit')}\n" in cff and "cff-version: 1.2.0" in cff


def test_a_run_records_the_commit_of_its_code():
    # verdicts.json names the code that produced it, so a citation pins that commit, not whatever is checked out
    import re

    from rfkit.validation import validate
    from rfkit.validation.claims import get_claim
    from rfkit.validation.engine import source_commit

    run = validate([get_claim("performer.eq11.prefix_sum_identity")], tier="smoke", progress=False)
    commit = source_commit()
    assert run.verdicts()["commit"] == commit
    assert commit is None or re.fullmatch(r"[0-9a-f]{7,}(\+dirty)?", commit)


def test_a_run_records_the_commit_at_its_start(monkeypatch):
    # a commit made while a long run goes on is not the code that ran: the run reads the checkout before its cells
    from dataclasses import replace

    from rfkit.validation import engine, validate
    from rfkit.validation.claims import get_claim

    claim = get_claim("performer.eq11.prefix_sum_identity")
    ran = []

    def cell(ctx):
        ran.append(True)
        return claim.cell(ctx)

    monkeypatch.setattr(engine, "source_commit", lambda: "bbbbbbb" if ran else "aaaaaaa")  # a commit after a cell
    run = validate([replace(claim, cell=cell)], tier="smoke", progress=False)
    assert ran and run.verdicts()["commit"] == "aaaaaaa"
