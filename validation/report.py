"""Reports of a run: the verdict table (text, Markdown, LaTeX), the report site (:mod:`rfkit.validation.site`)
and one figure per claim (:mod:`rfkit.validation.figures`).

Every number in a report comes from the run's results; nothing is typed in.
"""

from __future__ import annotations

import json
from pathlib import Path

from rfkit.validation.cite import latex_escape
from rfkit.validation.engine import VERDICTS
from rfkit.validation.figures import draw_figures, figure_spec
from rfkit.validation.progress import progress as show_progress
from rfkit.validation.reasons import reason_summary
from rfkit.validation.results import COVERAGE_HEAD, ClaimResult, RunResult, format_number
from rfkit.validation.site import index_page, write_site

__all__ = ["text_table", "timing_summary", "markdown_report", "latex_table", "write_reports"]


def _variants(c: ClaimResult) -> str:
    if len(c.variants) == 1:
        return ""
    return ", ".join(f"{k}: {v.verdict}" for k, v in c.variants.items())


def text_table(run: RunResult) -> str:
    """The table ``rfkit validate`` prints."""
    rows = [f"{'claim':48} {'kind':12} {'verdict':13} {'resolution/tol':>14} {'cells':>5} {'seconds':>8}"]
    rows.append("-" * len(rows[0]))
    for c in run.claims:
        res = f"{format_number(c.resolution)}/{c.claim.tolerance:.2g}"
        rows.append(f"{c.claim.id:48} {c.claim.kind:12} {c.verdict:13} {res:>14} {len(c.outcomes):>5} "
                    f"{c.seconds:>8.2f}")
    rows.append("")
    for paper, counter in run.counts().items():
        rows.append(f"{paper:10} " + "  ".join(f"{v}: {counter.get(v, 0)}" for v in VERDICTS))
    rows += ["", timing_summary(run)]
    return "\n".join(rows)


def timing_summary(run: RunResult, slowest: int = 5) -> str:
    """Where a run's time went: the claims' total (their cells' wall seconds, resumed cells included), per paper,
    and the ``slowest`` claims."""
    per_paper: dict[str, float] = {}
    for c in run.claims:
        per_paper[c.claim.paper] = per_paper.get(c.claim.paper, 0.0) + c.seconds
    top = sorted(run.claims, key=lambda c: -c.seconds)[:slowest]
    return (f"time: {sum(per_paper.values()):.1f} s in {len(run.claims)} claims ("
            + ", ".join(f"{p} {t:.1f} s" for p, t in per_paper.items()) + "); slowest: "
            + ", ".join(f"{c.claim.id} {c.seconds:.1f} s" for c in top))


def _header(run: RunResult) -> str:
    return (f"rfkit {run.version} · tier `{run.tier}` · seed {run.seed} · family-wise alpha {run.alpha:g} "
            f"(Holm) · created {run.created} · {run.seconds:.1f} s")


def _summary_rows(run: RunResult) -> list[list[str]]:
    return [[paper] + [str(counter.get(v, 0)) for v in VERDICTS] + [str(sum(counter.values()))]
            for paper, counter in run.counts().items()]


def _verdict_rows(run: RunResult) -> list[list[str]]:
    return [[c.claim.id, c.claim.kind, c.verdict, _variants(c),
             f"{format_number(c.resolution)} / {c.claim.tolerance:.3g}", str(len(c.outcomes)), f"{c.seconds:.2f}",
             reason_summary(c.reason, list(c.claim.variants))] for c in run.claims]


_SUMMARY_HEAD = ["paper", *VERDICTS, "total"]
_VERDICT_HEAD = ["claim", "kind", "verdict", "variants", "resolution / tolerance", "cells", "seconds",
                 "reason"]


def _md_table(head: list[str], rows: list[list[str]]) -> str:
    def esc(s: str) -> str:
        return s.replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(esc(x) for x in r) + " |" for r in rows]
    return "\n".join(lines)


def _witness_text(w: dict | None) -> str:
    if not w:
        return ""
    keys = ("variant", "kind", "params", "restart", "estimate", "prediction", "effect", "upper", "p_value",
            "p_adjusted", "method", "seed", "tier")
    return json.dumps({k: w[k] for k in keys if k in w}, default=str)


def markdown_report(run: RunResult, figures: dict[str, str] | None = None) -> str:
    figures = figures or {}
    out = ["# rfkit validation report", "", _header(run), "", "## Summary", "",
           _md_table(_SUMMARY_HEAD, _summary_rows(run)), "", "## Verdicts", "",
           _md_table(_VERDICT_HEAD, _verdict_rows(run)), "", "## Claims", ""]
    verdicts = {c.claim.id: c.verdict for c in run.claims}
    for c in run.claims:
        out += [f"### {c.claim.id} — {c.verdict}", "", f"> {c.claim.statement}", "",
                f"*Source:* {c.claim.source}. *Kind:* {c.claim.kind}. *Hypotheses:* {c.claim.hypotheses}. "
                f"*Tolerance:* {c.claim.tolerance:g} ({c.claim.units or 'effect units'}).", ""]
        if c.reason:
            out += [f"*Reason:* {c.reason}", ""]
        for other, how in c.claim.related.items():
            out += [f"*Related:* `{other}` ({verdicts.get(other, 'not in this run')}): {how}", ""]
        coverage_rows = c.coverage_rows()
        if coverage_rows:
            out += ["*Domain and coverage:*", "", _md_table(COVERAGE_HEAD, coverage_rows), ""]
        if c.claim.id in figures:
            out += [f"![{c.claim.id}]({figures[c.claim.id]})", ""]
        if c.witness:
            out += ["*Witness* (re-run with `rfkit show " + c.claim.id + " --witness`):", "", "```json",
                    _witness_text(c.witness), "```", ""]
    return "\n".join(out)


def latex_table(run: RunResult) -> str:
    """A booktabs ``table`` environment a paper can cite (``\\usepackage{booktabs}``): version, seed and tier are
    in the caption; text is escaped by :func:`rfkit.validation.cite.latex_escape`."""
    tex = latex_escape
    rows = [rf"\texttt{{{tex(c.claim.id)}}} & {tex(c.claim.kind)} & {c.verdict} & "
            rf"{tex(format_number(c.resolution))} / {c.claim.tolerance:.3g} \\" for c in run.claims]
    return "\n".join([
        r"% needs \usepackage{booktabs}",
        r"\begin{table}[t]", r"\centering", r"\small", r"\begin{tabular}{llll}", r"\toprule",
        r"Claim & Kind & Verdict & Resolution / tolerance \\", r"\midrule", *rows, r"\bottomrule",
        r"\end{tabular}",
        rf"\caption{{Verdicts computed by rfkit {tex(run.version)} (tier {tex(run.tier)}, seed {run.seed}, "
        rf"family-wise $\alpha = {run.alpha:g}$, Holm). Reproduce with "
        rf"\texttt{{rfkit validate --tier {tex(run.tier)} --seed {run.seed}}}.}}",
        r"\label{tab:rfkit-verdicts}", r"\end{table}", ""])


def write_reports(run: RunResult, out: Path, *, latex: bool = False, figures: bool = True,
                  progress: bool | None = False) -> dict[str, Path]:
    """Write ``report.md``, the report site (``index.html``, ``claims/<id>.html``: :mod:`rfkit.validation.site`),
    ``report.html`` (the site's index, whose links resolve from the same folder), ``figures/<id>.png`` and, with
    ``latex``, ``verdicts.tex``; ``progress`` as in :func:`rfkit.validation.progress.progress` (per figure)."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    fig_paths: dict[str, str] = {}
    if figures:
        (out / "figures").mkdir(parents=True, exist_ok=True)
        jobs = []
        for c in run.claims:
            spec = figure_spec(c)
            if spec is not None:
                fig_paths[c.claim.id] = f"figures/{c.claim.id}.png"
                jobs.append((spec, out / fig_paths[c.claim.id]))
        bar = show_progress(len(jobs), "figures", show=progress, unit="figure")
        draw_figures(jobs, on_done=None if bar is None else lambda: bar.update(1))
        if bar is not None:
            bar.close()
    paths = {"report.md": out / "report.md", "report.html": out / "report.html"}
    paths["report.md"].write_text(markdown_report(run, fig_paths))
    site = write_site(run, out, fig_paths)
    paths["index.html"] = site.pop("index.html")
    paths["report.html"].write_text(index_page(run), encoding="utf-8")
    paths.update({f"claims/{cid}": path for cid, path in site.items()})
    if latex:
        paths["verdicts.tex"] = out / "verdicts.tex"
        paths["verdicts.tex"].write_text(latex_table(run))
    return paths
