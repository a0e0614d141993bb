#!/usr/bin/env bash
# `astra import` on a GPU host (issue 23), from the repository root with astra_graph importable
# and `.frameworks/` carried (benchmarks/releases.py --prefetch): the GPU and CPU tests of the
# import, the fixtures imported and one checked against itself with `astra check`, the vLLM
# activation file imported with its first N operations validated and checked against
# themselves, and `astra optimize` with no model endpoint on one imported operation. Each step
# has its own time limit; the whole is about 5 minutes. Logs and JSON land in OUT.
#
#   benchmarks/import_on_device.sh OUT [N]
set -u
out=${1:?usage: benchmarks/import_on_device.sh OUT [N]}
limit=${2:-3}
mkdir -p "$out"
ops=$out/ops

timeout 150 python3 -m pytest -q -p no:cacheprovider -rs \
  tests/test_import_gpu.py tests/test_framework_import.py > "$out/pytest.txt" 2>&1
echo "pytest: $(tail -1 "$out/pytest.txt")"

timeout 60 python3 -m astra_graph import tests/fixtures/framework/csrc/layernorm.cu \
  --out "$ops" > "$out/import-fixture.txt" 2>&1
echo "import fixture rc=$?: $(tail -1 "$out/import-fixture.txt")"
timeout 90 python3 -m astra_graph check "$ops/fused_add_rms_norm/production.cu" \
  "$ops/fused_add_rms_norm/production.cu" > "$out/check-self.txt" 2>&1
echo "check original vs original rc=$?: $(head -1 "$out/check-self.txt")"

(cd benchmarks && timeout 200 python3 frameworks.py --gpu --only vllm/csrc/activation_kernels.cu \
  --limit "$limit" --out "$out/frameworks") > "$out/frameworks.txt" 2>&1
echo "frameworks rc=$?: $(tail -1 "$out/frameworks.txt")"
cp benchmarks/results/frameworks-*.json "$out/" 2>/dev/null

timeout 120 python3 -m astra_graph optimize "$ops/fused_add_rms_norm/production.cu" \
  --rounds 1 --runs-dir "$out/runs" > "$out/optimize.txt" 2>&1
echo "optimize offline rc=$?: $(tail -1 "$out/optimize.txt")"
