#!/usr/bin/env bash
# The guide's end-to-end run on a GPU: validate, check against production, optimize (offline),
# and a new operation from `astra new` to its first `astra optimize`, timed. Summary last.
set -u
A="python3 -m astra_graph.cli"
OUTDIR=${OUT:-/tmp/byok_out}
mkdir -p "$OUTDIR"
step() {
  local t0=$EPOCHREALTIME
  "$@" > "$OUTDIR/step.log" 2>&1
  local rc=$?
  local dt
  dt=$(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }')
  tail -4 "$OUTDIR/step.log"
  echo "STEP rc=$rc ${dt}s: $*" | tee -a "$OUTDIR/summary.txt"
  cat "$OUTDIR/step.log" >> "$OUTDIR/all.log"
}
ACT=examples/byok/act_and_mul/act_and_mul.cu
NORM=examples/byok/fused_add_rmsnorm/fused_add_rmsnorm.cu
step $A validate $ACT
step $A validate $NORM
step $A check silu_and_mul $ACT
step $A check fused_add_rmsnorm $NORM
step $A optimize $ACT
step $A optimize $NORM
# a new operation: draft, the decisions a user writes (scripted here), validate, optimize
OPS=$(mktemp -d)
step $A new act_demo --from examples/byok/act_and_mul/activation_kernels.cuh --entry byok::act_and_mul_kernel --path "$OPS"
python3 examples/byok/fill_act_demo.py "$OPS/act_demo"
step $A validate act_demo --path "$OPS"
step $A optimize act_demo --path "$OPS"
for r in runs/*/report.md; do echo "== $r" >> "$OUTDIR/reports.md"; head -60 "$r" >> "$OUTDIR/reports.md"; done
echo "=== SUMMARY"; cat "$OUTDIR/summary.txt"
