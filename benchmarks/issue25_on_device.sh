#!/usr/bin/env bash
# One device run for issue 25 (items 1, 2 and 5), from the repository root with astra_graph
# importable: the merge kernels checked against naive in both dtypes (production, and the
# FlashInfer-launch port on the shapes FlashInfer supports), the timing harness's GPU tests (the
# copy and launch floors timed beside the kernels), production against FlashInfer's MergeState
# launch at every supported shape in both dtypes (benchmarks/merge_sweep.py), production against
# FlashInfer's own kernels built from its release headers (benchmarks/anchors.py: merge and silu;
# tables under $OUT/anchors), and the tuner-only gain from each naive kernel
# (benchmarks/tuning_speedup.py, a BUDGET_S-second sweep per kernel). Details go to $OUT; the
# summary comes last. About 4-5 minutes on an H100. FLASHINFER names the release's include
# folder (fetched where there is a registry by benchmarks/releases.py --prefetch, and carried).
#
#   OUT=/tmp/issue25 bash benchmarks/issue25_on_device.sh
set -u
OUT=${OUT:-/tmp/issue25-out}
BUDGET_S=${BUDGET_S:-35}
FLASHINFER=${FLASHINFER:-.frameworks/flashinfer-python-0.7.2.post1/flashinfer/data/include}
mkdir -p "$OUT"
op=merge_attn_states_lse
timeout 60 python3 -m astra_graph check "$op/naive" "$op/production" \
    > "$OUT/check-production.txt" 2>&1
check_rc=$?
timeout 40 python3 -m astra_graph check "$op/naive" \
    benchmarks/technique_ports/merge_state_flashinfer.cu --suite tuning \
    > "$OUT/check-port.txt" 2>&1
port_rc=$?
timeout 80 python3 -m pytest -q -p no:cacheprovider tests/test_bench_gpu.py \
    > "$OUT/pytest-bench-gpu.txt" 2>&1
tests_rc=$?
timeout 80 python3 benchmarks/merge_sweep.py --out "$OUT/merge_sweep.json" \
    > "$OUT/merge_sweep.txt" 2>&1
sweep_rc=$?
timeout 60 python3 benchmarks/anchors.py --ops merge_attn_states_lse,silu_and_mul \
    --flashinfer "$FLASHINFER" --out-dir "$OUT/anchors" > "$OUT/anchors.txt" 2>&1
anchors_rc=$?
timeout 170 python3 benchmarks/tuning_speedup.py --implementations naive --budget-s "$BUDGET_S" \
    --out "$OUT/tuning_naive.json" > "$OUT/tuning_naive.txt" 2>&1
tuning_rc=$?
echo "=== astra check naive vs production, $op (rc=$check_rc) ==="
tail -3 "$OUT/check-production.txt"
echo "=== astra check naive vs FlashInfer-launch port, tuning suite (rc=$port_rc) ==="
tail -3 "$OUT/check-port.txt"
echo "=== tests/test_bench_gpu.py (rc=$tests_rc) ==="
tail -3 "$OUT/pytest-bench-gpu.txt"
echo "=== production vs FlashInfer's MergeState launch (rc=$sweep_rc) ==="
grep -v "^  \|^default " "$OUT/merge_sweep.txt" | tail -40
echo "=== production vs FlashInfer's release kernels (rc=$anchors_rc) ==="
tail -8 "$OUT/anchors.txt"
echo "=== tuner-only gain from naive (rc=$tuning_rc; geomean over tuned and held-out shapes) ==="
grep "geomean" "$OUT/tuning_naive.txt"
