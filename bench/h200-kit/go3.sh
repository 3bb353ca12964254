#!/bin/bash
# call 1: go.sh's setup, then `build && verify` of sglang-kernel (h200-verify) under setsid.
R=$PWD; LIMIT=${1:-560}; T0=$(date +%s)
nvidia-smi --query-gpu=name,driver_version,compute_cap --format=csv,noheader; nproc; python3 -V
python3 -m venv /tmp/tc || exit 1
SP=/tmp/tc/lib/python3.12/site-packages
/tmp/tc/bin/python -m pip install -q --no-index --no-deps build/h200/whl/*.whl || exit 1
HSP=$(python3 -c 'import torch,os;print(os.path.dirname(os.path.dirname(torch.__file__)))')
echo "$HSP" > $SP/zz-host-torch.pth; echo "$R/src" > $SP/sglforge-src.pth
for d in $HSP/torch $HSP/torch-*.dist-info; do ln -sfn $d $SP/$(basename $d); done
/tmp/tc/bin/python -c "import sglforge, torch, cmake, ninja; print('ok', torch.__version__)" || exit 1
mkdir -p /tmp/sgcache /tmp/subst && cp -a build/h200/cache/. /tmp/sgcache/ && tar -xzf build/h200/subst.tar.gz -C /tmp/subst
export SGLFORGE_CONFIG=$R/build/h200/config.toml SGLFORGE_CACHE_DIR=/tmp/sgcache SGLFORGE_BUILD_ROOT=/tmp/sgbuild
/tmp/tc/bin/python -m sglforge patches check --offline sglang-kernel 2>&1 | head -2
cat > /tmp/chain.sh <<EOC
cd $R
/usr/bin/time -v /tmp/tc/bin/python -m sglforge build --target h200-verify sglang-kernel --jobs 12 > /tmp/sgk-build.log 2>&1 || exit 1
cp -a wheels/targets/h200-verify /tmp/built-of-record
/usr/bin/time -v /tmp/tc/bin/python -m sglforge verify --target h200-verify sglang-kernel --jobs 14 --out /tmp/verify-out > /tmp/sgk-verify.log 2>&1
echo done > /tmp/chain.done
EOC
SGLFORGE_CONFIG=$SGLFORGE_CONFIG SGLFORGE_CACHE_DIR=/tmp/sgcache SGLFORGE_BUILD_ROOT=/tmp/sgbuild setsid nohup bash /tmp/chain.sh > /tmp/chain.log 2>&1 < /dev/null &
sleep 20
while [ $(( $(date +%s) - T0 )) -lt $LIMIT ]; do
  pgrep -f "chain.sh" >/dev/null || { echo "chain ended"; break; }
  P=$(grep -a -o "\[[0-9]*/[0-9]*\]" /tmp/sgbuild/logs/sglang-kernel.log 2>/dev/null | tail -1)
  echo "$(( $(date +%s) - T0 ))s $P $(free -g | awk '/Mem/{print "used",$3"G"}') $(ls /tmp/built-of-record 2>/dev/null | head -1)"
  sleep 30
done
grep -a -E "built |sha256|error|Elapsed|Maximum resident" /tmp/sgk-build.log | tail -12
