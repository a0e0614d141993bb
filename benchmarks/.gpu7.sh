# usage: WH=.wheelhouse-slim bash benchmarks/.gpu7.sh COMMIT ; import + domain + real vLLM activation check
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site ${WH:-.wheelhouse}/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD/src:$PWD/tests PYTHONUNBUFFERED=1 ASTRA_GIT_COMMIT=$1
mkdir -p /tmp/r; snap() { tar czf $OUT/r.tgz -C /tmp r; }
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader > /tmp/r/gpu.txt
(timeout 400 python3 benchmarks/frameworks.py --gpu --only activation_kernels --limit 6 --out /tmp/r/fw > /tmp/r/frameworks-activation.txt 2>&1; echo "frameworks rc=$? t=${SECONDS}s" >> /tmp/r/frameworks-activation.txt) &
for f in tests/test_import_gpu.py tests/test_domain_gpu.py; do timeout $((560-SECONDS)) python3 -m pytest -q -p no:cacheprovider --timeout 250 -rfE --tb=short -m gpu $f > /tmp/r/$(basename $f .py).txt 2>&1; echo "$f rc=$? t=${SECONDS}s: $(tail -1 /tmp/r/$(basename $f .py).txt)"; grep -E "^(FAILED|ERROR)" /tmp/r/$(basename $f .py).txt | cut -c1-300; snap; done
wait; rm -rf /tmp/r/fw/*/candidates; find /tmp/r -name "*.cubin" -delete; snap
tail -25 /tmp/r/frameworks-activation.txt | cut -c1-250
