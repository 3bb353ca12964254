#!/usr/bin/env bash
# The qualification smoke on a lent H200 host (issue 24), run from the repository root there:
#
#   tests/gpu/qualify_h200.sh CARRY record    # the stack in CARRY/site.tar.xz; writes
#                                             # $OUT/reference.json and $OUT/tiny-model.tar
#   tests/gpu/qualify_h200.sh CARRY compare   # compares with CARRY/reference.json, serving
#                                             # the same model (CARRY/tiny-model.tar)
#   tests/gpu/qualify_h200.sh CARRY compare after-pair   # ... then the same smoke once more
#                                             # with [colocated] start = "after-pair"
#
# CARRY holds site.tar.xz from tests/gpu/stage_stack.py (its site/wheels.lock is the wheel set
# the receipt binds). The host has no network and torch 2.11.0+cu130 in /opt/torch/.venv; nox
# is not installed there, so this runs what `nox -s smoke -- ARGS` runs: `python -m sglforge
# smoke ARGS`. Everything worth keeping goes to $OUT (at most 8 files come back).
set -u
CARRY=$(cd "$1" && pwd)
MODE=$2
THEN=${3:-}
PY=/opt/torch/.venv/bin/python3
WORK=/tmp/qualify
export PYTHONUNBUFFERED=1
rm -rf "$WORK" && mkdir -p "$WORK"
start=$(date +%s)
tar -C "$WORK" -xJf "$CARRY/site.tar.xz" || exit 3
echo "unpacked the stack in $(( $(date +%s) - start )) s"
export PYTHONPATH="$WORK/site:$PWD/src"
nvidia-smi --query-gpu=index,name,compute_cap,driver_version,memory.used --format=csv
args=(--profile h200-pd-1gpu --python "$PY" --lock "$WORK/site/wheels.lock" --out "$WORK/run")
if command -v ssh-keygen >/dev/null; then  # an ephemeral key: shows the signing path works
    ssh-keygen -q -t ed25519 -N "" -C h200-qualifier -f "$WORK/key"
    args+=(--sign-key "$WORK/key")
fi
if [ "$MODE" = record ]; then
    args+=(--model tiny --record-reference "$OUT/reference.json")
elif [ -f "$CARRY/tiny-model.tar" ]; then  # a model recorded elsewhere, carried
    tar -C "$WORK" -xf "$CARRY/tiny-model.tar" || exit 3
    args+=(--model "$WORK/tiny-model" --reference "$CARRY/reference.json")
else  # tiny-model generation 2 writes the same bytes on every host (issue 37)
    args+=(--model tiny --reference "$CARRY/reference.json")
fi
timeout 480 "$PY" -m sglforge smoke "${args[@]}" > "$OUT/smoke.log" 2>&1
rc=$?
echo "smoke exit $rc after $(( $(date +%s) - start )) s"
tail -n 60 "$OUT/smoke.log"
for f in receipt.json receipt.json.sig smoke-report.json; do
    [ -f "$WORK/run/$f" ] && cp "$WORK/run/$f" "$OUT/"
done
[ -f "$WORK/key.pub" ] && cp "$WORK/key.pub" "$WORK/run/logs/signer.pub"
if [ "$MODE" = record ]; then
    tar -C "$WORK/run" -cf "$OUT/tiny-model.tar" tiny-model
else
    cp "$WORK/run/reference-observed.json" "$OUT/" 2>/dev/null
    # A perturbed reference must fail, judged by the same rules, offline on this run's data.
    "$PY" - "$CARRY/reference.json" "$WORK/perturbed.json" <<'EOF'
import json, sys
ref = json.load(open(sys.argv[1]))
ref["prompts"][2]["ids"][10] += 1          # one greedy token changed
ref["prompts"][0]["logprobs"][3] -= 0.5    # one logprob moved
json.dump(ref, open(sys.argv[2], "w"))
EOF
    for r in "$CARRY/reference.json" "$WORK/perturbed.json"; do
        "$PY" -m sglforge reference compare --profile h200-pd-1gpu --reference "$r" \
            --observed "$WORK/run/reference-observed.json"
        status=$?  # before any other expansion: $(...) below would reset $?
        echo "reference compare ${r##*/}: exit $status"
    done 2>&1 | tee -a "$OUT/smoke.log"
fi
if [ "$THEN" = after-pair ] && [ "$MODE" = compare ]; then
    # The colocated server on the GPU the pair freed: same prompts, compared with the pair's
    # kept answers. Same run directory, so the JIT caches of the first run are reused.
    sed 's/^\[colocated\]/[colocated]\nstart = "after-pair"/' profiles/h200-pd-1gpu.toml \
        > profiles/h200-pd-1gpu-after.toml
    tar -C "$WORK/run" -cJf "$OUT/logs.tar.xz" logs
    timeout 300 "$PY" -m sglforge smoke --profile h200-pd-1gpu-after --python "$PY" \
        --lock "$WORK/site/wheels.lock" --out "$WORK/run" --model tiny \
        > "$OUT/smoke-after-pair.log" 2>&1
    echo "after-pair smoke exit $? after $(( $(date +%s) - start )) s"
    tail -n 30 "$OUT/smoke-after-pair.log"
    cp "$WORK/run/receipt.json" "$OUT/receipt-after-pair.json"
    cp "$WORK/run/smoke-report.json" "$OUT/smoke-report-after-pair.json"
else
    tar -C "$WORK/run" -cJf "$OUT/logs.tar.xz" logs
fi
ls -la "$OUT"
exit $rc
