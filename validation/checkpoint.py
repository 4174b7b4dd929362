"""Cell checkpoints: a long run (the full tier) survives an interruption and resumes where it stopped.

:func:`rfkit.validation.engine.validate` with ``checkpoint=PATH`` appends every finished cell to ``PATH`` as it
arrives: its coordinates (:attr:`CellSpec.key`), its budget (``None``, or the engine's extension of it), its
evidence, seconds and error. With ``resume=True`` it first reads ``PATH`` and does not run the cells found there;
their stored seconds count in the claim's time as if they had run now.

A checkpoint is reused only by a run that would have computed the same cells: its header holds the tier, seed,
alpha, power, backend and device, and a digest of every source file of the installed rfkit subpackages
(:func:`code_digest`). A checkpoint written by other code or settings is refused with an error, never mixed in.
Records are appended one pickle at a time, so a run killed mid-write loses at most its last cell (a truncated
tail is ignored on reading).
"""

from __future__ import annotations

import hashlib
import importlib
import pickle
from collections.abc import Iterable
from pathlib import Path
from typing import Any

__all__ = ["code_digest", "Checkpoint", "CheckpointMismatch"]

#: The subpackages whose code decides a cell's outcome.
PACKAGES = ("rfkit.base", "rfkit.estimators", "rfkit.theory", "rfkit.validation", "rfkit.gpu")


class CheckpointMismatch(ValueError):
    """The checkpoint was written by other code or other run settings."""


def code_digest(packages: Iterable[str] = PACKAGES) -> str:
    """SHA-256 over the relative path and bytes of every ``.py`` file of ``packages`` (sorted)."""
    digest = hashlib.sha256()
    for name in packages:
        root = Path(importlib.import_module(name).__path__[0])
        for path in sorted(root.rglob("*.py")):
            digest.update(f"{name}/{path.relative_to(root).as_posix()}\0".encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()


class Checkpoint:
    """Append-only record of finished cells for one run's settings (see the module docstring)."""

    def __init__(self, path: str | Path, settings: dict[str, Any], *, resume: bool):
        self.path = Path(path)
        self.header = dict(settings, code=code_digest())
        self.done: dict[tuple[str, int | None], tuple] = {}
        if resume and self.path.exists():
            self._load()
        else:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self.path.open("wb") as f:
                pickle.dump(self.header, f)

    def _load(self) -> None:
        with self.path.open("rb") as f:
            try:
                header = pickle.load(f)
            except (EOFError, pickle.UnpicklingError) as exc:
                raise CheckpointMismatch(f"{self.path} is not an rfkit checkpoint ({exc})") from None
            if not isinstance(header, dict) or header != self.header:
                diff = sorted(k for k in self.header if not isinstance(header, dict) or header.get(k) !=
                              self.header[k])
                raise CheckpointMismatch(f"{self.path} was written by a run with other {', '.join(diff)}; "
                                         "start afresh (without resume) or choose another output folder")
            while True:
                end = f.tell()
                try:
                    key, budget, evidence, seconds, error = pickle.load(f)
                except Exception:  # noqa: BLE001 -- the end, or a record cut short by a kill
                    break
                self.done[key, budget] = (evidence, seconds, error)
        with self.path.open("r+b") as f:  # drop a truncated tail so that new records follow whole ones
            f.truncate(end)

    def get(self, key: str, budget: int | None) -> tuple | None:
        """``(evidence, seconds, error)`` of a stored cell, or ``None``."""
        return self.done.get((key, budget))

    def add(self, key: str, budget: int | None, evidence, seconds: float, error: str | None) -> None:
        with self.path.open("ab") as f:
            pickle.dump((key, budget, evidence, seconds, error), f)
