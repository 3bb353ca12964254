#!/bin/bash
# Issue 34, call 1 of the cold-start visit: the PyPI 0.5.15 stack (tests/gpu/stage_stack.py, carried
# in build/h34/site.tar.xz), bytecode compiled as pip would at install, then cs-chain.sh under
# setsid (empty = warm, artifact, second_start, import profile) and a wait of up to $1 seconds.
#   bash bench/h200-kit/cs1.sh 540
set -u
T0=$(date +%s); C=/tmp/cs; PY=/opt/torch/.venv/bin/python3; [ -x $PY ] || PY=$(command -v python3)
WAIT=${1:-540}
rm -rf $C /var/tmp/sglforge-jit; mkdir -p $C/tree
tar --exclude=./build --exclude=./.git -cf - . | tar -C $C/tree -xf - || exit 3
tar -C $C -xJf build/h34/site.tar.xz || exit 3
echo "stack unpacked in $(( $(date +%s) - T0 )) s"
t=$(date +%s); $PY -m compileall -q -j 16 $C/site > $C/compileall.log 2>&1
echo "compileall (as pip install does): exit $? in $(( $(date +%s) - t )) s" | tee $C/compileall.txt
nvidia-smi --query-gpu=index,name,compute_cap,driver_version,memory.used --format=csv
ls -la ~/.cache ~/.triton ~/.nv > $C/home-before.txt 2>&1
setsid nohup bash $C/tree/bench/h200-kit/cs-chain.sh > $C/chain.log 2>&1 < /dev/null &
echo "chain started"
while [ $(( $(date +%s) - T0 )) -lt $WAIT ]; do
    grep -q '^done' $C/status 2>/dev/null && break
    sleep 5
done
cat $C/status 2>/dev/null; tail -n 5 $C/*.log
echo "call 1 done after $(( $(date +%s) - T0 )) s"
