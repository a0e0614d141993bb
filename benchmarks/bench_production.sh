#!/usr/bin/env bash
# `astra bench` of every production kernel against its naive kernel and against itself, in each
# of the contract's dtypes, device mode, as JSON (device, date, commit, and per shape the roof
# and the latency floor). Results land in OUT/production-bench.tgz, refreshed after each run, so
# a run cut short still returns what it finished.
#
#   benchmarks/bench_production.sh OUT
set -u
out=${1:?usage: benchmarks/bench_production.sh OUT}
work=$(mktemp -d)
r=$work/r
mkdir -p "$r"
for op in silu_and_mul merge_attn_states_lse fused_add_rmsnorm; do
  for against in naive production; do
    for dtype in float16 bfloat16; do
      name="bench-$op-vs-$against-$dtype"
      timeout 60 python3 -m astra_graph.cli bench "kernels/$op/production.cu" \
        --against "kernels/$op/$against.cu" --dtype "$dtype" --json \
        > "$r/$name.json" 2> "$r/$name.err"
      echo "$name rc=$?"
      tar czf "$out/production-bench.tgz" -C "$work" r
    done
  done
done
