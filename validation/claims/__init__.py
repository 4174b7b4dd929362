"""The claim registry: one module (or package of topic modules) per paper, in :data:`MODULES` order.

The registry collects claims itself: every :class:`~rfkit.validation.model.Claim` a module defines at module level
(alone or in a list), in order of definition; a package's topic modules are read in name order. Nothing lists the
claims again. ``rfkit list --ids`` prints the ids in this order.
"""

from __future__ import annotations

import difflib
import importlib
import pkgutil
from types import ModuleType

from rfkit.validation.model import Claim

#: Registry modules, in listing order.
MODULES = ("core", "peers", "performer", "lara", "eva", "macformer")

REGISTRY: dict[str, Claim] = {}


def claims_in(module: ModuleType) -> list[Claim]:
    """The claims ``module`` defines at module level (a package: its topic modules', in name order), each once."""
    if hasattr(module, "__path__"):
        names = sorted(info.name for info in pkgutil.iter_modules(module.__path__))
        found = [c for name in names for c in claims_in(importlib.import_module(f"{module.__name__}.{name}"))]
    else:
        found = [c for value in vars(module).values()
                 for c in (value if isinstance(value, (list, tuple)) else (value,)) if isinstance(c, Claim)]
    return list({id(c): c for c in found}.values())


def _load() -> None:
    for name in MODULES:
        for claim in claims_in(importlib.import_module(f"{__name__}.{name}")):
            if claim.id in REGISTRY:
                raise RuntimeError(f"claim id {claim.id} registered twice")
            REGISTRY[claim.id] = claim


def all_claims() -> list[Claim]:
    """Every registered claim, in registration order."""
    if not REGISTRY:
        _load()
    return list(REGISTRY.values())


def get_claim(claim_id: str) -> Claim:
    """The claim with this id; ``KeyError`` naming the closest registered ids otherwise."""
    all_claims()
    try:
        return REGISTRY[claim_id]
    except KeyError:
        close = closest_ids(claim_id, list(REGISTRY))
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        raise KeyError(f"unknown claim id {claim_id!r}{hint} (`rfkit list --ids` lists them all)") from None


def closest_ids(claim_id: str, ids: list[str], n: int = 5) -> list[str]:
    """Ids close to a mistyped ``claim_id`` (difflib ratio >= 0.6, else the ids sharing its paper)."""
    close = difflib.get_close_matches(claim_id, ids, n=n, cutoff=0.6)
    return close or [i for i in ids if i.split(".")[0] == claim_id.split(".")[0]][:n]


def papers() -> list[str]:
    """Papers with at least one registered claim."""
    return sorted({c.paper for c in all_claims()})
