// sm_120a instantiations of the GEMM kernels behind fp8_fp4_gemm_nt / m_grouped_* (contiguous,
// psum, masked), bf16_gemm_nt and split-K: these go through the 731e7c7a scheduler
// (scheduler/gemm.cuh) with the SM120 split-K parameter this series adds to it.
#include <deep_gemm/impls/sm120_fp8_fp4_gemm_1d1d.cuh>
#include <deep_gemm/impls/sm120_bf16_gemm.cuh>
#include <deep_gemm/impls/sm120_split_k_reduce.cuh>
using namespace deep_gemm;
using bf16 = cutlass::bfloat16_t;
using Id = epilogue::transform::EpilogueIdentity;
static void __instantiate_kernel() {
    void* k[] = {
        // FP8 x FP8, 1D1D 128-gran (DeepSeek-V4 dense/attention projections), BF16 out
        reinterpret_cast<void*>(&sm120_fp8_fp4_gemm_1d1d_impl<0, 4096, 7168, 128, 128, 1, 64, 128, 128, 128, 128, 128, 3, 128, 256, 188, GemmType::Normal, false, bf16, Id>),
        // same with split-K 4 (workspace + reduce kernel)
        reinterpret_cast<void*>(&sm120_fp8_fp4_gemm_1d1d_impl<0, 4096, 7168, 128, 128, 1, 64, 128, 128, 128, 128, 128, 3, 128, 256, 188, GemmType::Normal, false, bf16, Id, false, false, false, true, false, 64, 4>),
        reinterpret_cast<void*>(&sm120_split_k_reduce_impl<bf16, 4>),
        // MoE: m-grouped contiguous, psum layout, masked
        reinterpret_cast<void*>(&sm120_fp8_fp4_gemm_1d1d_impl<0, 4096, 7168, 128, 128, 32, 128, 128, 128, 128, 128, 128, 3, 128, 256, 188, GemmType::MGroupedContiguous, false, bf16, Id>),
        reinterpret_cast<void*>(&sm120_fp8_fp4_gemm_1d1d_impl<0, 4096, 7168, 128, 128, 32, 128, 128, 128, 128, 128, 128, 3, 128, 256, 188, GemmType::MGroupedContiguousWithPsumLayout, false, bf16, Id>),
        reinterpret_cast<void*>(&sm120_fp8_fp4_gemm_1d1d_impl<0, 4096, 7168, 128, 128, 32, 64, 128, 128, 128, 128, 128, 3, 128, 256, 188, GemmType::MGroupedMasked, false, bf16, Id>),
        // FP4 x FP4 (MXFP4, gran 32)
        reinterpret_cast<void*>(&sm120_fp8_fp4_gemm_1d1d_impl<0, 4096, 7168, 32, 32, 1, 64, 128, 128, 64, 64, 128, 3, 128, 256, 188, GemmType::Normal, false, bf16, Id, true, false, false>),
        // BF16
        reinterpret_cast<void*>(&sm120_bf16_gemm_impl<0, 4096, 7168, 1, 64, 128, 64, 128, 128, 128, 3, 128, 256, 188, GemmType::Normal, false, bf16, Id, true, 2>),
        reinterpret_cast<void*>(&sm120_bf16_gemm_impl<0, 4096, 7168, 32, 128, 128, 64, 128, 128, 128, 3, 128, 256, 188, GemmType::MGroupedContiguous, false, bf16, Id>),
    };
    (void)k;
}
