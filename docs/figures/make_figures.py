"""Regenerate the figures of ``docs/figures.md`` from real runs (never drawn by hand).

Each claim is validated exactly as ``rfkit validate --claim ID --tier quick --seed 0`` does, in this process,
and its figure is drawn by :func:`rfkit.validation.figures.claim_figure` into ``docs/figures/<id>.png``
(dpi 100; the SVG it writes beside it is removed to keep the repository small).

Run from the repository root: ``python docs/figures/make_figures.py [--tier quick]``.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from rfkit.validation.claims import get_claim
from rfkit.validation.engine import validate
from rfkit.validation.figures import claim_figure

#: The claims docs/figures.md shows: one per kind, each with a verdict its figure explains.
CLAIMS = (
    "performer.lemma2.hyp_vs_pos_2m",   # inequality, refuted by a witness
    "performer.lemma2.mse_pos",         # moment, supported
    "core.snis.bias_rate",              # rate
    "performer.lemma4.iid_chernoff",    # tail bound
    "lara.sec2_2.rfa_linear_complexity",  # complexity
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tier", default="quick", choices=("smoke", "quick", "full"))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent)
    args = parser.parse_args()
    for claim_id in CLAIMS:
        start = time.perf_counter()
        result = validate([get_claim(claim_id)], tier=args.tier, seed=args.seed, progress=False).claims[0]
        path = args.out / f"{claim_id}.png"
        if not claim_figure(result, path):
            raise SystemExit(f"{claim_id}: nothing to plot")
        path.with_suffix(".svg").unlink()
        print(f"{claim_id}: {result.verdict} ({time.perf_counter() - start:.1f} s) -> {path} "
              f"({path.stat().st_size // 1024} kB)")


if __name__ == "__main__":
    main()
