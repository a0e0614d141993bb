#!/usr/bin/env bash
# One device run for the verification protocol (docs/VERIFICATION.md): the harness's GPU tests
# (every bad-kernel fixture rejected for its reason, every shipped kernel accepted, the
# sanitizer-only fixtures), the precision measurements behind the error rule's thresholds, and
# the latency benchmark with each defence's cost. Details go to $OUT; the summary comes last.
set -u
OUT=${OUT:-/tmp/verification-out}
mkdir -p "$OUT"
export ASTRA_GPU_SUMMARY="$OUT/gpu-verdicts.txt"
: > "$ASTRA_GPU_SUMMARY"
start=$(date +%s)
timeout 220 python3 -m pytest -q -p no:cacheprovider --timeout 200 \
    ${TESTS:-tests/test_harness_gpu.py tests/test_bench_gpu.py} > "$OUT/pytest-gpu.txt" 2>&1
tests_rc=$?
# every correct-but-different kernel present (tests/fixtures/correct_kernels/<op>/) through a check
timeout 100 python3 benchmarks/check_kernels.py tests/fixtures/correct_kernels \
    > "$OUT/correct-kernels.txt" 2>&1
precision_rc=skipped
if [ "${PRECISION:-1}" = 1 ]; then
    timeout 90 python3 benchmarks/precision_stats.py > "$OUT/precision.txt" 2>&1
    precision_rc=$?
fi
timeout 120 python3 benchmarks/harness_latency.py --skip-inline --out "$OUT/harness_latency.json" \
    > "$OUT/latency.txt" 2>&1
latency_rc=$?
cp benchmarks/results/precision_stats-*.json "$OUT/" 2>/dev/null
echo "=== fixture and kernel verdicts ==="
cut -c1-230 "$ASTRA_GPU_SUMMARY"
echo "=== correct-but-different kernels ==="
cut -c1-230 "$OUT/correct-kernels.txt"
echo "=== precision (worst over correct kernels last) ==="
cut -c1-200 "$OUT/precision.txt" | tail -40
echo "=== latency and defence costs ==="
cat "$OUT/latency.txt"
echo "=== GPU tests (rc $tests_rc) ==="
grep -E "^(FAILED|ERROR)|passed|failed" "$OUT/pytest-gpu.txt" | tail -15
echo "rc: tests $tests_rc precision $precision_rc latency $latency_rc; $(( $(date +%s) - start )) s"
