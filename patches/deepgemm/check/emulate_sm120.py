# Drive DeepGEMM's Python API on a GPU that reports itself as SM120 (fake_sm120.so): each
# call takes the SM120 host path (dispatch, checks, heuristics, code generation) and the JIT
# compiles the generated kernel for sm_120f; loading it on the real (sm_90) GPU then fails.
# Prints, per call, what stopped it; then the kernels the JIT compiled.
#   gcc -shared -fPIC -I/usr/local/cuda/include -o fake_sm120.so fake_sm120.c -ldl
#   LD_PRELOAD=$PWD/fake_sm120.so DG_JIT_CACHE_DIR=/tmp/dg120 python3 emulate_sm120.py
# (with the sgl-deep-gemm wheel and torch importable; needs a CUDA GPU, any arch).
import glob
import os

import deep_gemm
import torch
from deep_gemm.utils.layout import _pack_fp32_into_ue8m0_fallback as pack_ue8m0
from deep_gemm.utils.math import per_token_cast_to_fp8

print('capability seen:', torch.cuda.get_device_capability(), 'SMs:', torch.cuda.get_device_properties(0).multi_processor_count)
dev = 'cuda'
results = {}
def case(fn):
    try:
        fn(); results[fn.__name__] = 'returned'
    except Exception as e:
        results[fn.__name__] = f'{type(e).__name__}: {" ".join(str(e).split())[:300]}'
    print(f'{fn.__name__}: {results[fn.__name__]}', flush=True)
    return fn

@case
def tf32_hc_prenorm_gemm():
    a = torch.randn(4096, 7168, dtype=torch.bfloat16, device=dev); b = torch.randn(24, 7168, device=dev)
    deep_gemm.tf32_hc_prenorm_gemm(a, b, torch.empty(4096, 24, device=dev), torch.empty(4096, device=dev))

@case
def fp8_mqa_logits():
    s, skv, h, d = 128, 1024, 64, 128
    q = torch.randn(s, h, d, device=dev).to(torch.float8_e4m3fn)
    kv = torch.randn(skv, d, device=dev).to(torch.float8_e4m3fn); sf = torch.rand(skv, device=dev)
    w = torch.randn(s, h, device=dev)
    ks = torch.zeros(s, dtype=torch.int, device=dev); ke = torch.arange(s, dtype=torch.int, device=dev) + (skv - s)
    deep_gemm.fp8_fp4_mqa_logits((q, None), (kv, sf), w, ks, ke, False, 0, torch.float)

@case
def get_paged_mqa_logits_metadata():
    cl = torch.full((4, 2), 1000, dtype=torch.int, device=dev)
    deep_gemm.get_paged_mqa_logits_metadata(cl, 64, 188)

@case
def fp8_paged_mqa_logits():
    b, nn, h, d, blk, nblk = 4, 2, 64, 128, 64, 64
    q = torch.randn(b, nn, h, d, device=dev).to(torch.float8_e4m3fn)
    kv = torch.zeros(nblk, blk * (d + 4), dtype=torch.uint8, device=dev).view(nblk, blk, 1, d + 4)
    w = torch.randn(b * nn, h, device=dev)
    cl = torch.full((b, nn), 1000, dtype=torch.int, device=dev)
    bt = torch.arange(b * 16, dtype=torch.int, device=dev).view(b, 16)
    meta = torch.zeros(188 + 1, 2, dtype=torch.int, device=dev)
    deep_gemm.fp8_fp4_paged_mqa_logits((q, None), kv, w, cl, bt, meta, 1024, False, torch.float)

@case
def bf16_gemm_nt():
    a = torch.randn(256, 7168, dtype=torch.bfloat16, device=dev); b = torch.randn(4096, 7168, dtype=torch.bfloat16, device=dev)
    deep_gemm.bf16_gemm_nt(a, b, torch.empty(256, 4096, dtype=torch.bfloat16, device=dev))

@case
def fp8_gemm_nt_fp32_sf():  # SF transform (the _setup_fp8_wo_a_scales path) comes first
    a = per_token_cast_to_fp8(torch.randn(256, 7168, device=dev), use_ue8m0=True)
    b = per_token_cast_to_fp8(torch.randn(4096, 7168, device=dev), use_ue8m0=True)
    deep_gemm.fp8_gemm_nt(a, b, torch.empty(256, 4096, dtype=torch.bfloat16, device=dev), recipe=(1, 1, 128))

@case
def fp8_gemm_nt_packed_sf():  # SF already packed UE8M0: straight to the SM120 GEMM
    a, sa = per_token_cast_to_fp8(torch.randn(256, 7168, device=dev), use_ue8m0=True)
    b, sb = per_token_cast_to_fp8(torch.randn(4096, 7168, device=dev), use_ue8m0=True)
    deep_gemm.fp8_gemm_nt((a, pack_ue8m0(sa)), (b, pack_ue8m0(sb)), torch.empty(256, 4096, dtype=torch.bfloat16, device=dev), recipe=(1, 1, 128))

@case
def m_grouped_fp8_gemm_nt_contiguous_packed_sf():
    g, m, n, k = 4, 512, 4096, 7168
    a, sa = per_token_cast_to_fp8(torch.randn(m, k, device=dev), use_ue8m0=True)
    bs = [per_token_cast_to_fp8(torch.randn(n, k, device=dev), use_ue8m0=True) for _ in range(g)]
    # one MN-major TMA-aligned [g, n, k/512] tensor (stacking per-group packs breaks its strides)
    b = torch.stack([x for x, _ in bs]); sb = pack_ue8m0(torch.stack([s for _, s in bs]))
    layout = torch.arange(m, device=dev, dtype=torch.int) // (m // g)
    deep_gemm.m_grouped_fp8_fp4_gemm_nt_contiguous((a, pack_ue8m0(sa)), (b, sb), torch.empty(m, n, dtype=torch.bfloat16, device=dev), layout, recipe=(1, 1, 128))

cache = os.environ['DG_JIT_CACHE_DIR']
print('JIT-compiled kernels (cubin in cache):')
for cubin in sorted(glob.glob(f'{cache}/**/*.cubin', recursive=True)):
    src = os.path.join(os.path.dirname(cubin), 'kernel.cu')
    inc = [l.strip() for l in open(src) if l.startswith('#include')] if os.path.exists(src) else []
    print(' ', os.path.relpath(cubin, cache), inc)
