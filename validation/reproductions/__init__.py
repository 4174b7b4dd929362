"""Reproductions of papers' figures: ``rfkit reproduce FIGURE_ID``.

Each paper module exports ``REPRODUCTIONS`` (a list of :class:`Reproduction`). A reproduction computes the
figure's quantities with rfkit, writes a PNG and a netCDF file (and anything else it needs) into the
output folder, and returns the paths. Parameters the paper leaves open are options with documented
defaults (``rfkit reproduce ID --option name=value``). Every figure is laid out by :mod:`.layout`: the colour-blind
palette, one legend outside the axes, log-axis tick labels that do not overlap, error bars (or bands) from the
reproduction's own replicates where it has them, and a caption line stating the inputs and regime it ran (sizes,
replicates, seed, options changed from the defaults, options that differ from the paper's values).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["Reproduction", "all_reproductions", "get_reproduction", "MODULES"]

#: Paper modules with reproductions, in listing order.
MODULES: tuple[str, ...] = ("performer", "lara", "eva", "macformer")


@dataclass(frozen=True)
class Reproduction:
    """A figure or table to reproduce. ``run(out, **options)`` returns ``{name: path}`` of what it wrote."""

    id: str
    paper: str
    description: str
    run: Callable[..., dict[str, Path]]
    options: dict = field(default_factory=dict)
    option_docs: dict = field(default_factory=dict)


_REGISTRY: dict[str, Reproduction] = {}


def all_reproductions() -> list[Reproduction]:
    if not _REGISTRY:
        for name in MODULES:
            for rep in importlib.import_module(f"{__name__}.{name}").REPRODUCTIONS:
                _REGISTRY[rep.id] = rep
    return list(_REGISTRY.values())


def get_reproduction(rep_id: str) -> Reproduction:
    all_reproductions()
    try:
        return _REGISTRY[rep_id]
    except KeyError:
        known = ", ".join(_REGISTRY) or "none"
        raise KeyError(f"unknown figure id {rep_id!r}; available: {known}") from None


def parse_options(rep: Reproduction, pairs: list[str]) -> dict:
    """``["m=4,8", "c=0.5"]`` -> typed options (types follow the defaults; lists split on commas)."""
    out = dict(rep.options)
    for pair in pairs:
        if "=" not in pair:
            raise ValueError(f"option {pair!r} must look like name=value")
        name, raw = pair.split("=", 1)
        if name not in rep.options:
            raise ValueError(f"unknown option {name!r} for {rep.id}; options: {sorted(rep.options)}")
        default = rep.options[name]
        if isinstance(default, (list, tuple)):
            kind = type(default[0]) if default else str
            out[name] = [kind(v) for v in raw.split(",")]
        elif isinstance(default, bool):
            out[name] = raw.lower() in ("1", "true", "yes")
        else:
            out[name] = type(default)(raw) if default is not None else raw
    return out
