"""The static report site (rfkit.validation.site): links resolve, claim pages hold the figure, the witness (as
JSON and as Python that re-evaluates it) and the pinned command; reason summaries stay one capped sentence; and a
headless Chromium loads the pages from file:// without a script error."""

from __future__ import annotations

import contextlib
import html
import io
import json
import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest

from rfkit.validation import validate
from rfkit.validation.claims import get_claim
from rfkit.validation.reasons import SUMMARY_CHARS, reason_summary
from rfkit.validation.report import write_reports
from rfkit.validation.results import write_run
from rfkit.validation.site import claim_path

#: Cheap at the smoke tier (well under a second): a refuted claim with four readings and a witness, and a
#: supported one.
REFUTED, SUPPORTED = "macformer.eq_rmfa.mask_conversion", "core.ess.range"


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    out = tmp_path_factory.mktemp("site")
    run = validate([get_claim(REFUTED), get_claim(SUPPORTED)], tier="smoke", progress=False)
    write_run(run, out)
    write_reports(run, out)
    return run, out


class _Links(HTMLParser):
    def __init__(self):
        super().__init__()
        self.links: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.links += [v for k, v in attrs if k in ("href", "src") and v]


def broken_links(root: Path) -> list[str]:
    """Every relative href/src of every page under ``root`` that names no file (``page: link``)."""
    broken = []
    for page in sorted(root.rglob("*.html")):
        parser = _Links()
        parser.feed(page.read_text(encoding="utf-8"))
        for link in parser.links:
            if re.match(r"^[a-z]+:", link) or link.startswith("#"):
                broken.append(f"{page.name}: external link {link}")  # the site must work offline
            elif not (page.parent / link.split("#")[0]).is_file():
                broken.append(f"{page.name}: {link}")
    return broken


def test_every_link_resolves_to_a_file(site):
    run, out = site
    assert (out / "index.html").is_file()
    assert all((out / claim_path(c.claim.id)).is_file() for c in run.claims)
    assert broken_links(out) == []


def test_a_broken_link_is_caught(site, tmp_path):
    _, out = site
    shutil.copytree(out, tmp_path / "copy")
    page = tmp_path / "copy" / claim_path(REFUTED)
    page.write_text(page.read_text().replace("../index.html", "../no-such.html"))
    assert broken_links(tmp_path / "copy") == [f"{page.name}: ../no-such.html"]


def test_report_html_is_the_index(site):
    _, out = site
    assert (out / "report.html").read_text() == (out / "index.html").read_text()
    assert (out / "report.md").stat().st_size > 0


def test_index_lists_every_claim_with_filters_and_metadata(site):
    run, out = site
    index = (out / "index.html").read_text()
    for c in run.claims:
        assert f'<a href="{claim_path(c.claim.id)}">{c.claim.id}</a>' in index
        assert f'data-verdict="{c.verdict}"' in index
    for key in ("paper", "kind", "verdict"):
        assert f'<select id="f-{key}">' in index
    assert f"<dd>{run.commit}</dd>" in index and f"<dd>{run.tier}</dd>" in index
    assert "<script src" not in index and "<link" not in index  # nothing external


def _pre(page: str, cls: str) -> str:
    match = re.search(rf'<pre class="{cls}">(.*?)</pre>', page, re.S)
    assert match, f"no <pre class={cls}>"
    return html.unescape(match[1])


def test_claim_page_holds_figure_witness_and_command(site):
    run, out = site
    page = (out / claim_path(REFUTED)).read_text()
    assert f'<img src="../figures/{REFUTED}.png"' in page
    assert "<details><summary>Full reason</summary>" in page
    assert f"rfkit validate --claim {REFUTED} --tier smoke --seed 0 " in _pre(page, "reproduce")
    assert '"params"' in _pre(page, "witness-json")
    assert "spec_from_witness" in _pre(page, "witness-python")
    assert "Witness" not in (out / claim_path(SUPPORTED)).read_text()


def test_the_witness_snippet_reevaluates_the_witness(site):
    """The snippet is plain Python a user can paste: it runs and reproduces the stored estimate."""
    run, out = site
    snippet = _pre((out / claim_path(REFUTED)).read_text(), "witness-python")
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(snippet, "witness", "exec"), {})
    estimate = next(line for line in printed.getvalue().splitlines() if line.startswith("estimate"))
    stored, again = re.findall(r"(?:stored|re-evaluated)\s+(\S+)", estimate)
    assert stored == again == str(run.claims[0].witness["estimate"])


def test_text_is_escaped(site):
    run, out = site
    page = (out / claim_path(REFUTED)).read_text()
    assert "Σ_i f(S_ai ⊙ M_ai)" in page and "M&#x27;_aj" in page  # the statement's quote, escaped


def _readme_reason(claim_id: str) -> str:
    """A long real reason, as a quick run stored it (tests/data/long_reasons.json; the README shows summaries)."""
    return json.loads((Path(__file__).parent / "data" / "long_reasons.json").read_text())[claim_id]["reason"]


@pytest.mark.parametrize("claim_id", ["performer.thm4.uniform_convergence", "macformer.thm3.scale_restoration",
                                      "macformer.table1.domain_ppsbn", "macformer.thm1.rmfa_unbiased"])
def test_reason_summary_of_the_longest_readme_reasons(claim_id):
    reason = _readme_reason(claim_id)
    assert len(reason) > 1000 or claim_id == "macformer.thm1.rmfa_unbiased"
    summary = reason_summary(reason, list(get_claim(claim_id).variants))
    assert len(summary) <= SUMMARY_CHARS and summary.endswith(".") and "\n" not in summary


def test_reason_summary_leads_with_the_worst_case_and_groups_the_others():
    thm4 = reason_summary(_readme_reason("performer.thm4.uniform_convergence"),
                          list(get_claim("performer.thm4.uniform_convergence").variants))
    assert thm4.startswith("3 of 8 cell(s) cannot decide: pre-asymptotic")
    assert thm4.endswith("beside the verdict, fails: E/t, R/s.")
    rmfa = reason_summary(_readme_reason("macformer.thm1.rmfa_unbiased"), ["row", "fro", "spec"])
    assert rmfa.startswith("row: violation 4.43 (tolerance 0.02) at design=listed")
    assert "fro: violation 3.87 (tolerance 0.02); spec: violation 3.13 (tolerance 0.02)" in rmfa
    grouped = reason_summary("a: violation 1 (tolerance 0.1) at x=1; holds on x ∈ {2}; b: violation 1 (tolerance "
                             "0.1) at x=2; c: violation 2 (tolerance 0.1) at x=3", ["a", "b", "c"])
    assert grouped == "c: violation 2 (tolerance 0.1) at x=3; a, b: violation 1 (tolerance 0.1)."
    many = reason_summary("; ".join(f"r{i}: violation {i} (tolerance 0.1) at x={i}" for i in range(72)),
                          [f"r{i}" for i in range(72)])
    assert many.startswith("r71: violation 71 ") and re.search(r"\+\d+ more group\(s\)\.$", many)
    assert len(many) <= SUMMARY_CHARS


def test_reason_summary_rejects_bad_input():
    with pytest.raises(TypeError, match="str"):
        reason_summary(None)
    with pytest.raises(ValueError, match="limit"):
        reason_summary("x", limit=10)
    assert reason_summary("") == ""


# --- headless browser -----------------------------------------------------------------------------------------

CHROMIUM = next((shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome") if shutil.which(n)),
                None)
needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="no chromium on PATH (Debian: apt-get install chromium); "
                                                             "the browser checks of the report site are skipped")


def _chromium(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([CHROMIUM, "--headless", "--disable-gpu", "--no-sandbox", "--no-first-run",
                           f"--user-data-dir={tmp_path / 'profile'}", *args], capture_output=True, text=True,
                          timeout=120, check=True)


def script_errors(page: Path, tmp_path: Path) -> list[str]:
    """Script errors of ``page`` loaded from file:// in headless Chromium.

    Every page's first script installs ``window.onerror``, which counts errors in ``<body data-js-errors>`` and
    appends one ``<li class="js-error">`` each; ``--dump-dom`` prints the DOM after the page's scripts ran, so the
    errors are read from it. (Chromium's ``--enable-logging=stderr`` console lines were not used: their format and
    verbosity change between versions, and headless stderr is full of unrelated dbus/GPU noise.) The index's
    filter script fills ``#shown`` when it runs; an empty ``#shown`` means the script did not run, which counts as
    an error too.
    """
    dom = _chromium(tmp_path, "--dump-dom", page.resolve().as_uri()).stdout
    count = re.search(r'<body[^>]*data-js-errors="(\d+)"', dom)
    assert count, f"no <body data-js-errors> in the dumped DOM of {page}"
    errors = [html.unescape(e) for e in re.findall(r'<li class="js-error">(.*?)</li>', dom)]
    if int(count[1]) and not errors:
        errors.append(f"{count[1]} script error(s)")
    if 'id="shown"' in dom and re.search(r'<span id="shown"></span>', dom):
        errors.append("the filter script did not run")
    return errors


@needs_chromium
def test_pages_load_in_chromium_without_script_errors(site, tmp_path):
    _, out = site
    for page in (out / "index.html", out / claim_path(REFUTED)):
        shot = tmp_path / f"{page.stem}.png"
        _chromium(tmp_path, "--window-size=1200,1600", f"--screenshot={shot}", page.resolve().as_uri())
        assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 10_000
        assert script_errors(page, tmp_path) == []
    dom = _chromium(tmp_path, "--dump-dom", (out / "index.html").resolve().as_uri()).stdout
    assert '<span id="shown">2 of 2</span>' in dom


@needs_chromium
def test_a_script_error_is_caught(site, tmp_path):
    _, out = site
    shutil.copytree(out, tmp_path / "copy")
    page = tmp_path / "copy" / "index.html"
    page.write_text(page.read_text().replace("var keys=['paper','kind','verdict'];",
                                             "var keys=['paper','kind','verdict'];no_such_function();"))
    errors = script_errors(page, tmp_path)
    assert errors and "no_such_function" in errors[0]
