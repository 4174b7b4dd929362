"""The claim registry: one module per paper, each exporting ``CLAIMS`` (a list of Claim objects)."""

from __future__ import annotations

REGISTRY: dict = {}


def all_claims() -> list:
    """Every registered claim, in registration order."""
    return list(REGISTRY.values())
