#!/bin/bash
# Issue 34: the three starts, one after the other, on the one GPU (run by cs1.sh under setsid).
set -u
C=/tmp/cs; PY=/opt/torch/.venv/bin/python3; [ -x $PY ] || PY=$(command -v python3)
cd $C/tree
export PYTHONUNBUFFERED=1 PYTHONPATH=$C/site:$C/tree/src
common=(--profile h200-pd-1gpu --python $PY --lock $C/site/wheels.lock --model tiny)
step() { echo "$1 $(date +%s)" >> $C/status; }
# runs.empty: `sglforge warm` = every JIT root empty, fresh run directory, fresh HOME.
mkdir -p $C/home-empty; step "empty-start"
HOME=$C/home-empty timeout 560 $PY -m sglforge warm "${common[@]}" --out $C/run-empty \
    --artifact-dir $C/art > $C/empty.log 2>&1
step "empty-exit-$?"
ART=$(ls $C/art/jitcache-*.tar.gz 2>/dev/null | head -1)
[ -n "$ART" ] || { step "no-artifact"; step done; exit 1; }
# runs.artifact: the key's root removed, so the caches come only from the artifact; fresh run
# directory, fresh HOME, fresh processes.
rm -rf /var/tmp/sglforge-jit
mkdir -p $C/home-art; step "artifact-start"
HOME=$C/home-art timeout 420 $PY -m sglforge smoke "${common[@]}" --out $C/run-art \
    --jit-cache "$ART" > $C/artifact.log 2>&1
step "artifact-exit-$?"
# runs.second_start: the same host again, over the caches the artifact run left (root and HOME).
ROOT=$($PY -c "import json,sys; print(json.load(open(sys.argv[1]))['jit_cache']['root'])" \
    $C/run-art/smoke-report.json)
step "second-start"
HOME=$C/home-art timeout 420 $PY -m sglforge smoke "${common[@]}" --out $C/run-second \
    --jit-root "$ROOT" > $C/second.log 2>&1
step "second-exit-$?"
# What the server's own imports cost (item 3): one cold-ish import of the launcher's module.
HOME=$C/home-art $PY -X importtime -c "import sglang.launch_server" 2> $C/importtime.txt
sort -t'|' -k2 -n -r $C/importtime.txt | head -40 > $C/importtime-top.txt
$PY bench/coldstart.py $C/coldstart-h200.json empty=$C/run-empty artifact=$C/run-art \
    second_start=$C/run-second --home empty=$C/home-empty --home artifact=$C/home-art \
    --note "$(cat $C/compileall.txt)" > $C/collect.log 2>&1
step "collected-$?"
mkdir -p $C/logs
for r in run-empty run-art run-second; do cp -r $C/$r/logs $C/logs/$r; cp $C/$r/smoke-report.json $C/logs/$r/; done
cp $C/*.log $C/*.txt $C/logs/ 2>/dev/null
tar -C $C -cJf $C/logs.tar.xz logs
step done
