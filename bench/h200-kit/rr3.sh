#!/bin/bash
# Issue 37, call 3: unpack our stack (every wheel sglforge-built but the kernel), wait for the
# kernel build of call 1, check how its ELF files resolve, add it to the site.
#   bash /tmp/r/tree/bench/h200-kit/rr3.sh $PWD/build/h200r3 [LIMIT_S]
# Carried: build/h200r3/site-ours.tar.xz (stage_stack.py --without sglang-kernel) and
# build/h200r3/whl/ (cryptography: signs receipts where ssh-keygen is missing, qualification/receipt.py).
set -u
K=$1; LIMIT=${2:-520}; R=/tmp/r; T0=$(date +%s); PY=/opt/torch/.venv/bin/python3; [ -x $PY ] || PY=$(command -v python3)
export PYTHONUNBUFFERED=1
mkdir -p /tmp/ours /tmp/signlib
tar -C /tmp/ours -xJf $K/site-ours.tar.xz || exit 3
$PY -m pip install -q --no-index --no-deps --no-compile --target /tmp/signlib $K/whl/*.whl || exit 3
echo "unpacked our stack and the signing library in $(( $(date +%s) - T0 )) s"
while [ ! -f /tmp/sgk-build.rc ] && [ $(( $(date +%s) - T0 )) -lt $LIMIT ]; do
  echo "$(( $(date +%s) - T0 ))s $(grep -a -o '\[[0-9]*/[0-9]*\]' /tmp/sgbuild/logs/sglang-kernel.log 2>/dev/null | tail -1)"
  sleep 20
done
echo "== build rc=$(cat /tmp/sgk-build.rc 2>/dev/null || echo running)"
grep -a -E "built |sha256|rror|Elapsed|Maximum resident|MAX_JOBS" /tmp/sgk-build.log | tail -12
W=$(ls $R/build-tree/wheels/targets/h200-verify/sglang_kernel-*.whl 2>/dev/null | head -1)
if [ -z "$W" ]; then
  tail -40 /tmp/sgk-build.log; grep -a -i -B2 -A8 " error" /tmp/sgbuild/logs/sglang-kernel.log | tail -40
  exit 1
fi
sha256sum $W; cp $W $R/build-tree/wheels/targets/h200-verify/manifest.json $OUT/
cp /tmp/sgk-build.log $OUT/
echo "== ELF files of $(basename $W)"
D=/tmp/sp-kernel; rm -rf $D; mkdir -p $D
HSP=$(python3 -c 'import torch,os;print(os.path.dirname(os.path.dirname(torch.__file__)))')
for d in $HSP/torch $HSP/nvidia; do ln -sfn $d $D/$(basename $d); done
$PY -m pip install -q --no-index --no-deps --target $D $W
for so in $(cd $D && ls sgl_kernel/*.so sgl_kernel/*/*.so 2>/dev/null); do
  echo "-- $so: $(readelf -d $D/$so | grep -E 'RUNPATH|RPATH' | sed 's/.*Library //')"
  echo "   env -i ldd not found: $(env -i ldd $D/$so | grep -c 'not found')"
  cuobjdump --list-elf $D/$so 2>/dev/null | grep -o "sm_[0-9a-z]*" | sort | uniq -c | head -3
done
echo "== add to our site"
$PY $R/tree/tests/gpu/stage_stack.py /tmp/ours --add-to --sglforge-wheel $W || exit 1
grep -B1 -A1 "sglang-kernel" /tmp/ours/site/wheels.lock
echo "call 3 done after $(( $(date +%s) - T0 )) s"
