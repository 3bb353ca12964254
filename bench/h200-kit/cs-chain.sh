#!/bin/bash
# Issue 34: the starts, one after the other, on the one GPU (run by cs1.sh under setsid).
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
ROOT=$($PY -c "import json,sys; print(json.load(open(sys.argv[1]))['jit_cache']['root'])" \
    $C/run-art/smoke-report.json)
# What the artifact run still compiled or changed: files of the root not in the artifact, or
# with other bytes or times than the manifest says.
$PY bench/h200-kit/cs_rootdiff.py "$ART" "$ROOT" > $C/rootdiff-artifact.json 2>&1
# runs.second_start: the same host again, over the caches the artifact run left (root and HOME).
step "second-start"
HOME=$C/home-art timeout 420 $PY -m sglforge smoke "${common[@]}" --out $C/run-second \
    --jit-root "$ROOT" > $C/second.log 2>&1
step "second-exit-$?"
# Item 3: what imports cost, in one process, no contention (the launcher; the router).
HOME=$C/home-art TRITON_CACHE_DIR=$ROOT/triton $PY -X importtime -c "import sglang.launch_server" 2> $C/importtime.txt
sort -t'|' -k2 -n -r $C/importtime.txt | head -40 > $C/importtime-top.txt
HOME=$C/home-art $PY -X importtime -c "import sglang_router.launch_router" 2> $C/importtime-router.txt
sort -t'|' -k2 -n -r $C/importtime-router.txt | head -15 >> $C/importtime-top.txt
# ... and what the profile's router launcher imports instead (no MiniLB, no SGLang)
HOME=$C/home-art $PY -X importtime -c "from sglang_router.router import Router; from sglang_router.router_args import RouterArgs" 2> $C/importtime-router-rs.txt
sort -t'|' -k2 -n -r $C/importtime-router-rs.txt | head -3 >> $C/importtime-top.txt
LAZY=()
if [ "${CS_LAZY:-0}" = 1 ]; then
# Item 3 experiment (not a product change): sglang.srt.utils.common imports torchvision at the
# top for one JPEG path; moved into that function in a copy of the site, then the artifact run
# again (fresh root, HOME, run directory).
cp -al $C/site $C/site-lazy && rm $C/site-lazy/sglang/srt/utils/common.py
$PY - $C/site/sglang/srt/utils/common.py $C/site-lazy/sglang/srt/utils/common.py <<'PYEOF'
import sys
text = open(sys.argv[1]).read()
text = text.replace("from torchvision.io import decode_jpeg\n", "", 1)
text = text.replace("            image_tensor = decode_jpeg(",
    "            from torchvision.io import decode_jpeg\n\n            image_tensor = decode_jpeg(", 1)
open(sys.argv[2], "w").write(text)
PYEOF
HOME=$C/home-art TRITON_CACHE_DIR=$ROOT/triton PYTHONPATH=$C/site-lazy:$C/tree/src $PY -X importtime \
    -c "import sglang.launch_server" 2> $C/importtime-lazy.txt
sort -t'|' -k2 -n -r $C/importtime-lazy.txt | head -3 >> $C/importtime-top.txt
rm -rf /var/tmp/sglforge-jit; mkdir -p $C/home-lazy; step "lazy-start"
HOME=$C/home-lazy PYTHONPATH=$C/site-lazy:$C/tree/src timeout 420 $PY -m sglforge smoke \
    "${common[@]}" --out $C/run-lazy --jit-cache "$ART" > $C/lazy.log 2>&1
step "lazy-exit-$?"
LAZY=(artifact_lazy_torchvision=$C/run-lazy --home lazy=$C/home-lazy)
fi
$PY bench/coldstart.py $C/coldstart-h200.json empty=$C/run-empty artifact=$C/run-art \
    second_start=$C/run-second "${LAZY[@]}" \
    --home empty=$C/home-empty --home artifact=$C/home-art \
    --rootdiff $C/rootdiff-artifact.json --importtime $C/importtime-top.txt \
    --note "$(cat $C/compileall.txt)" > $C/collect.log 2>&1
step "collected-$?"
mkdir -p $C/logs
for r in run-empty run-art run-second run-lazy; do
    [ -d $C/$r ] || continue
    cp -r $C/$r/logs $C/logs/$r; cp $C/$r/smoke-report.json $C/logs/$r/
done
cp $C/*.log $C/*.txt $C/*.json $C/logs/ 2>/dev/null
tar -C $C -cJf $C/logs.tar.xz logs
step done
