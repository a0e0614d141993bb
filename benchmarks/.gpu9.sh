# usage: WH=.wheelhouse-slim bash benchmarks/.gpu9.sh COMMIT ; redteam, then domain + bench GPU tests
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site ${WH:-.wheelhouse}/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD/src:$PWD/tests PYTHONUNBUFFERED=1 ASTRA_GIT_COMMIT=$1
mkdir -p /tmp/r; snap() { tar czf $OUT/r.tgz -C /tmp r; }
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader > /tmp/r/gpu.txt
REDTEAM_BUDGET_S=200 timeout 230 python3 benchmarks/redteam/run_redteam.py > /tmp/r/redteam.txt 2>&1; echo "redteam rc=$? t=${SECONDS}s"; snap
for f in tests/test_domain_gpu.py tests/test_bench_gpu.py; do timeout $((585-SECONDS)) python3 -m pytest -q -p no:cacheprovider --timeout 200 -rfE --tb=short -m gpu $f > /tmp/r/$(basename $f .py).txt 2>&1; echo "$f rc=$? t=${SECONDS}s: $(tail -1 /tmp/r/$(basename $f .py).txt)"; grep -E "^(FAILED|ERROR)" /tmp/r/$(basename $f .py).txt | cut -c1-300; snap; done
grep -iE "summary|exploits|controls" /tmp/r/redteam.txt | tail -6 | cut -c1-300; grep -E "\| exploit \| .*accepted \| bench ok|\| correct \| .*rejected" /tmp/r/redteam.txt | cut -c1-200
