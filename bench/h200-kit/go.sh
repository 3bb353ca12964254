#!/bin/bash
# call 1 on the H200: probe, toolchain venv over the host's torch venv, source cache, start the
# sm_90a sglang-kernel build (setsid), poll until $1 seconds have passed.
R=$PWD; LIMIT=${1:-540}; T0=$(date +%s)
echo "== host"; nvidia-smi --query-gpu=name,driver_version,compute_cap,memory.total --format=csv,noheader
nvcc --version | tail -2; nproc; free -g | head -2; python3 -V
ls /usr/local/cuda/include/cublasLt.h /usr/local/cuda/lib64/libnvrtc.so /usr/local/cuda/lib64/libcublas.so 2>&1
python3 -c "import torch; print('torch', torch.__version__, torch.version.cuda)"
python3 -m pip list 2>/dev/null | grep -i -E "^(cmake|ninja|scikit-build-core|wheel|packaging|pathspec) "
echo "== toolchain venv"
python3 -m venv /tmp/tc || exit 1
SP=/tmp/tc/lib/python3.12/site-packages
/tmp/tc/bin/python -m pip install -q --no-index --no-deps build/h200/whl/*.whl || exit 1
echo "$(python3 -c 'import torch,os;print(os.path.dirname(os.path.dirname(torch.__file__)))')" > $SP/zz-host-torch.pth
echo "$R/src" > $SP/sglforge-src.pth
HSP=$(python3 -c 'import torch,os;print(os.path.dirname(os.path.dirname(torch.__file__)))')
# scikit-build-core hands CMake only the build venv's own site-packages: torch must be there
for d in $HSP/torch $HSP/torch-*.dist-info; do ln -sfn $d $SP/$(basename $d); done
/tmp/tc/bin/python -c "import sglforge, torch, cmake, ninja; print('ok', sglforge.__file__, torch.__version__)"
mkdir -p /tmp/sgcache /tmp/subst && cp -a build/h200/cache/. /tmp/sgcache/ && tar -xzf build/h200/subst.tar.gz -C /tmp/subst
export SGLFORGE_CONFIG=$R/build/h200/config.toml SGLFORGE_CACHE_DIR=/tmp/sgcache SGLFORGE_BUILD_ROOT=/tmp/sgbuild
echo "== plan"; /tmp/tc/bin/python -m sglforge plan --target h200-verify 2>&1 | grep -E "sglang-kernel|SUBST" | head -20
echo "== build"
setsid nohup /usr/bin/time -v /tmp/tc/bin/python -m sglforge build --target h200-verify sglang-kernel --jobs 12 > /tmp/sgk-build.log 2>&1 < /dev/null &
sleep 20
while [ $(( $(date +%s) - T0 )) -lt $LIMIT ]; do
  if ! pgrep -f "sglforge build --target" >/dev/null; then echo "build process ended"; break; fi
  P=$(grep -a -o "\[[0-9]*/[0-9]*\]" /tmp/sgbuild/logs/sglang-kernel.log 2>/dev/null | tail -1)
  echo "$(( $(date +%s) - T0 ))s $P $(free -g | awk '/Mem/{print "used",$3"G"}')"
  sleep 30
done
grep -v "^Requirement" /tmp/sgk-build.log | tail -30
