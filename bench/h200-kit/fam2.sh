#!/bin/bash
# Issue 36, call 2: wait for fam1.sh's build, bring back the wheel, its manifest and logs.
#   bash bench/h200-kit/fam2.sh [LIMIT_S]
set -u
LIMIT=${1:-560}; R=$PWD; T0=$(date +%s)
while [ ! -f /tmp/sgk-build.rc ] && [ $(( $(date +%s) - T0 )) -lt $LIMIT ]; do
  echo "$(( $(date +%s) - T0 ))s $(grep -a -o '\[[0-9]*/[0-9]*\]' /tmp/sgbuild/logs/sglang-kernel.log 2>/dev/null | tail -1)"
  sleep 15
done
echo "== build rc=$(cat /tmp/sgk-build.rc 2>/dev/null || echo running)"
cp /tmp/sgk-build.log $OUT/ 2>/dev/null; cp /tmp/sgbuild/logs/sglang-kernel.log $OUT/kernel-build.log 2>/dev/null
grep -a -E "audit|built |sha256|rror|Elapsed|Maximum resident|jobs" /tmp/sgk-build.log | tail -30
W=$(ls $R/wheels/sglang_kernel-*.whl 2>/dev/null | head -1)
if [ -z "$W" ]; then tail -40 /tmp/sgk-build.log; grep -a -i -B2 -A8 " error" /tmp/sgbuild/logs/sglang-kernel.log | tail -40; exit 1; fi
sha256sum $W; ls -la $W
cp $W $OUT/sglang_kernel_sm120f.whl; cp $R/wheels/manifest.json $OUT/ 2>/dev/null
echo "$(basename $W)" > $OUT/wheel-name.txt
D=/tmp/x; rm -rf $D; mkdir -p $D; cd $D && python3 -m zipfile -e $W . >/dev/null
for so in $(find . -name '*.so' | sort); do
  echo "-- $so: $(cuobjdump --list-elf $so 2>/dev/null | grep -o 'sm_[0-9a-z]*' | sort | uniq -c | tr '\n' ' ') ptx: $(cuobjdump --list-ptx $so 2>/dev/null | grep -c ptx)"
done
echo "call 2 done after $(( $(date +%s) - T0 )) s"
