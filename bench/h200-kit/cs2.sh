#!/bin/bash
# Issue 34, call 2: wait for cs-chain.sh (up to $1 seconds), then bring back its results.
set -u
C=/tmp/cs; T0=$(date +%s); WAIT=${1:-540}
while [ $(( $(date +%s) - T0 )) -lt $WAIT ]; do
    grep -q '^done' $C/status 2>/dev/null && break
    sleep 5
done
cat $C/status; cat $C/collect.log 2>/dev/null
cp $C/coldstart-h200.json $C/logs.tar.xz $C/importtime-top.txt $C/rootdiff-artifact.json $OUT/ 2>/dev/null
for r in empty artifact second lazy; do tail -n 25 $C/$r.log; done
ls -la $OUT
echo "call 2 done after $(( $(date +%s) - T0 )) s"
