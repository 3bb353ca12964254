#!/bin/bash
# call 2: wait for the chain; ELF checks of the new wheel (and the old one); kernel tests on the GPU.
LIMIT=${1:-500}; T0=$(date +%s); R=$PWD
while [ $(( $(date +%s) - T0 )) -lt $LIMIT ] && pgrep -f "chain.sh" >/dev/null; do
  P=$(grep -a -o "\[[0-9]*/[0-9]*\]" /tmp/sgbuild/logs/sglang-kernel.log 2>/dev/null | tail -1)
  echo "$(( $(date +%s) - T0 ))s $P"; sleep 20
done
grep -a -E "built |sha256|error|Elapsed|Maximum resident" /tmp/sgk-build.log | tail -12
echo "== verify"; tail -15 /tmp/sgk-verify.log 2>/dev/null
pgrep -f "chain.sh" >/dev/null && echo "chain still running"
W=$(ls /tmp/built-of-record/sglang_kernel-*.whl 2>/dev/null | head -1)
[ -n "$W" ] || { tail -40 /tmp/sgk-build.log; grep -a -i -B2 -A8 "error" /tmp/sgbuild/logs/sglang-kernel.log | tail -40; exit 1; }
sha256sum $W; cp $W /tmp/built-of-record/manifest.json $OUT/
HSP=$(python3 -c 'import torch,os;print(os.path.dirname(os.path.dirname(torch.__file__)))')
for tag in new; do
  X=$W
  D=/tmp/sp-$tag; rm -rf $D; mkdir -p $D
  for d in $HSP/torch $HSP/nvidia; do ln -sfn $d $D/$(basename $d); done
  python3 -m pip install -q --no-index --no-deps --target $D $X
  echo "== $tag: $(basename $X)"
  for so in $(cd $D && ls sgl_kernel/*.so sgl_kernel/*/*.so); do
    echo "-- $so: $(readelf -d $D/$so | grep -E 'RUNPATH|RPATH' | sed 's/.*Library //')"
    echo "   env -i ldd not found: $(env -i ldd $D/$so | grep -c 'not found')"
    env -i /usr/bin/python3 -c "import ctypes,sys; ctypes.CDLL(sys.argv[1]); print('   CDLL without torch: ok')" $D/$so 2>&1 | tail -1
  done
done
cd /tmp/sgbuild/src/sglang-kernel/sgl-kernel/tests || exit 1
mkdir -p /tmp/stub/sglang/srt && touch /tmp/stub/sglang/__init__.py && printf "def is_hip():\n    return False\n\ndef is_musa():\n    return False\n" > /tmp/stub/sglang/srt/utils.py && touch /tmp/stub/sglang/srt/__init__.py
export PYTHONPATH=/tmp/sp-new:/tmp/stub
python3 -c "import sgl_kernel, torch; print('sgl_kernel', sgl_kernel.__file__, torch.cuda.get_device_name())" 2>&1 | tail -2
timeout ${2:-200} python3 -m pytest -q -p no:cacheprovider -x test_activation.py test_per_token_quant_fp8.py test_int8_gemm.py test_fp8_gemm.py 2>&1 | tail -6 | tee $OUT/kernel-tests.txt
