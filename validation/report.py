"""Reports of a run: the verdict table (text, Markdown, HTML, LaTeX) and one seaborn figure per claim.

Every number in a report comes from the run's results; nothing is typed in.
"""

from __future__ import annotations

import html
import json
import math
from collections import Counter
from collections.abc import Hashable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from rfkit.validation.cite import latex_escape
from rfkit.validation.domain import coverage
from rfkit.validation.engine import VERDICTS
from rfkit.validation.progress import progress as show_progress
from rfkit.validation.results import ClaimResult, RunResult

__all__ = ["summary_counts", "text_table", "markdown_report", "html_report", "latex_table", "figure_spec",
           "draw_figure", "claim_figure", "write_reports"]


def summary_counts(run: RunResult) -> dict[str, Counter]:
    """Per paper (and ``all``): how many claims got each verdict."""
    counts: dict[str, Counter] = {}
    for c in run.claims:
        counts.setdefault(c.claim.paper, Counter())[c.verdict] += 1
        counts.setdefault("all", Counter())[c.verdict] += 1
    return counts


def _fmt(x: float) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    if isinstance(x, float) and math.isinf(x):
        return "inf"
    return f"{x:.3g}"


def _variants(c: ClaimResult) -> str:
    if len(c.variants) == 1:
        return ""
    return ", ".join(f"{k}: {v.verdict}" for k, v in c.variants.items())


def text_table(run: RunResult) -> str:
    """The table ``rfkit validate`` prints."""
    rows = [f"{'claim':48} {'kind':12} {'verdict':13} {'resolution/tol':>14} {'cells':>5} {'seconds':>8}"]
    rows.append("-" * len(rows[0]))
    for c in run.claims:
        res = f"{_fmt(c.resolution)}/{c.claim.tolerance:.2g}"
        rows.append(f"{c.claim.id:48} {c.claim.kind:12} {c.verdict:13} {res:>14} {len(c.outcomes):>5} "
                    f"{c.seconds:>8.2f}")
    rows.append("")
    for paper, counter in summary_counts(run).items():
        rows.append(f"{paper:10} " + "  ".join(f"{v}: {counter.get(v, 0)}" for v in VERDICTS))
    return "\n".join(rows)


def _header(run: RunResult) -> str:
    return (f"rfkit {run.version} · tier `{run.tier}` · seed {run.seed} · family-wise alpha {run.alpha:g} "
            f"(Holm) · created {run.created} · {run.seconds:.1f} s")


def _summary_rows(run: RunResult) -> list[list[str]]:
    return [[paper] + [str(counter.get(v, 0)) for v in VERDICTS] + [str(sum(counter.values()))]
            for paper, counter in summary_counts(run).items()]


def _verdict_rows(run: RunResult) -> list[list[str]]:
    return [[c.claim.id, c.claim.kind, c.verdict, _variants(c), f"{_fmt(c.resolution)} / {c.claim.tolerance:.3g}",
             str(len(c.outcomes)), f"{c.seconds:.2f}", c.reason] for c in run.claims]


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
        coverage_rows = _coverage_rows(c)
        if coverage_rows:
            out += ["*Domain and coverage:*", "", _md_table(_COVERAGE_HEAD, coverage_rows), ""]
        if c.claim.id in figures:
            out += [f"![{c.claim.id}]({figures[c.claim.id]})", ""]
        if c.witness:
            out += ["*Witness* (re-run with `rfkit show " + c.claim.id + " --witness`):", "", "```json",
                    _witness_text(c.witness), "```", ""]
    return "\n".join(out)


def _html_table(head: list[str], rows: list[list[str]], verdict_col: int | None = None) -> str:
    th = "".join(f"<th>{html.escape(h)}</th>" for h in head)
    body = []
    for r in rows:
        cells = []
        for j, x in enumerate(r):
            cls = f' class="{x}"' if j == verdict_col else ""
            cells.append(f"<td{cls}>{html.escape(x)}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return f"<table><thead><tr>{th}</tr></thead><tbody>{''.join(body)}</tbody></table>"


_CSS = """body{font-family:system-ui,sans-serif;max-width:1200px;margin:2em auto;padding:0 1em}
table{border-collapse:collapse;font-size:0.9em}td,th{border:1px solid #ccc;padding:3px 6px;vertical-align:top}
td.supported{background:#d8f0d8}td.refuted{background:#f6d0d0}td.inconclusive{background:#f4ecc8}
pre{background:#f6f6f6;padding:6px;overflow-x:auto}img{max-width:100%}"""


def html_report(run: RunResult, figures: dict[str, str] | None = None) -> str:
    figures = figures or {}
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>rfkit validation report</title>"
             f"<style>{_CSS}</style></head><body><h1>rfkit validation report</h1>",
             f"<p>{html.escape(_header(run).replace('`', ''))}</p><h2>Summary</h2>",
             _html_table(_SUMMARY_HEAD, _summary_rows(run)), "<h2>Verdicts</h2>",
             _html_table(_VERDICT_HEAD, _verdict_rows(run), verdict_col=2), "<h2>Claims</h2>"]
    verdicts = {c.claim.id: c.verdict for c in run.claims}
    for c in run.claims:
        parts.append(f"<h3 id='{html.escape(c.claim.id)}'>{html.escape(c.claim.id)} — {c.verdict}</h3>"
                     f"<blockquote>{html.escape(c.claim.statement)}</blockquote>"
                     f"<p><i>Source:</i> {html.escape(c.claim.source)}. <i>Kind:</i> {c.claim.kind}. "
                     f"<i>Hypotheses:</i> {html.escape(c.claim.hypotheses)}. <i>Tolerance:</i> "
                     f"{c.claim.tolerance:g} ({html.escape(c.claim.units or 'effect units')}).</p>")
        if c.reason:
            parts.append(f"<p><i>Reason:</i> {html.escape(c.reason)}</p>")
        for other, how in c.claim.related.items():
            link = (f"<a href='#{html.escape(other)}'>{html.escape(other)}</a> ({verdicts[other]})" if other in verdicts
                    else f"{html.escape(other)} (not in this run)")
            parts.append(f"<p><i>Related:</i> {link}: {html.escape(how)}</p>")
        coverage_rows = _coverage_rows(c)
        if coverage_rows:
            parts.append("<p><i>Domain and coverage:</i></p>" + _html_table(_COVERAGE_HEAD, coverage_rows))
        if c.claim.id in figures:
            parts.append(f"<img src='{html.escape(figures[c.claim.id])}' alt='{html.escape(c.claim.id)}'>")
        if c.witness:
            parts.append(f"<p><i>Witness</i> (<code>rfkit show {html.escape(c.claim.id)} --witness</code>):</p>"
                         f"<pre>{html.escape(_witness_text(c.witness))}</pre>")
    parts.append("</body></html>")
    return "\n".join(parts)


_COVERAGE_HEAD = ["reading", "axis", "statement's words", "declared set", "tested", "missing"]


def _coverage_rows(c: ClaimResult) -> list[list[str]]:
    """One row per reading and axis of a claim's declared domain: what the run's cells covered."""
    rows = []
    for variant in c.claim.variants:
        domain = c.claim.reading_domain(variant)
        specs = [o.spec for o in c.outcomes if o.spec.variant == variant]
        if domain is None or not specs:
            continue
        searched = c.claim.searched if any(s.kind == "search" for s in specs) else ()
        for name, cov in zip(domain, coverage(domain, [s.params for s in specs if s.kind == "grid"], searched),
                             strict=True):
            tag = variant + (" (narrowed)" if c.claim.narrowed(variant) else "")
            rows.append([tag, name, domain[name].words, domain[name].describe(),
                         cov.tested + (f" ({cov.declared})" if cov.declared else ""),
                         ", ".join(cov.missing) or "—"])
    return rows


def latex_table(run: RunResult) -> str:
    """A booktabs ``table`` environment a paper can cite (``\\usepackage{booktabs}``): version, seed and tier are
    in the caption; text is escaped by :func:`rfkit.validation.cite.latex_escape`."""
    tex = latex_escape
    rows = [rf"\texttt{{{tex(c.claim.id)}}} & {tex(c.claim.kind)} & {c.verdict} & "
            rf"{tex(_fmt(c.resolution))} / {c.claim.tolerance:.3g} \\" for c in run.claims]
    return "\n".join([
        r"% needs \usepackage{booktabs}",
        r"\begin{table}[t]", r"\centering", r"\small", r"\begin{tabular}{llll}", r"\toprule",
        r"Claim & Kind & Verdict & Resolution / tolerance \\", r"\midrule", *rows, r"\bottomrule",
        r"\end{tabular}",
        rf"\caption{{Verdicts computed by rfkit {tex(run.version)} (tier {tex(run.tier)}, seed {run.seed}, "
        rf"family-wise $\alpha = {run.alpha:g}$, Holm). Reproduce with "
        rf"\texttt{{rfkit validate --tier {tex(run.tier)} --seed {run.seed}}}.}}",
        r"\label{tab:rfkit-verdicts}", r"\end{table}", ""])


@dataclass(frozen=True)
class FigureSpec:
    """Plain data for one claim figure (picklable, so figures can be drawn in worker processes)."""

    claim_id: str
    verdict: str
    units: str
    axes: tuple[str, ...]
    plot_x: str | None
    frame: object  # pandas DataFrame: one row per grid cell


def figure_spec(result: ClaimResult) -> FigureSpec | None:
    """The data of ``result``'s figure, or None when no grid cell has a finite estimate."""
    import pandas as pd

    rows = []
    for o in result.outcomes:
        if o.spec.kind != "grid" or o.evidence is None:
            continue
        ev = o.evidence
        half = 1.96 * ev.stderr if math.isfinite(ev.stderr) and ev.stderr > 0 else 0.0
        params = {k: v if isinstance(v, Hashable) else str(v) for k, v in o.spec.params.items()}  # e.g. a list of L
        rows.append(dict(params, variant=o.spec.variant, estimate=ev.estimate, prediction=ev.prediction,
                         half_width=half))
    frame = pd.DataFrame(rows)
    if frame.empty or not np.isfinite(frame["estimate"]).any():
        return None
    return FigureSpec(result.claim.id, result.verdict, result.claim.units or "effect units",
                      tuple(result.claim.axes(result.tier)), result.claim.plot_x, frame)


def draw_figure(spec: FigureSpec, path: Path) -> Path:
    """Estimate (with its confidence half-width) against prediction across the sweep, faceted.

    x is the claim's ``plot_x`` (else its longest axis); columns facet the next axis with at most six
    values; other axes and variants are hue.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import pandas as pd
    import seaborn as sns

    df = spec.frame.copy()
    axes = [a for a in spec.axes if df[a].nunique() > 1]
    x = spec.plot_x if spec.plot_x in axes else (max(axes, key=lambda a: df[a].nunique()) if axes else None)
    if x is None:
        df["cell"] = "all"
        x = "cell"
    rest = [a for a in axes if a != x]
    col = next((a for a in rest if df[a].nunique() <= 6), None)
    hue_axes = [a for a in rest if a != col] + (["variant"] if df["variant"].nunique() > 1 else [])
    df["hue"] = df[hue_axes].map(str).agg(", ".join, axis=1) if hue_axes else "estimate"  # None/NaN: text
    df["x"] = df[x] if pd.api.types.is_numeric_dtype(df[x]) else df[x].map(str)
    n_hue = df["hue"].nunique()
    palette = sns.color_palette("viridis", n_hue)
    grid = sns.FacetGrid(df, col=col, col_wrap=min(3, df[col].nunique()) if col else None, height=2.8,
                         aspect=1.3, sharey=False)

    def draw(data, **_):
        ax = plt.gca()
        for k, (label, g) in enumerate(data.groupby("hue", sort=True)):
            g = g.sort_values("x")
            ax.errorbar(g["x"], g["estimate"], yerr=g["half_width"].fillna(0), fmt="o", ms=3, lw=0.8,
                        color=palette[k % len(palette)], label=label if n_hue <= 8 else None)
            ax.plot(g["x"], g["prediction"], ls="--", lw=0.8, color="0.4")

    grid.map_dataframe(draw)
    grid.set_axis_labels(x, "estimate")
    grid.figure.suptitle(f"{spec.claim_id}: {spec.verdict} — estimate ± 1.96 standard errors, dashed: prediction "
                         f"(effects in {spec.units})", fontsize=8)
    if n_hue <= 8 and hue_axes:
        grid.axes.flat[0].legend(fontsize=6, title=", ".join(hue_axes), title_fontsize=6)
    grid.figure.subplots_adjust(top=0.85)
    grid.figure.savefig(path, dpi=90, bbox_inches="tight")
    plt.close(grid.figure)
    return path


def claim_figure(result: ClaimResult, path: Path) -> bool:
    """Draw ``result``'s figure into ``path``; False when there is nothing to plot."""
    spec = figure_spec(result)
    if spec is None:
        return False
    draw_figure(spec, path)
    return True


def write_reports(run: RunResult, out: Path, *, latex: bool = False, figures: bool = True,
                  progress: bool | None = False) -> dict[str, Path]:
    """Write ``report.md``, ``report.html``, ``figures/<id>.png`` and, with ``latex``, ``verdicts.tex``;
    ``progress`` as in :func:`rfkit.validation.progress.progress` (per figure)."""
    out = Path(out)
    fig_paths: dict[str, str] = {}
    if figures:
        (out / "figures").mkdir(parents=True, exist_ok=True)
        bar = show_progress(len(run.claims), "figures", show=progress, unit="claim")
        for c in run.claims:
            spec = figure_spec(c)
            if spec is not None:
                fig_paths[c.claim.id] = f"figures/{c.claim.id}.png"
                draw_figure(spec, out / fig_paths[c.claim.id])
            if bar is not None:
                bar.update(1)
        if bar is not None:
            bar.close()
    paths = {"report.md": out / "report.md", "report.html": out / "report.html"}
    paths["report.md"].write_text(markdown_report(run, fig_paths))
    paths["report.html"].write_text(html_report(run, fig_paths))
    if latex:
        paths["verdicts.tex"] = out / "verdicts.tex"
        paths["verdicts.tex"].write_text(latex_table(run))
    return paths
