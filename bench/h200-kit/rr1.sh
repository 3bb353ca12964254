#!/bin/bash
# Issue 37, call 1 of the run of record: the sm_90a sglang-kernel build, started under setsid
# so it runs on while later calls record the PyPI-stack reference on the GPU.
#   bash bench/h200-kit/rr1.sh $PWD/build/h200r
# Carried in build/h200r/ (ignored): tree-build.tar.gz (`git archive 0395699`: the sglforge that
# builds, the same commit that built the other five wheels), tree.tar.gz (`git archive` of the
# commit with this kit: the smoke, staging and receipts), kernel-src.tar (`sglforge fetch
# sglang-kernel --bundle --depth 1`), subst.tar.gz (the [substitutes] of config.toml), whl/ (the
# toolchain.lock versions of cmake, ninja, scikit-build-core, wheel, packaging, pathspec,
# unidiff; torch 2.11.0+cu130 is the host's). Everything else lives in /tmp/r on the host.
set -u
K=$1; R=/tmp/r; T0=$(date +%s)
export PYTHONUNBUFFERED=1
echo "== host"
nvidia-smi --query-gpu=name,driver_version,compute_cap,memory.total --format=csv,noheader
nvcc --version | tail -1; nproc; free -g | head -2; python3 -V; uname -r
for t in bwrap ssh-keygen cuobjdump readelf strip xz; do echo "$t: $(command -v $t || echo MISSING)"; done
python3 -c "import torch; print('torch', torch.__version__, torch.version.cuda)"
mkdir -p $R/build-tree $R/tree /tmp/subst
tar -xzf $K/tree-build.tar.gz -C $R/build-tree && tar -xzf $K/tree.tar.gz -C $R/tree || exit 3
echo "== toolchain venv"
python3 -m venv /tmp/tc || exit 1
SP=/tmp/tc/lib/python3.12/site-packages
/tmp/tc/bin/python -m pip install -q --no-index --no-deps $K/whl/*.whl || exit 1
HSP=$(python3 -c 'import torch,os;print(os.path.dirname(os.path.dirname(torch.__file__)))')
echo "$HSP" > $SP/zz-host-torch.pth; echo "$R/build-tree/src" > $SP/sglforge-src.pth
# scikit-build-core hands CMake only the build venv's own site-packages: torch must be there
for d in $HSP/torch $HSP/torch-*.dist-info; do ln -sfn $d $SP/$(basename $d); done
/tmp/tc/bin/python -c "import sglforge, torch, cmake, ninja; print('ok', sglforge.__file__, torch.__version__)" || exit 1
tar -xzf $K/subst.tar.gz -C /tmp/subst || exit 3
cat > /tmp/r/build-env.sh <<EOF
export SGLFORGE_CONFIG=$R/tree/bench/h200-kit/config.toml SGLFORGE_CACHE_DIR=/tmp/sgcache
export SGLFORGE_BUILD_ROOT=/tmp/sgbuild SGLFORGE_MEM_AVAILABLE=100GiB
EOF
. /tmp/r/build-env.sh
cd $R/build-tree
echo "== fetch --from-bundle"
/usr/bin/time -f "%e s" /tmp/tc/bin/python -m sglforge fetch sglang-kernel --no-export \
    --from-bundle $K/kernel-src.tar 2>&1 | tail -8
echo "== plan"
/tmp/tc/bin/python -m sglforge plan --target h200-verify 2>&1 | grep -E "sglang-kernel|SUBST|key" | head -12
cat > /tmp/r/build.sh <<EOF
. /tmp/r/build-env.sh
cd $R/build-tree
/usr/bin/time -v /tmp/tc/bin/python -m sglforge build --target h200-verify sglang-kernel --jobs 12 > /tmp/sgk-build.log 2>&1
echo \$? > /tmp/sgk-build.rc
EOF
echo "== build (setsid) at $(( $(date +%s) - T0 )) s"
setsid nohup bash /tmp/r/build.sh > /dev/null 2>&1 < /dev/null &
sleep 25
grep -a -E "MAX_JOBS|==>|error" /tmp/sgk-build.log | head -5
echo "call 1 done after $(( $(date +%s) - T0 )) s"
