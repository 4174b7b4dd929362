"""``rfkit bench --device DEV``: FAVOR+ on a torch device against its peers there, side by side in one run.

Rows (``B = 1``, :data:`~rfkit.validation.bench.PEER_HEADS` = 8 heads, ``d = 64``, ``m = 256``, every length in
``lengths``, bidirectional and causal):

* ``rfkit torch favor+`` — :func:`rfkit.gpu.favor_attention` (positive features, R-ORF drawn inside every call with
  a generator on the device; causal: :data:`rfkit.gpu.favor.CAUSAL_ALGORITHMS` ``"auto"``, the chunk-parallel
  algorithm on CUDA) in float32; on CUDA also ``rfkit torch favor+ tf32`` (float32 with TF32 matrix products);
* ``performer FastAttention`` — performer-pytorch's module on the device, its projection redrawn inside the call
  (causal without its optional CUDA extension: ``causal_linear_attention_noncuda``), float32;
* ``torch sdpa exact`` and ``torch sdpa exact bf16`` — exact attention by
  ``torch.nn.functional.scaled_dot_product_attention`` in float32 and in bfloat16 (flash attention on CUDA).

A peer that is not installed is left out and named in every row's ``peers_skipped``.

Timing: 3 warm-up calls, then the median of ``repeats`` calls, each bracketed by device synchronisation (CUDA events
on CUDA, ``perf_counter`` elsewhere). ``peak_bytes``: the device's peak allocation above what was allocated before
the call (``torch.cuda.max_memory_allocated``; ``null`` off CUDA). ``roofline_seconds``: plain matrix products of
the row's shapes (:mod:`rfkit.theory.cost`; the products of one shape batched into one call) on the same device in
the same dtype, timed the same way; ``roofline_fraction`` is that over the row's time. ``error_vs_float64`` (rfkit
rows, at the smallest length): max relative error of the row's output against rfkit's numpy float64 FAVOR+ on the
same projection. A row whose call fails (out of memory, an unsupported kernel) carries ``error`` and no time.
``speedup_vs``: as in :mod:`rfkit.validation.bench`.

:func:`device_table` renders these rows as the performance issue's GPU table (``docs/performance.md``).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Iterable

import numpy as np

from rfkit.estimators.favor import favor_attention as numpy_favor_attention
from rfkit.theory.cost import gemm_flops, softmax_attention_gemms
from rfkit.validation.bench import PEER_HEADS, favor_peer_gemms, missing_peers, performer_fast_attention

__all__ = ["DEVICE_LENGTHS", "IMPLEMENTATIONS", "device_cases", "run_device_cases", "device_table"]

#: The lengths of the performance issue's GPU table.
DEVICE_LENGTHS = (4096, 16384, 65536)
#: Row implementations in table order → column label.
IMPLEMENTATIONS = {"rfkit torch favor+": "rfkit torch", "rfkit torch favor+ tf32": "rfkit torch (TF32)",
                   "performer FastAttention": "performer-pytorch", "torch sdpa exact": "SDPA f32",
                   "torch sdpa exact bf16": "SDPA bf16"}


def _sync(device) -> None:
    import torch

    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def _timed(fn: Callable[[], object], device, repeats: int) -> float:
    """Median seconds of ``repeats`` calls after 3 warm-ups, each bracketed by device synchronisation."""
    import torch

    for _ in range(3):
        fn()
    _sync(device)
    times = []
    cuda = torch.device(device).type == "cuda"
    for _ in range(repeats):
        if cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            torch.cuda.synchronize(device)
            times.append(start.elapsed_time(end) / 1e3)
        else:
            t0 = time.perf_counter()
            fn()
            _sync(device)
            times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _peak(fn: Callable[[], object], device) -> int | None:
    import torch

    if torch.device(device).type != "cuda":
        return None
    _sync(device)
    torch.cuda.reset_peak_memory_stats(device)
    base = torch.cuda.memory_allocated(device)
    fn()
    _sync(device)
    return int(torch.cuda.max_memory_allocated(device) - base)


def _roofline(gemms, device, dtype, repeats: int) -> float:
    """Seconds of plain matrix products of ``gemms``' shapes on ``device`` in ``dtype``: each shape's ``count``
    products as one batched product (a causal row's thousands of chunk-sized products, one by one, would time the
    device's kernel launches instead of its arithmetic)."""
    import torch

    gen = torch.Generator(device=device).manual_seed(0)
    operands = [(torch.randn(c, n, k, generator=gen, device=device).to(dtype),
                 torch.randn(c, k, p, generator=gen, device=device).to(dtype)) for n, k, p, c in gemms]

    def products():
        for a, b in operands:
            torch.bmm(a, b)

    return _timed(products, device, repeats)


def device_cases(device: str, lengths: Iterable[int] = DEVICE_LENGTHS, *, d: int = 64, m: int = 256) -> list[dict]:
    """The rows to run: ``{impl, L, causal, dtype, setup, gemms}`` (``setup(device)`` returns the call)."""
    import torch

    cuda = torch.device(device).type == "cuda"
    skipped = missing_peers()
    impls = [i for i in IMPLEMENTATIONS if (cuda or i != "rfkit torch favor+ tf32") and i not in skipped]
    out = []
    for length in lengths:
        for causal in (False, True):
            for impl in impls:
                bf16 = impl.endswith("bf16")
                gemms = (softmax_attention_gemms(length, length, d, d, batch=PEER_HEADS) if impl.startswith("torch")
                         else favor_peer_gemms(length, d, m, causal))
                out.append(dict(impl=impl, L=length, d=d, m=None if impl.startswith("torch") else m, causal=causal,
                                dtype="bfloat16" if bf16 else "float32", gemms=gemms, peers_skipped=skipped))
    return out


def _inputs(length: int, d: int, device, dtype):
    import torch

    gen = torch.Generator(device=device).manual_seed(1)
    return tuple(torch.randn(1, PEER_HEADS, length, d, generator=gen, device=device).to(dtype) for _ in range(3))


def _call(row: dict, device):
    """The zero-argument call a row times (inputs made outside it)."""
    import torch
    import torch.nn.functional as F

    from rfkit import gpu

    dtype = torch.bfloat16 if row["dtype"] == "bfloat16" else torch.float32
    q, k, v = _inputs(row["L"], row["d"], device, dtype)
    impl, causal = row["impl"], row["causal"]
    if impl.startswith("torch sdpa"):
        return lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    if impl.startswith("rfkit"):
        generator = gpu.make_generator(2, device)
        return lambda: gpu.favor_attention(q[0], k[0], v[0], m=row["m"], rng=generator, causal=causal)
    from rfkit.estimators import orthogonal_projection

    module = performer_fast_attention(orthogonal_projection(row["m"], row["d"], rng=2, dtype=np.float32),
                                      causal=causal, dtype=np.float32).to(device)

    def call():
        module.redraw_projection_matrix(q.device)
        return module(q, k, v)

    return call


def _error_vs_float64(row: dict, device) -> float:
    """Max relative error of rfkit's device FAVOR+ against numpy float64 on the same projection and inputs."""
    import torch

    from rfkit import gpu

    q, k, v = (t[0] for t in _inputs(row["L"], row["d"], device, torch.float32))
    omega = gpu.orthogonal_projection(row["m"], row["d"], rng=gpu.make_generator(3, device), dtype=torch.float32)
    got = gpu.favor_attention(q, k, v, omega=omega, causal=row["causal"]).double().cpu().numpy()
    want = numpy_favor_attention(*(t.double().cpu().numpy() for t in (q, k, v)), omega=omega.double().cpu().numpy(),
                                 causal=row["causal"])
    return float(np.abs(got - want).max() / np.abs(want).max())


def run_device_cases(rows: list[dict], device: str, *, repeats: int = 10, progress: bool = False) -> list[dict]:
    """Time every row on ``device`` (module docstring); returns JSON-able rows with ``speedup_vs``."""
    import torch

    smallest = min((r["L"] for r in rows), default=None)
    iterator = rows
    if progress:
        from tqdm.auto import tqdm

        iterator = tqdm(rows, desc=f"bench {device}", unit="row", leave=False)
    out = []
    for row in iterator:
        result = {k: v for k, v in row.items() if k != "gemms"}
        result.update(device=str(device), device_name=_device_name(device), batch_heads=PEER_HEADS,
                      seconds=None, peak_bytes=None, roofline_seconds=None, roofline_fraction=None,
                      flops=gemm_flops(row["gemms"]), error=None)
        tf32 = row["impl"].endswith("tf32")
        previous = torch.backends.cuda.matmul.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = tf32
        try:
            with torch.no_grad():
                fn = _call(row, device)
                result["seconds"] = _timed(fn, device, repeats)
                result["peak_bytes"] = _peak(fn, device)
                del fn
                dtype = torch.bfloat16 if row["dtype"] == "bfloat16" else torch.float32
                result["roofline_seconds"] = _roofline(row["gemms"], device, dtype, repeats)
                result["roofline_fraction"] = result["roofline_seconds"] / result["seconds"]
                if row["impl"].startswith("rfkit") and row["L"] == smallest:
                    result["error_vs_float64"] = _error_vs_float64(row, device)
        except (RuntimeError, MemoryError) as exc:  # out of memory or an unsupported kernel: the row says so
            result["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
        finally:
            torch.backends.cuda.matmul.allow_tf32 = previous
            if torch.device(device).type == "cuda":
                torch.cuda.empty_cache()
        out.append(result)
    groups: dict[tuple, list[dict]] = {}
    for r in out:
        if r["seconds"]:
            groups.setdefault((r["L"], r["causal"]), []).append(r)
    for group in groups.values():
        for r in group:
            r["speedup_vs"] = {o["impl"]: o["seconds"] / r["seconds"] for o in group if o is not r}
    return out


def _device_name(device) -> str:
    import torch

    if torch.device(device).type == "cuda":
        return torch.cuda.get_device_name(device)
    return str(device)


def device_table(rows: Iterable[dict]) -> str:
    """Markdown: one line per (L, direction), milliseconds per implementation (rfkit's speed-up over
    performer-pytorch in brackets), then rfkit's roofline fraction and float32 error."""
    rows = list(rows)
    if not rows:
        raise ValueError("no device rows: run `rfkit bench --device DEV --json`")
    impls = [i for i in IMPLEMENTATIONS if any(r["impl"] == i for r in rows)]
    cell = {(r["impl"], r["L"], r["causal"]): r for r in rows}
    first = rows[0]
    lines = [f"{first['device_name']}: B = 1, H = {first['batch_heads']}, d = {first['d']}, m = 256, median of "
             "timed calls after warm-ups, projection drawn inside each call; brackets: speed-up over "
             "performer-pytorch; —: the call failed (see the row's error)", "",
             "| L | direction | " + " | ".join(IMPLEMENTATIONS[i] for i in impls) + " | rfkit roofline |",
             "|---|---|" + "---|" * (len(impls) + 1)]
    for length in sorted({r["L"] for r in rows}):
        for causal in (False, True):
            cells = []
            for impl in impls:
                r = cell.get((impl, length, causal))
                if r is None or not r["seconds"]:
                    cells.append("—")
                    continue
                ms = r["seconds"] * 1e3
                text = f"{ms:.3g} ms"
                over = (r.get("speedup_vs") or {}).get("performer FastAttention")
                if impl.startswith("rfkit") and over:
                    text += f" ({over:.2f}×)"
                cells.append(text)
            own = cell.get(("rfkit torch favor+", length, causal))
            roof = f"{own['roofline_fraction']:.0%}" if own and own.get("roofline_fraction") else "—"
            lines.append(f"| {length:,} | {'causal' if causal else 'bidirectional'} | " + " | ".join(cells)
                         + f" | {roof} |")
    errors = [f"{IMPLEMENTATIONS[r['impl']]} {'causal' if r['causal'] else 'bidirectional'} {r['error_vs_float64']:.1e}"
              for r in rows if r.get("error_vs_float64") is not None]
    skipped = first.get("peers_skipped") or {}
    if skipped:
        lines += ["", "Skipped: " + "; ".join(f"{impl} ({why})" for impl, why in skipped.items()) + "."]
    if errors:
        lines += ["", "rfkit's max relative error against numpy float64 on the same projection (smallest L): "
                  + ", ".join(errors) + "."]
    return "\n".join(lines)
