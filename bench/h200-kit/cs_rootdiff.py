"""Issue 34 (bench, H200): what a start changed in its JIT cache root after unpacking an artifact.

python cs_rootdiff.py ARTIFACT ROOT  -> JSON: files added, changed (sha256), re-timed
"""

import hashlib
import json
import os
import sys
import tarfile

artifact, root = sys.argv[1], sys.argv[2]
with tarfile.open(artifact) as archive:
    manifest = json.load(archive.extractfile("jitcache.json"))
listed = {e["path"][len("roots/") :]: e for e in manifest["files"]}
added, changed, retimed = [], [], []
for folder, _, names in os.walk(root):
    for name in names:
        path = os.path.join(folder, name)
        rel = os.path.relpath(path, root)
        if rel == ".sglforge-jit-root" or os.path.islink(path):
            continue
        entry = listed.get(rel)
        if entry is None:
            added.append(f"{rel} ({os.path.getsize(path)} bytes)")
            continue
        with open(path, "rb") as handle:
            digest = hashlib.sha256(handle.read()).hexdigest()
        if digest != entry["sha256"]:
            changed.append(rel)
        elif entry.get("mtime_ns") is not None and os.stat(path).st_mtime_ns != entry["mtime_ns"]:
            retimed.append(rel)
print(
    json.dumps(
        {"added": sorted(added), "changed": sorted(changed), "retimed": sorted(retimed)}, indent=1
    )
)
