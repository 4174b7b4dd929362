"""Cite a verdict: the LaTeX sentence, the BibTeX entries and the pinned reproduction command of one claim.

``rfkit cite ID [--from OUT]`` reads the verdict and its reason from ``OUT/verdicts.json`` (written by
``rfkit validate --out OUT``); nothing here computes or guesses a verdict. Without a stored run of the claim,
:func:`citation` raises :class:`NoStoredRun`, whose message names the command that produces one.

The sentence has the form::

    Claim \\texttt{ID} of \\citet{key} (source) is <verdict>: <reason> (rfkit V, commit C, seed S, tier T).

The papers' BibTeX entries come from one table, :data:`PAPERS` (titles and authors as printed on the papers'
first pages); ``core.*`` claims are rfkit's own and cite rfkit only.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path

from rfkit.validation.engine import rfkit_version, source_commit
from rfkit.validation.reasons import reason_summary

__all__ = ["PAPERS", "FORMATS", "Paper", "Citation", "NoStoredRun", "latex_escape", "unicode_left",
           "citation", "from_document", "latex_sentence", "bibtex", "commands", "render"]

FORMATS = ("latex", "text", "bibtex", "json")
#: ``rfkit validate``'s default family-wise level: the pinned command names ``--alpha`` only when a run used another.
DEFAULT_ALPHA = 1e-3
#: Longest reason summary the sentence quotes (:func:`rfkit.validation.reasons.reason_summary`).
SENTENCE_REASON_CHARS = 240


@dataclass(frozen=True)
class Paper:
    """One seed paper's BibTeX entry."""

    key: str
    entry: str  # BibTeX entry type
    fields: tuple[tuple[str, str], ...]


#: Paper prefix of a claim id -> its BibTeX entry: the one table of the papers rfkit checks.
PAPERS: dict[str, Paper] = {
    "performer": Paper("choromanski2021rethinking", "inproceedings", (
        ("title", "Rethinking Attention with Performers"),
        ("author", "Choromanski, Krzysztof and Likhosherstov, Valerii and Dohan, David and Song, Xingyou and "
                   "Gane, Andreea and Sarlos, Tamas and Hawkins, Peter and Davis, Jared and Mohiuddin, Afroz and "
                   "Kaiser, Lukasz and Belanger, David and Colwell, Lucy and Weller, Adrian"),
        ("booktitle", "International Conference on Learning Representations (ICLR)"),
        ("year", "2021"))),
    "lara": Paper("zheng2022linear", "inproceedings", (
        ("title", "Linear Complexity Randomized Self-attention Mechanism"),
        ("author", "Zheng, Lin and Wang, Chong and Kong, Lingpeng"),
        ("booktitle", "Proceedings of the 39th International Conference on Machine Learning (ICML)"),
        ("year", "2022"))),
    "eva": Paper("zheng2023efficient", "inproceedings", (
        ("title", "Efficient Attention via Control Variates"),
        ("author", "Zheng, Lin and Yuan, Jianbo and Wang, Chong and Kong, Lingpeng"),
        ("booktitle", "International Conference on Learning Representations (ICLR)"),
        ("year", "2023"))),
    "macformer": Paper("guo2024macformer", "misc", (
        ("title", "Macformer: Transformer with Random Maclaurin Feature Attention"),
        ("author", "Guo, Yuhan and Ding, Lizhong and Yuan, Ye and Wang, Guoren"),
        ("year", "2024"),
        ("eprint", "2408.11656"), ("archiveprefix", "arXiv"), ("primaryclass", "cs.LG"))),
}

#: Characters with a LaTeX spelling; every other non-ASCII character is passed through as UTF-8 (see
#: :func:`unicode_left`).
_LATEX = {
    "\\": r"\textbackslash{}", "_": r"\_", "&": r"\&", "%": r"\%", "#": r"\#", "$": r"\$", "{": r"\{",
    "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}", "<": r"\textless{}", ">": r"\textgreater{}",
    "|": r"\textbar{}",
    "—": "---", "–": "--", "‘": "`", "’": "'", "“": "``", "”": "''", "…": r"\dots{}",
    **{k: rf"\ensuremath{{{v}}}" for k, v in {
        "∞": r"\infty", "≤": r"\le", "≥": r"\ge", "≠": r"\ne", "≈": r"\approx", "±": r"\pm", "×": r"\times",
        "·": r"\cdot", "∈": r"\in", "∉": r"\notin", "√": r"\surd", "→": r"\to", "Σ": r"\Sigma", "∑": r"\sum",
        "Π": r"\Pi", "∏": r"\prod", "π": r"\pi", "α": r"\alpha", "β": r"\beta", "γ": r"\gamma", "δ": r"\delta",
        "ε": r"\varepsilon", "θ": r"\theta", "λ": r"\lambda", "μ": r"\mu", "ν": r"\nu", "ρ": r"\rho",
        "σ": r"\sigma", "τ": r"\tau", "φ": r"\phi", "ϕ": r"\phi", "ω": r"\omega", "Ω": r"\Omega",
        "Δ": r"\Delta", "Φ": r"\Phi", "‖": r"\|", "∂": r"\partial", "∇": r"\nabla", "⊤": r"\top",
        "²": "^2", "³": "^3", "⁴": "^4", "ᵀ": r"^\top", "⁻": "^-", "¹": "^1", "₀": "_0", "₁": "_1", "₂": "_2",
    }.items()},
}


def latex_escape(text: str) -> str:
    """``text`` as LaTeX text mode: the ten special characters escaped (``\\ _ & % # $ { } ~ ^``, and ``< > |``),
    dashes and quotes in TeX spelling, and common math symbols (∞, ≤, Σ, π, ², ᵀ, …) as ``\\ensuremath{...}``.
    One pass over the characters, so no replacement is escaped twice. Other non-ASCII characters stay UTF-8
    (:func:`unicode_left` lists them)."""
    if not isinstance(text, str):
        raise TypeError(f"latex_escape needs a str, got {type(text).__name__}")
    return "".join(_LATEX.get(ch, ch) for ch in text)


def unicode_left(text: str) -> list[str]:
    """The distinct non-ASCII characters :func:`latex_escape` leaves in ``text`` (they need a UTF-8 aware
    LaTeX: ``inputenc``/``newunicodechar`` under pdflatex, or xelatex/lualatex), in order of appearance."""
    return list(dict.fromkeys(ch for ch in latex_escape(text) if ord(ch) > 127))


class NoStoredRun(LookupError):
    """No ``verdicts.json`` holds the claim; the message says which file was read and the command to run."""


@dataclass(frozen=True)
class Citation:
    """Everything a citation prints: the claim, and the verdict, reason and run metadata read from a run."""

    claim_id: str
    paper: str
    source: str
    verdict: str | None  # None: no stored run (only ``bibtex`` output is possible)
    reason: str | None
    summary: str | None  # the reason in one sentence (reason_summary), what the citation quotes
    version: str
    commit: str | None
    commit_from: str | None  # "run" (recorded by the run) or "checkout" (the source tree now)
    seed: int | None
    tier: str | None
    alpha: float | None
    created: str | None
    run_path: str | None
    witness: bool = False
    figure: str | None = None  # the `rfkit reproduce` id of the claim's paper figure
    unicode: list[str] = field(default_factory=list)


def _figure_of(claim_id: str) -> str | None:
    """The reproduction of the paper figure a ``paper.figN[a-z].name`` claim is about, when one is registered."""
    parts = claim_id.split(".")
    match = re.fullmatch(r"(fig\d+)[a-z]?", parts[1]) if len(parts) > 2 else None
    if match is None:
        return None
    from rfkit.validation.reproductions import all_reproductions

    rep = f"{parts[0]}.{match[1]}"
    return rep if rep in {r.id for r in all_reproductions()} else None


def _produce(claim_id: str, out: Path) -> str:
    """The commands that store a run of ``claim_id`` in ``out`` and cite it."""
    return (f"produce one with\n  rfkit validate --claim {claim_id} --out {out}\n"
            f"  rfkit cite {claim_id} --from {out}")


def _stored(claim_id: str, out: Path) -> tuple[dict, dict]:
    path = out / "verdicts.json"
    if not path.is_file():
        raise NoStoredRun(f"no stored run of {claim_id}: {path} not found; {_produce(claim_id, out)}")
    try:
        document = json.loads(path.read_text())
        entries = document["claims"]
    except (ValueError, KeyError, TypeError) as exc:
        raise NoStoredRun(f"no stored run of {claim_id}: {path} is not a verdicts.json of `rfkit validate` ({exc}); "
                          f"{_produce(claim_id, out.with_name(out.name + '-' + claim_id))}") from None
    entry = next((c for c in entries if isinstance(c, dict) and c.get("id") == claim_id), None)
    if entry is None:  # a fresh folder: validating into ``out`` would replace the run stored there
        raise NoStoredRun(f"no stored run of {claim_id}: {path} does not hold it; "
                          f"{_produce(claim_id, out.with_name(out.name + '-' + claim_id))}")
    return document, entry


def citation(claim_id: str, out: str | Path | None, *, need_run: bool = True) -> Citation:
    """The citation of ``claim_id`` from the run stored in ``out`` (``verdicts.json``).

    ``KeyError`` for an id that is not registered (with the closest registered ids); :class:`NoStoredRun` when
    ``out`` is None or holds no run of the claim, unless ``need_run`` is False (then the citation has no verdict
    and carries the installed version).
    """
    from rfkit.validation.claims import get_claim

    claim = get_claim(claim_id)  # an unknown id raises KeyError before any file is read
    document = entry = None
    try:
        if out is None:
            raise NoStoredRun(f"no stored run of {claim_id}: no --from folder and ./rfkit-out does not exist; "
                              f"{_produce(claim_id, Path('rfkit-out'))}")
        document, entry = _stored(claim_id, Path(out))
    except NoStoredRun:
        if need_run:
            raise
    return from_document(claim, document, entry, str(Path(out) / "verdicts.json") if document else None)


def from_document(claim, document: dict | None, entry: dict | None = None, run_path: str | None = None) -> Citation:
    """The citation of ``claim`` (a :class:`~rfkit.validation.model.Claim`) from a run's verdicts document (the
    ``verdicts.json`` dict, or :meth:`RunResult.verdicts`); ``entry`` is its claim's entry (found in the document
    when None). Without a document the citation has no verdict and carries the installed version."""
    claim_id = claim.id
    if document is not None and entry is None:
        entry = next((c for c in document.get("claims", ()) if c.get("id") == claim_id), None)
    commit, commit_from = (document.get("commit"), "run") if document and document.get("commit") else (None, None)
    if commit is None:
        commit = source_commit()
        commit_from = "checkout" if commit else None
    reason = entry.get("reason") if entry else None
    summary = reason_summary(reason, claim.variants, SENTENCE_REASON_CHARS) if reason else None
    return Citation(
        claim_id=claim_id, paper=claim.paper, source=claim.source,
        verdict=entry["verdict"] if entry else None, reason=reason, summary=summary,
        version=document.get("rfkit_version", "unknown") if document else rfkit_version(),
        commit=commit, commit_from=commit_from,
        seed=document.get("seed") if document else None, tier=document.get("tier") if document else None,
        alpha=document.get("alpha") if document else None, created=document.get("created") if document else None,
        run_path=run_path if document else None,
        witness=bool(entry and entry.get("witness")), figure=_figure_of(claim_id),
        unicode=unicode_left(summary) if summary else [])


def latex_sentence(c: Citation) -> str:
    """``Claim \\texttt{ID} of \\citet{key} (source) is <verdict>: <reason> (rfkit V, commit C, seed S, tier T).``"""
    if c.verdict is None:
        raise ValueError(f"{c.claim_id}: no stored verdict to cite")
    paper = PAPERS.get(c.paper)
    of = rf" of \citet{{{paper.key}}}" if paper else ""
    source = rf"\texttt{{{latex_escape(c.source)}}}" if paper is None else latex_escape(c.source)
    reason = f": {latex_escape(c.summary.rstrip('.'))}" if c.summary else ""
    meta = [f"rfkit {latex_escape(c.version)}"] + ([rf"commit \texttt{{{latex_escape(c.commit)}}}"] if c.commit
                                                   else [])
    meta += [f"seed {c.seed}", f"tier {latex_escape(str(c.tier))}"]
    return rf"Claim \texttt{{{latex_escape(c.claim_id)}}}{of} ({source}) is {c.verdict}{reason} ({', '.join(meta)})."


def _bib_entry(entry: str, key: str, fields: list[tuple[str, str]]) -> str:
    body = ",\n".join(f"  {name:9} = {{{value}}}" for name, value in fields)
    return f"@{entry}{{{key},\n{body}\n}}"


def bibtex(c: Citation) -> str:
    """The BibTeX entry of rfkit (the run's version; its commit when known) and, for a paper's claim, the paper's."""
    version_key = re.sub(r"[^0-9A-Za-z]", "", c.version)
    fields = [("title", f"rfkit: measured verdicts on random-feature attention claims, version {c.version}"),
              ("author", "{rfkit contributors}"), ("version", c.version)]
    if c.created:
        fields.append(("year", c.created[:4]))
    if c.commit:
        fields.append(("note", f"git commit {c.commit}" + (" (the checkout that printed this entry)"
                                                           if c.commit_from == "checkout" else "")))
    entries = [_bib_entry("misc", f"rfkit{version_key}", fields)]
    paper = PAPERS.get(c.paper)
    if paper is not None:
        entries.append(_bib_entry(paper.entry, paper.key, list(paper.fields)))
    return "\n\n".join(entries)


def commands(c: Citation) -> list[str]:
    """The pinned commands that reproduce the cited verdict (and its witness and paper figure when they exist)."""
    lines = []
    if c.commit:  # rfkit is installed from its source tree (it is not on a package index)
        lines.append(f"git checkout {c.commit.removesuffix('+dirty')}"
                     + ("  # that checkout had local changes on top" if c.commit.endswith("+dirty") else ""))
    lines.append(f"pip install .  # rfkit {c.version}")
    alpha = f" --alpha {c.alpha:g}" if c.alpha is not None and c.alpha != DEFAULT_ALPHA else ""
    out = "rfkit-cite"
    lines.append(f"rfkit validate --claim {c.claim_id} --tier {c.tier} --seed {c.seed}{alpha} --out {out}")
    if c.witness:
        lines.append(f"rfkit show {c.claim_id} --witness --out {out}")
    if c.figure:
        lines.append(f"rfkit reproduce {c.figure} --out {out}/reproductions")
    return lines


def _notes(c: Citation) -> list[str]:
    notes = []
    if c.commit_from == "checkout":
        notes.append(f"commit {c.commit} is the checkout now: {c.run_path} does not record the run's commit")
    elif c.commit is None:
        notes.append("commit unknown: the run recorded none and rfkit is not imported from a git checkout")
    if c.unicode:
        notes.append("the sentence keeps UTF-8 characters " + " ".join(c.unicode)
                     + ": use xelatex/lualatex, or pdflatex with \\usepackage[utf8]{inputenc}")
    if c.reason and c.summary != " ".join(c.reason.split()):
        notes.append(f"the reason is shortened; the full text is in {c.run_path}")
    return notes


def render(c: Citation, fmt: str = "latex") -> str:
    """The citation in one of :data:`FORMATS`: ``latex`` (sentence, BibTeX and commands as LaTeX comments),
    ``text`` (for a reader), ``bibtex`` (the entries only; no run needed) or ``json``."""
    if fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r}; expected one of {FORMATS}")
    if fmt == "bibtex":
        return bibtex(c)
    sentence = latex_sentence(c)
    if fmt == "json":
        return json.dumps(dict(asdict(c), sentence=sentence, bibtex=bibtex(c), commands=commands(c),
                               notes=_notes(c)), indent=2, ensure_ascii=False)
    if fmt == "text":
        lines = [f"{c.claim_id} ({c.paper}; {c.source}): {c.verdict}",
                 f"reason:   {c.reason or '(none recorded)'}",
                 f"run:      {c.run_path} (rfkit {c.version}, seed {c.seed}, tier {c.tier}, alpha {c.alpha:g}, "
                 f"created {c.created})",
                 "", "LaTeX:", f"  {sentence}", "", "BibTeX:", bibtex(c), "", "Reproduce:"]
        lines += [f"  {line}" for line in commands(c)]
        lines += [f"note: {n}" for n in _notes(c)]
        return "\n".join(lines)
    lines = [sentence, "", bibtex(c), "", "% Reproduce:"] + [f"%   {line}" for line in commands(c)]
    lines += [f"% Note: {n}" for n in _notes(c)]
    return "\n".join(lines)
