#!/bin/bash
# The GPU check: rfkit's CUDA tests, the device bench and one smoke validation on CUDA, in about 5 minutes of a
# GPU machine with no network. Run from the repository root:  bash benchmarks/gpu_check.sh [OUT]
#
# The machine needs python3 with torch (CUDA), numpy, scipy, numba, xarray, matplotlib, seaborn, statsmodels,
# mpmath, sympy, tqdm, threadpoolctl, pytest and hypothesis. Missing packages travel as wheels in .whl/ (made where
# pip works, e.g. for performer-pytorch, the bench's peer:
#   pip download --no-deps --only-binary=:all: --python-version 3.12 --platform manylinux2014_x86_64 \
#       -d .whl performer-pytorch local-attention axial-positional-embedding einops
# ); they are installed into /tmp/site first. Results go to OUT (default: ./gpu-check-out):
#   tests.log, device_bench.jsonl (rfkit bench --device cuda --json), device_table.md (its table, for
#   docs/performance.md) and smoke/ (the core claims' smoke-tier verdicts with --backend torch --device cuda).
# A dry run without a GPU: DEVICE=cpu LENGTHS=256 bash benchmarks/gpu_check.sh /tmp/gpu-check
set -u
OUT=${1:-${OUT:-gpu-check-out}}
DEVICE=${DEVICE:-cuda}
LENGTHS=${LENGTHS:-4096 16384 65536}
mkdir -p "$OUT"
if compgen -G ".whl/*.whl" > /dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
    export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
# rfkit from this tree without installing it: the package's folders under one name (pyproject's package-dir)
PKG=$(mktemp -d)/pkg
mkdir -p "$PKG/rfkit"
for d in base estimators theory validation gpu; do ln -sfn "$PWD/$d" "$PKG/rfkit/$d"; done
export PYTHONPATH=$PKG${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
status=0
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 | tee "$OUT/device.txt"
echo "== CUDA tests"
timeout 150 python3 -m pytest -q -p no:cacheprovider -o addopts="" tests/test_gpu_*.py 2>&1 | tee "$OUT/tests.log" \
    | tail -5 || status=1
grep -q " failed" "$OUT/tests.log" && status=1
echo "== device bench"
# shellcheck disable=SC2086  # LENGTHS is a list
timeout 150 python3 -m rfkit.validation bench --device "$DEVICE" --lengths $LENGTHS --json > "$OUT/device_bench.jsonl" \
    || status=1
python3 - "$OUT" <<'EOF' || status=1
import json, sys
from pathlib import Path
from rfkit.validation.devicebench import device_table
out = Path(sys.argv[1])
rows = [json.loads(line) for line in (out / "device_bench.jsonl").read_text().splitlines() if line.strip()]
(out / "device_table.md").write_text(device_table(rows) + "\n")
print(device_table(rows))
EOF
echo "== smoke validation on $DEVICE (the core claims: linear attention, causality, features, ORF)"
# The whole registry's smoke tier needs about 6 minutes on CUDA (3,127 of 5,801 cells in 3 min 5 s on an H200,
# 2026-11-28: thousands of tiny cells, each a few kernel launches and host reads), more than this check's budget.
timeout 150 python3 -m rfkit.validation validate --tier smoke --paper core --backend torch --device "$DEVICE" \
    --out "$OUT/smoke" --no-figures --quiet > "$OUT/smoke.log" 2>&1 || status=1
tail -3 "$OUT/smoke.log"
exit $status
