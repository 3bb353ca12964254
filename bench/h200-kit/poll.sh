#!/bin/bash
# later calls: poll the build until it ends or $1 s pass; then test the wheel on the GPU.
LIMIT=${1:-540}; T0=$(date +%s); R=$PWD
while [ $(( $(date +%s) - T0 )) -lt $LIMIT ] && pgrep -f "sglforge build --target" >/dev/null; do
  P=$(grep -a -o "\[[0-9]*/[0-9]*\]" /tmp/sgbuild/logs/sglang-kernel.log 2>/dev/null | tail -1)
  echo "$(( $(date +%s) - T0 ))s $P $(free -g | awk '/Mem/{print "used",$3"G"}')"; sleep 30
done
if pgrep -f "sglforge build --target" >/dev/null; then echo "still building"; exit 0; fi
grep -v "^Requirement" /tmp/sgk-build.log | tail -40
W=$(ls $R/wheels/targets/h200-verify/sglang_kernel-*.whl 2>/dev/null | head -1)
[ -n "$W" ] || { grep -a -i -B2 -A8 "error" /tmp/sgbuild/logs/sglang-kernel.log | tail -60; exit 1; }
ls -la $W; sha256sum $W; cp $W $R/wheels/targets/h200-verify/manifest.json $OUT/ 2>/dev/null
python3 -m pip install -q --no-index --no-deps --target /tmp/sk $W
cd /tmp/sgbuild/src/sglang-kernel/sgl-kernel/tests || exit 1
export PYTHONPATH=/tmp/sk
python3 -c "import sgl_kernel, torch; print('sgl_kernel', sgl_kernel.__file__, torch.cuda.get_device_name())" 2>&1 | tail -3
timeout ${2:-240} python3 -m pytest -q -p no:cacheprovider -x test_activation.py test_per_token_quant_fp8.py test_int8_gemm.py test_fp8_gemm.py 2>&1 | tail -25 | tee $OUT/kernel-tests.txt
