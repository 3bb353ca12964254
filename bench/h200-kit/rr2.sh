#!/bin/bash
# Issue 37, call 2: record the reference on the all-PyPI stack while the kernel build runs.
#   bash /tmp/r/tree/bench/h200-kit/rr2.sh $PWD/build/h200r2
# Carried: build/h200r2/site-pypi.tar.xz (tests/gpu/stage_stack.py, PyPI only). The model is
# `--model tiny`: generation 2 writes the same bytes everywhere, so the compare run regenerates
# exactly these (the reference stores their digest and the compare checks it).
set -u
K=$1; R=/tmp/r; T0=$(date +%s); PY=/opt/torch/.venv/bin/python3; [ -x $PY ] || PY=$(command -v python3)
export PYTHONUNBUFFERED=1
mkdir -p /tmp/pypi /tmp/ref
tar -C /tmp/pypi -xJf $K/site-pypi.tar.xz || exit 3
echo "unpacked the PyPI stack in $(( $(date +%s) - T0 )) s"
export PYTHONPATH=/tmp/pypi/site:$R/tree/src
cd $R/tree
timeout 540 $PY -m sglforge smoke --profile h200-pd-1gpu --python $PY --lock /tmp/pypi/site/wheels.lock \
    --out /tmp/run-ref --model tiny --record-reference /tmp/ref/reference.json > /tmp/ref/smoke.log 2>&1
rc=$?
echo "record smoke exit $rc after $(( $(date +%s) - T0 )) s"
tail -n 45 /tmp/ref/smoke.log
cp /tmp/ref/reference.json /tmp/run-ref/receipt.json /tmp/run-ref/smoke-report.json $OUT/ 2>/dev/null
tar -C /tmp/run-ref -cJf $OUT/logs-ref.tar.xz logs smoke-summary.txt -C /tmp/ref smoke.log 2>/dev/null
echo "== kernel build: $(grep -a -o '\[[0-9]*/[0-9]*\]' /tmp/sgbuild/logs/sglang-kernel.log 2>/dev/null | tail -1) rc=$(cat /tmp/sgk-build.rc 2>/dev/null)"
ls -la $OUT
exit $rc
