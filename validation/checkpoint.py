"""Cell checkpoints: a long run (the full tier) survives an interruption and resumes where it stopped.

:func:`rfkit.validation.engine.validate` with ``checkpoint=PATH`` appends every finished cell to ``PATH`` as it
arrives: its coordinates (:attr:`CellSpec.key`), its budget (``None``, or the engine's extension of it), its
evidence, wall and CPU seconds and error. With ``resume=True`` it first reads ``PATH`` and does not run the cells
found there; their stored seconds count in the claim's time as if they had run now.

A checkpoint is reused only by a run that would have computed the same cells. Its header holds the tier, seed,
alpha, power, backend and device: a checkpoint written with other settings is refused with an error, never mixed
in. Each cell's record holds the digest of the code that cell runs (:func:`claim_digest`: the module that declares
its claim, the cell runner, and every rfkit module they import, transitively; a name imported from a package counts
the module that defines it), so after an edit a resumed run reruns exactly the claims that can see it (an edit of
FAVOR+ reruns the claims that run FAVOR+, not LARA's; a report or CLI change reruns nothing). Records are appended
one pickle at a time, so a run killed mid-write loses at most its last cell (a truncated tail is ignored on reading).
"""

from __future__ import annotations

import ast
import functools
import hashlib
import importlib
import importlib.util
import pickle
import sys
from pathlib import Path
from typing import Any

__all__ = ["claim_digest", "changed_claims", "Checkpoint", "CheckpointMismatch"]

#: Packages whose modules declare claims.
CLAIM_PACKAGES = ("rfkit.validation.claims", "rfkit.validation.reproductions")
#: Code every cell runs besides its claim's: planning, seeding, budgets and ``run_cell`` (not the engine's verdict
#: logic, results or reports: editing those leaves stored cells valid, since verdicts are recomputed from cells).
CELLS = "rfkit.validation.cells"
#: The torch backend's role table: :mod:`rfkit.validation.cells` imports it only when a cell runs on torch.
BACKENDS = "rfkit.validation.backends"


class CheckpointMismatch(ValueError):
    """The checkpoint was written by other code or other run settings."""


def claim_digest(claim, backend: str = "numpy") -> str:
    """SHA-256 of the code a claim's cells run on ``backend``: the sources of :func:`claim_modules`."""
    digest = hashlib.sha256()
    for name in claim_modules(claim, backend):
        digest.update(f"{name}\0".encode())
        digest.update(_source(name))
    return digest.hexdigest()


def claim_modules(claim, backend: str = "numpy") -> list[str]:
    """The modules a claim's cells run on ``backend``, sorted: the module(s) that declare the claim or define its
    check, :mod:`rfkit.validation.cells`, and every ``rfkit`` module they import, transitively (``import``
    statements anywhere in a module, read from its source; ``from package import name`` counts the module that
    defines ``name``, :func:`_defining_module`). The torch backend's role table (:data:`BACKENDS`, imported by the
    cell runner only for ``backend="torch"``) and what it imports count only for that backend."""
    roots = {getattr(claim.cell, "__module__", None), CELLS}
    for name, module in list(sys.modules.items()):
        if name.startswith(CLAIM_PACKAGES) and module is not None and any(
                value is claim or isinstance(value, (list, tuple)) and any(v is claim for v in value)
                for value in vars(module).values()):
            roots.add(name)
    skip = frozenset() if backend == "torch" else frozenset({BACKENDS})
    return sorted(_closure(frozenset(n for n in roots if n), skip))


def _closure(roots: frozenset[str], skip: frozenset[str] = frozenset()) -> set[str]:
    seen, todo = set(), list(roots)
    while todo:
        name = todo.pop()
        if name not in seen and name not in skip:
            seen.add(name)
            todo += [n for n in _imports(name) if n.startswith("rfkit.")]
    return seen


@functools.cache
def _source(name: str) -> bytes:
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):  # e.g. a check defined in __main__ or an unimportable test module
        return b""
    return Path(spec.origin).read_bytes() if spec is not None and spec.origin and spec.has_location else b""


@functools.cache
def _imports(name: str) -> tuple[str, ...]:
    """Modules ``name`` imports (``from pkg import sub`` counts ``pkg.sub`` where that is a module)."""
    source = _source(name)
    if not source:
        return ()
    spec = importlib.util.find_spec(name)  # found: _source read it
    package = name if spec.submodule_search_locations is not None else name.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = importlib.util.resolve_name("." * node.level + (node.module or ""), package) if node.level \
                else node.module
            found += [_defining_module(base, alias.name) for alias in node.names]
    return tuple(found)


def _defining_module(base: str, name: str) -> str:
    """The module that ``from base import name`` runs: ``base.name`` where that is a module; else, where ``base`` is
    a package whose ``__init__`` only re-exports (:func:`_reexports`), the module it takes ``name`` from (followed
    through further re-exports); else ``base`` itself, with everything it imports."""
    sub = f"{base}.{name}"
    if not base.startswith("rfkit."):
        return base
    if _is_module(sub):
        return sub
    origin = _reexports(base).get(name)
    return _defining_module(*origin) if origin and origin != (base, name) else base


@functools.cache
def _reexports(name: str) -> dict[str, tuple[str, str]]:
    """``{exported name: (module, name there)}`` of a package whose ``__init__`` runs nothing but imports (beside
    its docstring and ``__all__``), so that importing one of its names runs only the module that defines it; ``{}``
    for any other module (a name it exports then counts as the whole module and all it imports)."""
    source = _source(name)
    spec = importlib.util.find_spec(name) if source else None
    if spec is None or spec.submodule_search_locations is None:
        return {}
    found = {}
    for node in ast.parse(source).body:
        if isinstance(node, ast.ImportFrom) and node.module != "__future__" and all(a.name != "*" for a in node.names):
            base = importlib.util.resolve_name("." * node.level + (node.module or ""), name) if node.level \
                else node.module
            found.update({alias.asname or alias.name: (base, alias.name) for alias in node.names})
        elif not (isinstance(node, ast.Import | ast.ImportFrom)
                  or isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
                  or isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == ["__all__"]):
            return {}
    return found


def _is_module(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


#: Record layout version (a checkpoint of another layout is refused).
FORMAT = 2


def read_records(path: str | Path) -> tuple[dict, list[tuple], int]:
    """The header, the whole records and where they end (a byte offset) of a checkpoint file: ``(key, budget,
    claim digest, evidence, seconds, error, cpu seconds)`` each, in the order written, a record cut short by a kill
    left out. Read-only, so safe beside the run still writing it (``rfkit plan --measured``); :class:`Checkpoint`
    resumes from it."""
    records = []
    with Path(path).open("rb") as f:
        try:
            header = pickle.load(f)
        except (EOFError, pickle.UnpicklingError) as exc:
            raise CheckpointMismatch(f"{path} is not an rfkit checkpoint ({exc})") from None
        if not isinstance(header, dict) or header.get("format") != FORMAT:
            raise CheckpointMismatch(f"{path} is not an rfkit checkpoint of format {FORMAT}")
        while True:
            end = f.tell()
            try:
                records.append(tuple(pickle.load(f)))
            except Exception:  # noqa: BLE001 -- the end, or a record cut short by a kill
                return header, records, end


def changed_claims(path: str | Path) -> list[str]:
    """The claims of a checkpoint whose code has changed since its cells last ran (sorted ids): the digest of the
    claim's last stored cell differs from :func:`claim_digest` of today's code, or the claim is gone. A run's
    verdicts for them are no longer today's; ``--resume`` reruns their cells. Only the last digest counts: a
    resumed run appends the cells it reran after the stale ones, which stay in the file."""
    import json

    from rfkit.validation.claims import get_claim

    header, records, _ = read_records(path)
    latest: dict[str, str] = {}
    for key, _budget, digest, *_ in records:
        latest[json.loads(key)[0]] = digest
    changed = []
    for claim_id, digest in latest.items():
        try:
            current = claim_digest(get_claim(claim_id), header.get("backend", "numpy"))
        except KeyError:
            current = None
        if digest != current:
            changed.append(claim_id)
    return sorted(changed)


def checkpoint_cpu(path: str | Path) -> dict[str, tuple[int, float]]:
    """``{claim: (cells, CPU seconds)}`` of a checkpoint: the distinct cells of each claim it holds and the CPU time
    of every round it stored for them (the engine's extensions included)."""
    import json

    _, records, _ = read_records(path)
    cells: dict[str, set[str]] = {}
    cpu: dict[str, float] = {}
    for key, _budget, _digest, _evidence, _seconds, _error, seconds in records:
        claim_id = json.loads(key)[0]
        cells.setdefault(claim_id, set()).add(key)
        cpu[claim_id] = cpu.get(claim_id, 0.0) + (seconds or 0.0)
    return {c: (len(cells[c]), cpu[c]) for c in cells}


class Checkpoint:
    """Append-only record of finished cells for one run's settings (see the module docstring)."""

    def __init__(self, path: str | Path, settings: dict[str, Any], *, resume: bool):
        self.path = Path(path)
        self.header = dict(settings, format=FORMAT)
        self.done: dict[tuple[str, int | None], tuple] = {}
        self.reused = self.stale = 0  # stored cells taken, and not taken because their claim's code changed
        if resume and self.path.exists():
            self._load()
        else:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self.path.open("wb") as f:
                pickle.dump(self.header, f)

    def _load(self) -> None:
        header, records, end = read_records(self.path)
        if header != self.header:
            diff = sorted(k for k in self.header if header.get(k) != self.header[k])
            raise CheckpointMismatch(f"{self.path} was written by a run with other {', '.join(diff)}; "
                                     "start afresh (without resume) or choose another output folder")
        for key, budget, claim_code, evidence, seconds, error, cpu in records:
            self.done[key, budget] = (claim_code, evidence, seconds, error, cpu)
        with self.path.open("r+b") as f:  # drop a truncated tail so that new records follow whole ones
            f.truncate(end)

    def get(self, spec) -> tuple | None:
        """``(evidence, seconds, error, cpu_seconds)`` of a stored cell of ``spec`` (a :class:`CellSpec`) run by its
        claim's current code, or ``None``."""
        stored = self.done.get((spec.key, spec.budget))
        if stored is None:
            return None
        if stored[0] != _claim_digest_cached(spec.claim, spec.backend):
            self.stale += 1
            return None
        self.reused += 1
        return stored[1:]

    def add(self, spec, evidence, seconds: float, error: str | None, cpu_seconds: float) -> None:
        digest = _claim_digest_cached(spec.claim, spec.backend)
        with self.path.open("ab") as f:
            pickle.dump((spec.key, spec.budget, digest, evidence, seconds, error, cpu_seconds), f)


_DIGESTS: dict[tuple[int, str], tuple[Any, str]] = {}


def _claim_digest_cached(claim, backend: str) -> str:
    hit = _DIGESTS.get((id(claim), backend))
    if hit is None or hit[0] is not claim:
        hit = _DIGESTS[id(claim), backend] = (claim, claim_digest(claim, backend))
    return hit[1]
