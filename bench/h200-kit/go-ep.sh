#!/bin/bash
# NIXL-EP on the H200 (one call): install the sm_90 nixl-cu13 + nixl wheels built by sglforge
# (`build --target h200-verify nixl-cu13 nixl`) and the hash-locked libucx-cu13 wheel into a venv
# over the host's torch 2.11.0+cu130; check how nixl_ep_cpp_torch211 resolves its libraries
# (RUNPATH, `env -i ldd`), import nixl_ep the way SGLang does, then run upstream's elastic test
# (examples/device/ep/tests/elastic at the pin) with the single-rank plan: Buffer, dispatch and
# combine in low-latency mode, checked against the reference results the test computes.
# Carried in build/h200n/ (ignored): whl/*.whl, ep-tests/ (the pin's examples/device/ep/tests).
R=$PWD; K=$R/build/h200n; T0=$(date +%s)
nvidia-smi --query-gpu=name,driver_version,compute_cap --format=csv,noheader; python3 -V
python3 -c 'import torch; print("torch", torch.__version__, torch.version.cuda)'
sha256sum $K/whl/*.whl
python3 -m venv --system-site-packages /tmp/ep || exit 1
/tmp/ep/bin/python -m pip install -q --no-index --no-deps $K/whl/*.whl || exit 1
SP=$(/tmp/ep/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
SO=$(ls $SP/nixl_ep_cu13/nixl_ep_cpp_torch*.so); echo "module: ${SO#$SP/}"
readelf -d $SO | grep -E 'RUNPATH|RPATH|NEEDED' | sed 's/^ *//'
HSP=$(python3 -c 'import torch,os;print(os.path.dirname(os.path.dirname(torch.__file__)))')
# the host's torch and nvidia-* live in the system site-packages: link them where a venv with
# everything installed would have them, beside nixl_ep_cu13/
for d in torch nvidia; do [ -e $SP/$d ] || ln -s $HSP/$d $SP/$d; done
echo "$HSP" > $SP/zz-host-torch.pth   # the host's torch lives in a venv: its dependencies too
echo "env -i ldd, not found: $(env -i ldd $SO | grep -c 'not found')"; env -i ldd $SO | grep -E 'not found|torch|cudart|ucp|nixl' | sed 's/^\s*//'
cd $K/ep-tests
/tmp/ep/bin/python -c 'import nixl_ep, nixl_ep.buffer; from nixl_ep import Buffer; print("nixl_ep.Buffer", Buffer, nixl_ep.topk_idx_t)' || exit 1
timeout 300 /tmp/ep/bin/python elastic/elastic.py --plan elastic/single_rank.json --num-processes 1 \
    --num-experts-per-rank 8 --num-topk 8 ${EP_ARGS:-} > /tmp/elastic.log 2>&1; echo "elastic rc=$?"
tail -40 /tmp/elastic.log
echo "elapsed $(( $(date +%s) - T0 ))s"
