# usage: WH=.wheelhouse bash benchmarks/.gpu10.sh COMMIT FILES... ; GPU test files in turn, then astra optimize silu_and_mul
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site ${WH:-.wheelhouse}/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD/src:$PWD/tests PYTHONUNBUFFERED=1 ASTRA_GIT_COMMIT=$1; shift
mkdir -p /tmp/r; snap() { tar czf $OUT/r.tgz -C /tmp r; }
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader > /tmp/r/gpu.txt
if [ "${OPT:-1}" = 1 ]; then
  (cd /tmp && timeout 200 python3 -m astra_graph optimize silu_and_mul --tune-budget 10 --runs-dir /tmp/r/runs > /tmp/r/optimize-silu.txt 2>&1; echo "optimize silu rc=$? t=${SECONDS}s" >> /tmp/r/optimize-silu.txt); tail -3 /tmp/r/optimize-silu.txt; snap
fi
for f in "$@"; do left=$((585-SECONDS)); [ $left -lt 20 ] && { echo "SKIP $f"; continue; }; timeout $left python3 -m pytest -q -p no:cacheprovider --timeout 240 -rfE --tb=short -m gpu $f > /tmp/r/$(basename $f .py).txt 2>&1; echo "$f rc=$? t=${SECONDS}s: $(tail -1 /tmp/r/$(basename $f .py).txt)"; grep -E "^(FAILED|ERROR)" /tmp/r/$(basename $f .py).txt | cut -c1-300; snap; done
find /tmp/r -name "*.cubin" -delete; rm -rf /tmp/r/runs/*/candidates /tmp/r/runs/*/checkpoint*; snap
