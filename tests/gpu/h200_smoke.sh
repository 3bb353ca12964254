#!/bin/bash
# issue 13: one real H200 PD smoke through sglforge, stack from site.tar.xz on PYTHONPATH.
# Run from a copy of the project's src/, profiles/ and lockfiles/ with site.tar.xz beside them
# (tests/gpu/stage_stack.py), e.g. an ignored .gpu/ folder carried to the GPU host:
#   bash .gpu/h200_smoke.sh                       # profile h200-pd-2gpu
#   PROFILE=h200-pd-1gpu bash .gpu/h200_smoke.sh  # both roles on GPU 0
# $OUT receives smoke.log, smoke-report.json, smoke-summary.txt and the server/router logs.
set -o pipefail
cd "$(dirname "$0")"
export PYTHONUNBUFFERED=1 PATH=$PATH:/usr/local/cuda/bin
PY=/opt/torch/.venv/bin/python3; [ -x $PY ] || PY=$(command -v python3)
T0=$(date +%s)
mkdir -p /tmp/stack && tar -xJf site.tar.xz -C /tmp/stack || exit 3
echo "unpacked in $(( $(date +%s) - T0 )) s" | tee $OUT/smoke.log
export PYTHONPATH=/tmp/stack/site:$PWD/src
{ nvidia-smi --query-gpu=index,name,compute_cap,memory.total,driver_version --format=csv,noheader; nvcc --version | tail -1; $PY -c 'import torch; print("torch", torch.__version__, torch.version.cuda, torch.cuda.device_count())'; } 2>&1 | tee -a $OUT/smoke.log
PROFILE=${PROFILE:-h200-pd-2gpu}
timeout ${SMOKE_LIMIT:-540} $PY -m sglforge smoke --profile $PROFILE --python $PY --model tiny --out /tmp/run 2>&1 | tee -a $OUT/smoke.log
echo "smoke exit ${PIPESTATUS[0]} after $(( $(date +%s) - T0 )) s" | tee -a $OUT/smoke.log
cp /tmp/run/smoke-report.json /tmp/run/smoke-summary.txt $OUT/ 2>/dev/null
for f in prefill decode router tiny-model; do cp /tmp/run/logs/$f.log $OUT/$f.log 2>/dev/null; done
ls -la $OUT
