# usage: WH=.wheelhouse-slim bash benchmarks/.gpu8.sh COMMIT ; harness GPU tests + verification time with sanitizer + real vLLM activation check
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site ${WH:-.wheelhouse}/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD/src:$PWD/tests PYTHONUNBUFFERED=1 ASTRA_GIT_COMMIT=$1
mkdir -p /tmp/r; snap() { tar czf $OUT/r.tgz -C /tmp r; }
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader > /tmp/r/gpu.txt
(timeout 500 python3 benchmarks/frameworks.py --gpu --only activation_kernels --limit 6 --out /tmp/r/fw > /tmp/r/frameworks-activation.txt 2>&1; echo "frameworks rc=$? t=${SECONDS}s" >> /tmp/r/frameworks-activation.txt) &
timeout 330 python3 -m pytest -q -p no:cacheprovider --timeout 250 -rfE --tb=short -m gpu tests/test_harness_gpu.py > /tmp/r/test_harness_gpu.txt 2>&1; echo "harness rc=$? t=${SECONDS}s: $(tail -1 /tmp/r/test_harness_gpu.txt)"; grep -E "^(FAILED|ERROR)" /tmp/r/test_harness_gpu.txt | cut -c1-300; snap
timeout $((575-SECONDS)) python3 benchmarks/verification_time.py --out /tmp/r/verification_time-$1.json > /tmp/r/verification_time.txt 2>&1; echo "vtime rc=$? t=${SECONDS}s"; snap
wait; rm -rf /tmp/r/fw/*/*/candidates; find /tmp/r -name "*.cubin" -delete; snap
tail -12 /tmp/r/verification_time.txt | cut -c1-250
grep -E "checked|launch sites" /tmp/r/frameworks-activation.txt | cut -c1-250; tail -2 /tmp/r/frameworks-activation.txt
