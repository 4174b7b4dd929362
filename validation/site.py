"""The report of a run as a small static site: ``OUT/index.html`` and one page per claim, ``OUT/claims/<id>.html``.

The site works offline from ``file://``: no CDN, no external asset; its only script (the index's filters by
paper, kind and verdict) is inline. Every text is escaped with :func:`html.escape`; every number comes from the
run (:class:`~rfkit.validation.results.RunResult`), nothing is typed in. A claim page holds what ``rfkit show ID``
prints (statement, source, domain, readings), the coverage of the run's cells, the verdict in one sentence
(:func:`reason_summary`) with the full reason below, the figure ``write_reports`` drew, the witness as JSON and as
a Python snippet that re-evaluates it (the code path of ``rfkit show ID --witness``), and the pinned commands of
``rfkit cite`` (:func:`rfkit.validation.cite.commands`).

Each page records script errors in the DOM (``<body data-js-errors="N">`` and one ``<li class="js-error">``
per error): a headless browser's ``--dump-dom`` shows whether a page ran cleanly.
"""

from __future__ import annotations

import html
import json
from pathlib import Path

from rfkit.validation.cite import Citation, commands, from_document
from rfkit.validation.engine import VERDICTS
from rfkit.validation.reasons import reason_summary
from rfkit.validation.results import COVERAGE_HEAD, ClaimResult, RunResult, format_number, jsonable

__all__ = ["claim_path", "witness_snippet", "index_page", "claim_page",
           "write_site"]

def claim_path(claim_id: str) -> str:
    """A claim page's path relative to the site's root."""
    return f"claims/{claim_id}.html"


def witness_snippet(claim_id: str, witness: dict) -> str:
    """Python that re-evaluates a stored witness, the code path of ``rfkit show ID --witness``
    (:func:`rfkit.validation.cells.spec_from_witness` then :func:`rfkit.validation.cells.run_cell`)."""
    document = json.dumps(jsonable(witness), indent=1, default=str, ensure_ascii=False)
    return "\n".join([
        "import json",
        "from rfkit.validation.cells import run_cell, spec_from_witness",
        "from rfkit.validation.claims import get_claim",
        "",
        f"witness = json.loads(r'''{document}''')",
        f"outcome = run_cell(spec_from_witness(witness, get_claim({claim_id!r})))",
        "assert outcome.error is None, outcome.error",
        "for key in ('estimate', 'prediction', 'effect', 'upper', 'p_value'):",
        "    print(f\"{key:10} stored {witness[key]!s:>24}   re-evaluated {getattr(outcome.evidence, key)!s:>24}\")",
    ])


_CSS = """body{font-family:system-ui,sans-serif;max-width:1200px;margin:1.5em auto;padding:0 1em;color:#222}
table{border-collapse:collapse;font-size:0.9em;margin:0.5em 0}td,th{border:1px solid #ccc;padding:3px 6px;
vertical-align:top;text-align:left}.supported{background:#d8f0d8}.refuted{background:#f6d0d0}
.inconclusive{background:#f4ecc8}pre{background:#f6f6f6;padding:6px;overflow-x:auto;white-space:pre-wrap}
img{max-width:100%}details{margin:0.5em 0}summary{cursor:pointer}.filters label{margin-right:1em}
dl.meta{display:grid;grid-template-columns:max-content auto;gap:2px 1em}dl.meta dt{font-weight:600}
.js-error{color:#b00}"""

#: First script of every page: record script errors in the DOM, so a headless browser's ``--dump-dom`` shows them.
_ERROR_HOOK = """window.onerror=function(message,source,line){var b=document.body;
if(!b){return false;}b.setAttribute('data-js-errors',String(1+Number(b.getAttribute('data-js-errors')||0)));
var li=document.createElement('li');li.className='js-error';li.textContent=message+' ('+line+')';
(document.getElementById('js-errors')||b).appendChild(li);return false;};"""

#: The index's filters: show the rows whose paper, kind and verdict match the three selects.
_FILTER_JS = """(function(){var keys=['paper','kind','verdict'];
var rows=Array.prototype.slice.call(document.querySelectorAll('#claims tbody tr'));
function apply(){var want={};keys.forEach(function(k){want[k]=document.getElementById('f-'+k).value;});
var shown=0;rows.forEach(function(r){var ok=keys.every(function(k){return !want[k]||r.dataset[k]===want[k];});
r.hidden=!ok;if(ok){shown+=1;}});document.getElementById('shown').textContent=shown+' of '+rows.length;}
keys.forEach(function(k){document.getElementById('f-'+k).addEventListener('change',apply);});apply();})();"""


def _e(x) -> str:
    return html.escape(str(x), quote=True)


def _page(title: str, body: str, script: str = "") -> str:
    return (f"<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
            f"<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n<title>{_e(title)}</title>\n"
            f"<style>{_CSS}</style>\n<script>{_ERROR_HOOK}</script>\n</head>\n<body data-js-errors=\"0\">\n{body}\n"
            f"<ul id=\"js-errors\"></ul>\n" + (f"<script>{script}</script>\n" if script else "") + "</body>\n</html>\n")


def _table(head: list[str], rows: list[list[str]]) -> str:
    """An HTML table, every cell escaped."""
    th = "".join(f"<th>{_e(h)}</th>" for h in head)
    body = "".join("<tr>" + "".join(f"<td>{_e(x)}</td>" for x in r) + "</tr>" for r in rows)
    return f"<table><thead><tr>{th}</tr></thead><tbody>{body}</tbody></table>"


def _fields(rows: list[tuple[str, object]]) -> str:
    """A two-column table of named fields (the name as a row header), escaped."""
    return "<table>" + "".join(f"<tr><th>{_e(k)}</th><td>{_e(v)}</td></tr>" for k, v in rows) + "</table>"


def _metadata(run: RunResult) -> str:
    items = [("rfkit", run.version), ("commit", run.commit or "unknown"), ("tier", run.tier), ("seed", run.seed),
             ("family-wise alpha", f"{run.alpha:g} (Holm)"), ("created", run.created),
             ("seconds", f"{run.seconds:.1f}"), ("claims", len(run.claims))]
    return "<dl class=\"meta\">" + "".join(f"<dt>{_e(k)}</dt><dd>{_e(v)}</dd>" for k, v in items) + "</dl>"


def _select(key: str, values: list[str]) -> str:
    options = "".join(f"<option value=\"{_e(v)}\">{_e(v)}</option>" for v in values)
    return (f"<label>{key} <select id=\"f-{key}\"><option value=\"\">all</option>{options}</select></label>")


def index_page(run: RunResult) -> str:
    """``index.html``: the run's metadata, the per-paper summary and one row per claim, with filters."""
    summary = _table(["paper", *VERDICTS, "total"],
                     [[paper, *(str(c.get(v, 0)) for v in VERDICTS), str(sum(c.values()))]
                      for paper, c in run.counts().items()])
    rows = []
    for c in run.claims:
        cid, paper, kind = c.claim.id, c.claim.paper, c.claim.kind
        rows.append(f"<tr data-paper=\"{_e(paper)}\" data-kind=\"{_e(kind)}\" data-verdict=\"{_e(c.verdict)}\">"
                    f"<td><a href=\"{_e(claim_path(cid))}\">{_e(cid)}</a></td><td>{_e(paper)}</td><td>{_e(kind)}</td>"
                    f"<td class=\"{_e(c.verdict)}\">{_e(c.verdict)}</td>"
                    f"<td>{_e(reason_summary(c.reason, list(c.claim.variants)))}</td></tr>")
    filters = "".join(_select(k, sorted({getattr(c.claim, k) if k != "verdict" else c.verdict for c in run.claims}))
                      for k in ("paper", "kind", "verdict"))
    body = (f"<h1>rfkit validation report</h1>\n{_metadata(run)}\n<h2>Summary</h2>\n{summary}\n<h2>Claims</h2>\n"
            f"<p class=\"filters\">{filters} <span id=\"shown\"></span> shown</p>\n"
            f"<table id=\"claims\"><thead><tr><th>claim</th><th>paper</th><th>kind</th><th>verdict</th><th>reason"
            f"</th></tr></thead><tbody>{''.join(rows)}</tbody></table>")
    return _page("rfkit validation report", body, _FILTER_JS)


def _citation(run: RunResult, c: ClaimResult) -> Citation:
    """The :class:`~rfkit.validation.cite.Citation` of ``c`` in this run (what ``rfkit cite`` reads back)."""
    document = dict(rfkit_version=run.version, commit=run.commit, seed=run.seed, tier=run.tier, alpha=run.alpha,
                    created=run.created)
    return from_document(c.claim, document, c.summary(), run_path="verdicts.json")


def claim_page(run: RunResult, c: ClaimResult, figure: str | None = None) -> str:
    """``claims/<id>.html``: the claim as ``rfkit show`` describes it, its verdict, figure, witness and the
    commands that reproduce it. ``figure`` is the figure's path relative to the site's root (or None)."""
    claim = c.claim
    in_run = {r.claim.id: r.verdict for r in run.claims}
    parts = ["<p><a href=\"../index.html\">← all claims</a></p>",
             f"<h1>{_e(claim.id)} <span class=\"{_e(c.verdict)}\">{_e(c.verdict)}</span></h1>",
             f"<blockquote>{_e(claim.statement)}</blockquote>",
             _fields([("source", claim.source), ("paper", claim.paper), ("kind", claim.kind),
                      ("hypotheses", claim.hypotheses or "—"),
                      ("tolerance", f"{claim.tolerance:g} {claim.units or 'effect units'}"),
                      ("resolution", format_number(c.resolution))])]
    if claim.domain is not None:
        parts += ["<h2>Domain</h2>", _table(["axis", "values", "statement's words"],
                                            [[name, a.describe(), a.words] for name, a in claim.domain.items()])]
    if claim.readings or len(claim.variants) > 1:
        rows = []
        for v in claim.variants:
            reading = (claim.readings or {}).get(v)
            role = claim.role(v)
            vv = c.variants.get(v)
            rows.append([v, role, claim.variant_notes.get(v, ""), reading.words if reading is not None else "",
                         vv.verdict if vv else "not run", (c.coverage.get(v) or "—")])
        parts += ["<h2>Readings</h2>", _table(["reading", "role", "note", "statement's words", "verdict",
                                               "coverage"], rows)]
    elif cover := c.coverage.get(claim.variants[0]):
        parts.append(f"<p>Coverage: {_e(cover)}</p>")
    coverage_rows = c.coverage_rows()
    if coverage_rows:
        parts += ["<h2>Coverage per reading</h2>", _table(COVERAGE_HEAD, coverage_rows)]
    parts += ["<h2>Verdict</h2>",
              f"<p class=\"{_e(c.verdict)}\"><b>{_e(c.verdict)}</b>: "
              f"{_e(reason_summary(c.reason, list(claim.variants)))}</p>"]
    extra = [(k, v) for k, v in (("validity", c.validity), ("cause", c.cause), ("holds on", c.holds_on)) if v]
    if extra:
        parts.append(_fields(extra))
    parts.append(f"<details><summary>Full reason</summary><p>{_e(c.reason or '(none)')}</p></details>")
    for other, how in claim.related.items():
        link = (f"<a href=\"{_e(Path(claim_path(other)).name)}\">{_e(other)}</a> ({_e(in_run[other])})"
                if other in in_run else f"{_e(other)} (not in this run)")
        parts.append(f"<p><i>Related:</i> {link}: {_e(how)}</p>")
    if figure:
        parts += ["<h2>Figure</h2>", f"<img src=\"../{_e(figure)}\" alt=\"figure of {_e(claim.id)}\">"]
    if c.witness:
        parts += ["<h2>Witness</h2>", "<p>The refuting cell, as stored in <code>verdicts.json</code>:</p>",
                  f"<pre class=\"witness-json\">{_e(json.dumps(jsonable(c.witness), indent=1, default=str))}</pre>",
                  f"<p>Re-evaluate it in Python (the code of <code>rfkit show {_e(claim.id)} --witness</code>):</p>",
                  f"<pre class=\"witness-python\">{_e(witness_snippet(claim.id, c.witness))}</pre>"]
    parts += ["<h2>Reproduce</h2>",
              f"<pre class=\"reproduce\">{_e(chr(10).join(commands(_citation(run, c))))}</pre>",
              "<h2>Run</h2>", _metadata(run)]
    return _page(f"{claim.id}: {c.verdict}", "\n".join(parts))


def write_site(run: RunResult, out: Path, figures: dict[str, str] | None = None) -> dict[str, Path]:
    """Write ``index.html`` and ``claims/<id>.html`` into ``out``; ``figures`` maps claim ids to figure paths
    relative to ``out`` (as ``write_reports`` draws them). Returns ``{"index.html": path, <id>: path, ...}``."""
    out = Path(out)
    figures = figures or {}
    (out / "claims").mkdir(parents=True, exist_ok=True)
    paths = {"index.html": out / "index.html"}
    paths["index.html"].write_text(index_page(run), encoding="utf-8")
    for c in run.claims:
        paths[c.claim.id] = out / claim_path(c.claim.id)
        paths[c.claim.id].write_text(claim_page(run, c, figures.get(c.claim.id)), encoding="utf-8")
    return paths
