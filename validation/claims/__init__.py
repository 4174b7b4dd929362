"""The claim registry: one module (or package) per paper, each exporting ``CLAIMS`` (a list of Claim objects).

Modules are listed in :data:`MODULES`; ``rfkit list --ids`` prints the ids in this order. A paper with
many claims is a package whose ``__init__`` concatenates its topic modules' ``CLAIMS``.
"""

from __future__ import annotations

import importlib

from rfkit.validation.model import Claim

#: Registry modules, in listing order.
MODULES = ("core", "performer", "lara", "eva", "macformer")

REGISTRY: dict[str, Claim] = {}


def _load() -> None:
    for name in MODULES:
        module = importlib.import_module(f"{__name__}.{name}")
        for claim in module.CLAIMS:
            if claim.id in REGISTRY:
                raise RuntimeError(f"claim id {claim.id} registered twice")
            REGISTRY[claim.id] = claim


def all_claims() -> list[Claim]:
    """Every registered claim, in registration order."""
    if not REGISTRY:
        _load()
    return list(REGISTRY.values())


def get_claim(claim_id: str) -> Claim:
    """The claim with this id; ``KeyError`` with a hint otherwise."""
    all_claims()
    try:
        return REGISTRY[claim_id]
    except KeyError:
        raise KeyError(f"unknown claim id {claim_id!r}; `rfkit list` shows the registered ids") from None


def papers() -> list[str]:
    """Papers with at least one registered claim."""
    return sorted({c.paper for c in all_claims()})
