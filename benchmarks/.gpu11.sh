# usage: WH=.wheelhouse-slim bash benchmarks/.gpu11.sh COMMIT ; gelu: accuracy test, correct kernels, anchors vs vLLM, serving ops, domain
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site ${WH:-.wheelhouse}/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:$PWD/src:$PWD/tests PYTHONUNBUFFERED=1 ASTRA_GIT_COMMIT=$1
mkdir -p /tmp/r/anchors; snap() { tar czf $OUT/r.tgz -C /tmp r; }
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader > /tmp/r/gpu.txt
run() { f=$1; timeout $((585-SECONDS)) python3 -m pytest -q -s -p no:cacheprovider --timeout 200 -rfE --tb=short -m gpu $f > /tmp/r/$(basename $f .py).txt 2>&1; echo "$f rc=$? t=${SECONDS}s: $(tail -1 /tmp/r/$(basename $f .py).txt)"; grep -E "^(FAILED|ERROR)" /tmp/r/$(basename $f .py).txt | cut -c1-300; snap; }
run tests/test_gelu_activation_accuracy_gpu.py
timeout 240 python3 benchmarks/anchors.py --ops gelu_and_mul,gelu_tanh_and_mul --frameworks vllm --vllm .frameworks/vllm-0.33.0 --out-dir /tmp/r/anchors > /tmp/r/anchors.txt 2>&1; echo "anchors rc=$? t=${SECONDS}s"; snap
mkdir -p /tmp/ck; for op in gelu_and_mul gelu_tanh_and_mul; do ln -s $PWD/tests/fixtures/correct_kernels/$op /tmp/ck/$op; done
(timeout 200 python3 benchmarks/check_kernels.py /tmp/ck > /tmp/r/correct_gelu.txt 2>&1; echo "rc=$? t=${SECONDS}s" >> /tmp/r/correct_gelu.txt) &
run tests/test_serving_ops_gpu.py
run tests/test_domain_gpu.py
wait; echo "correct: $(tail -2 /tmp/r/correct_gelu.txt | tr '\n' ' ')"; grep -A1 REJECTED /tmp/r/correct_gelu.txt | cut -c1-300; snap
grep -E "geomean|slower" /tmp/r/anchors.txt | grep -v "^  [0-9]" | tail -8 | cut -c1-260
