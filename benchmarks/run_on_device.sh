#!/usr/bin/env bash
# Reproduce benchmarks/results on a GPU host (from the repository root, astra_graph importable):
# the GPU tests of the timing harness, `astra bench` production vs naive for every operation in
# both modes (JSON), and the harness latency benchmark. Everything lands in OUT/results.tgz,
# refreshed after each step, so a run cut short still returns what it finished.
#
#   benchmarks/run_on_device.sh OUT [DEADLINE_S]
#
# The load_inline builds (CPU only) run in the background while the GPU tests run; timing
# that measures host overhead (the CLI runs, per-call mode) starts only after they finish.
set -u
out=${1:?usage: benchmarks/run_on_device.sh OUT [DEADLINE_S]}
deadline=${2:-280}
work=$(mktemp -d)
r=$work/r
mkdir -p "$r"
snap() { tar czf "$out/results.tgz" -C "$work" r; }

timeout 200 python3 benchmarks/harness_latency.py --inline-only --out "$r/inline.json" \
  > "$r/inline.log" 2>&1 &
inline_pid=$!
timeout 100 python3 -m pytest -q tests/test_bench_gpu.py -p no:cacheprovider -rs \
  > "$r/pytest.txt" 2>&1
echo "pytest: $(tail -1 "$r/pytest.txt")"
wait "$inline_pid"
echo "load_inline rc=$?"
snap
for op in silu_and_mul fused_add_rmsnorm merge_attn_states_lse; do
  for mode in device per-call; do
    timeout 45 python3 -m astra_graph.cli bench "kernels/$op/production.cu" \
      --against "kernels/$op/naive.cu" --mode "$mode" --json \
      > "$r/bench-$op-$mode.json" 2> "$r/bench-$op-$mode.err"
    echo "bench $op $mode rc=$?"
  done
done
snap
left=$((deadline - SECONDS))
timeout "$left" python3 benchmarks/harness_latency.py --inline-from "$r/inline.json" \
  --out "$r/harness_latency.json" > "$r/latency.txt" 2>&1
echo "latency rc=$? (limit ${left}s)"
cat "$r/latency.txt"
snap
