#!/bin/bash
# Issue 36, call 1: the product sglang-kernel (recipe as committed: cuda-archs sm_120f, the sm_12x
# family target) built on the GPU host as a 16-core build host, under setsid so it runs on
# between calls. Nothing here targets the H200: nvcc compiles sm_120f anywhere.
#   bash bench/h200-kit/fam1.sh $PWD/build/h200f [LIMIT_S]
# Carried in build/h200f/ (ignored): kernel-src.tar (`sglforge fetch sglang-kernel --no-export
# --bundle kernel-src.tar --depth 1` with the [substitutes] of config.toml), subst.tar.xz (those
# four directories), whl/ (toolchain.lock's cmake, ninja, scikit-build-core, wheel, packaging,
# pathspec, unidiff and sglforge.lock's cyclonedx-python-lib with its dependencies), bwrap/
# (Debian's bubblewrap 0.8.0 and its three libraries: the image has no bwrap). The sglforge that
# builds is the carried checkout itself.
set -u
K=$1; LIMIT=${2:-560}; R=$PWD; T0=$(date +%s)
export PYTHONUNBUFFERED=1
echo "== host"
nvidia-smi --query-gpu=name,driver_version,compute_cap --format=csv,noheader
nvcc --version | tail -1; nproc; free -g | head -2; python3 -V; uname -r
for t in bwrap cuobjdump readelf xz; do echo "$t: $(command -v $t || echo MISSING)"; done
echo "== toolchain venv"
python3 -m venv /tmp/tc || exit 1
SP=$(echo /tmp/tc/lib/python3.*/site-packages)
/tmp/tc/bin/python -m pip install -q --no-index --no-deps $K/whl/*.whl || exit 1
HSP=$(python3 -c 'import torch,os;print(os.path.dirname(os.path.dirname(torch.__file__)))')
echo "$HSP" > $SP/zz-host-torch.pth; echo "$R/src" > $SP/sglforge-src.pth
for d in $HSP/torch $HSP/torch-*.dist-info; do ln -sfn $d $SP/$(basename $d); done
/tmp/tc/bin/python -c "import sglforge, torch, cmake, ninja, cyclonedx; print('ok', sglforge.__file__, torch.__version__)" || exit 1
mkdir -p /tmp/subst /tmp/bw && tar -xJf $K/subst.tar.xz -C /tmp/subst || exit 3
if ! command -v bwrap >/dev/null; then
  cp $K/bwrap/* /tmp/bw/
  printf '#!/bin/sh\nexec /lib64/ld-linux-x86-64.so.2 --library-path /tmp/bw /tmp/bw/bwrap "$@"\n' > /tmp/bw/bwrap-run
  chmod +x /tmp/bw/bwrap-run /tmp/bw/bwrap
  if /tmp/bw/bwrap-run --ro-bind / / --dev /dev --proc /proc --tmpfs /tmp --unshare-pid --unshare-net true; then
    echo "carried bwrap works"; echo "export SGLFORGE_BWRAP=/tmp/bw/bwrap-run" > /tmp/bw/env.sh
  else
    echo "carried bwrap cannot make namespaces here: stopping (no build without the sandbox)"; exit 4
  fi
else : > /tmp/bw/env.sh; fi
cat > /tmp/build-env.sh <<EOE
export SGLFORGE_CONFIG=$R/bench/h200-kit/config.toml SGLFORGE_CACHE_DIR=/tmp/sgcache
export SGLFORGE_BUILD_ROOT=/tmp/sgbuild SGLFORGE_MEM_AVAILABLE=100GiB PYTHONUNBUFFERED=1
. /tmp/bw/env.sh
EOE
. /tmp/build-env.sh
echo "== fetch --from-bundle"
/usr/bin/time -f "%e s" /tmp/tc/bin/python -m sglforge fetch sglang-kernel --no-export --from-bundle $K/kernel-src.tar 2>&1 | tail -4
/tmp/tc/bin/python -m sglforge patches check --offline sglang-kernel 2>&1 | head -3
echo "== plan"
/tmp/tc/bin/python -m sglforge plan 2>&1 | grep -A4 "sglang-kernel" | head -8
cat > /tmp/build.sh <<EOE
. /tmp/build-env.sh
cd $R
/usr/bin/time -v /tmp/tc/bin/python -m sglforge build sglang-kernel --jobs 14 --no-wheel-cache > /tmp/sgk-build.log 2>&1
echo \$? > /tmp/sgk-build.rc
EOE
echo "== build (setsid) at $(( $(date +%s) - T0 )) s"
setsid nohup bash /tmp/build.sh > /dev/null 2>&1 < /dev/null &
sleep 30
grep -a -E "jobs|==>|rror|sandbox" /tmp/sgk-build.log | head -6
while [ ! -f /tmp/sgk-build.rc ] && [ $(( $(date +%s) - T0 )) -lt $LIMIT ]; do
  echo "$(( $(date +%s) - T0 ))s $(grep -a -o '\[[0-9]*/[0-9]*\]' /tmp/sgbuild/logs/sglang-kernel.log 2>/dev/null | tail -1) $(free -g | awk '/Mem/{print "used",$3"G"}')"
  sleep 30
done
echo "call 1 done after $(( $(date +%s) - T0 )) s; rc=$(cat /tmp/sgk-build.rc 2>/dev/null || echo running)"
tail -5 /tmp/sgk-build.log
