#!/bin/bash
# Issue 37, call 4: the run of record. Our whole stack (sglang, sglang-kernel, flashinfer-python,
# sgl-deep-gemm, nixl, nixl-cu13 built by sglforge) against call 2's reference, same model bytes;
# a perturbed reference judged offline on this run's data; then the colocated server again after
# the pair (`[colocated] start = "after-pair"`). Receipts signed with an ephemeral Ed25519 key
# made here (no ssh-keygen on the image: qualification/receipt.py signs through `cryptography`), the
# reference run's receipt signed with the same key.
#   bash /tmp/r/tree/bench/h200-kit/rr4.sh
set -u
R=/tmp/r; T0=$(date +%s); PY=/opt/torch/.venv/bin/python3; [ -x $PY ] || PY=$(command -v python3)
export PYTHONUNBUFFERED=1
S=/tmp/results; rm -rf $S; mkdir -p $S
export PYTHONPATH=/tmp/ours/site:$R/tree/src:/tmp/signlib
cd $R/tree
$PY -c "from pathlib import Path; from sglforge.qualification.receipt import write_ed25519_key as w; print(w(Path('/tmp/key'), 'h200-qualifier'), end='')" || exit 3
cp /tmp/key.pub $S/signer.pub
timeout 400 $PY -m sglforge smoke --profile h200-pd-1gpu --python $PY --lock /tmp/ours/site/wheels.lock \
    --out /tmp/run-ours --model tiny --reference /tmp/ref/reference.json --sign-key /tmp/key > $S/smoke.log 2>&1
rc=$?
echo "run of record: smoke exit $rc after $(( $(date +%s) - T0 )) s"
tail -n 50 $S/smoke.log
# A perturbed reference must fail, judged by the same rules, offline on this run's data.
$PY - /tmp/ref/reference.json /tmp/perturbed.json <<'EOF'
import json, sys
ref = json.load(open(sys.argv[1]))
ref["prompts"][2]["ids"][10] += 1          # one greedy token changed
ref["prompts"][0]["logprobs"][3] -= 0.5    # one logprob moved
json.dump(ref, open(sys.argv[2], "w"))
EOF
for r in /tmp/ref/reference.json /tmp/perturbed.json; do
    $PY -m sglforge reference compare --profile h200-pd-1gpu --reference "$r" \
        --observed /tmp/run-ours/reference-observed.json
    status=$?
    echo "reference compare ${r##*/}: exit $status"
done > $S/reference-compare.log 2>&1
cat $S/reference-compare.log | tail -12
cp /tmp/run-ours/receipt.json /tmp/run-ours/receipt.json.sig /tmp/run-ours/smoke-report.json \
   /tmp/run-ours/smoke-summary.txt /tmp/run-ours/reference-observed.json $S/ 2>/dev/null
tar -C /tmp/run-ours -cJf $S/logs-ours.tar.xz logs
# The reference run's receipt (call 2), signed now with the same key.
cp /tmp/run-ref/receipt.json $S/receipt-reference.json
$PY -c "from pathlib import Path; from sglforge.qualification.receipt import sign; print(sign(Path('$S/receipt-reference.json'), Path('/tmp/key')))"
cp /tmp/ref/reference.json $S/
# The colocated server after the pair: same run directory (JIT caches reused).
sed 's/^\[colocated\]/[colocated]\nstart = "after-pair"/' profiles/h200-pd-1gpu.toml > profiles/h200-pd-1gpu-after.toml
timeout 300 $PY -m sglforge smoke --profile h200-pd-1gpu-after --python $PY --lock /tmp/ours/site/wheels.lock \
    --out /tmp/run-ours --model tiny --sign-key /tmp/key > $S/smoke-after-pair.log 2>&1
rc2=$?
echo "after-pair smoke exit $rc2 after $(( $(date +%s) - T0 )) s"
tail -n 30 $S/smoke-after-pair.log
for f in receipt.json receipt.json.sig smoke-report.json; do cp /tmp/run-ours/$f $S/after-pair-$f; done
tar -C /tmp/run-ours -cJf $S/logs-after-pair.tar.xz logs
cp /tmp/ours/site/wheels.lock $S/wheels.lock; cp /tmp/ours/stack-manifest.json $S/
cp /tmp/sgk-build.log $S/ 2>/dev/null
tar -C /tmp -cJf $OUT/results.tar.xz results
cp $S/smoke-report.json $OUT/smoke-report.json; cp $S/receipt.json $OUT/receipt.json
cp $S/after-pair-smoke-report.json $OUT/ 2>/dev/null
ls -la $S $OUT
echo "call 4 done after $(( $(date +%s) - T0 )) s"
exit $rc
