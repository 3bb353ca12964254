// sm_120a instantiations of the DeepSeek-V4 attention-side kernels the JIT builds on an
// RTX PRO 6000 (188 SMs): indexer MQA logits (FP8/FP4, paged and not, varlen and MTP next_n),
// the paged schedule-metadata kernel and the mHC pre-norm GEMM (tf32_hc_prenorm_gemm).
// Template arguments are what csrc/jit_kernels/impls/sm120_*.hpp generate for these shapes.
#include <deep_gemm/impls/sm120_fp8_paged_mqa_logits.cuh>
#include <deep_gemm/impls/sm120_fp4_paged_mqa_logits.cuh>
#include <deep_gemm/impls/sm120_fp8_mqa_logits.cuh>
#include <deep_gemm/impls/sm120_fp4_mqa_logits.cuh>
#include <deep_gemm/impls/sm120_tf32_hc_prenorm_gemm.cuh>
#include <deep_gemm/scheduler/sm120_paged_mqa_logits.cuh>
using namespace deep_gemm;
static void __instantiate_kernel() {
    void* k[] = {
        reinterpret_cast<void*>(&sm120_fp8_paged_mqa_logits<2, 64, 128, 64, true, false, 2, 3, 128, 128, 256, float>),
        reinterpret_cast<void*>(&sm120_fp8_paged_mqa_logits<3, 64, 128, 64, true, false, 2, 3, 128, 128, 256, __nv_bfloat16>),
        reinterpret_cast<void*>(&sm120_fp8_paged_mqa_logits<1, 64, 128, 64, true, true, 2, 3, 128, 128, 256, float>),
        reinterpret_cast<void*>(&sm120_fp4_paged_mqa_logits<2, 64, 128, 64, true, false, 2, 3, 128, 128, 256, float>),
        reinterpret_cast<void*>(&sm120_fp4_paged_mqa_logits<1, 64, 128, 32, true, true, 2, 3, 128, 128, 256, float>),
        reinterpret_cast<void*>(&sm120_fp8_mqa_logits<64, 128, false, 2, 128, 2, 3, 188, 128, 256, float>),
        reinterpret_cast<void*>(&sm120_fp4_mqa_logits<64, 128, true, 2, 128, 2, 3, 188, 128, 256, __nv_bfloat16>),
        reinterpret_cast<void*>(&sm120_tf32_hc_prenorm_gemm_impl<24, 16384, 128, 32, 64, 1, 2, 256, 128>),
        reinterpret_cast<void*>(&sched::sm120_paged_mqa_logits_metadata<256, 128, 188, false>),
        reinterpret_cast<void*>(&sched::sm120_paged_mqa_logits_metadata<4096, 128, 188, true>),
    };
    (void)k;
}
