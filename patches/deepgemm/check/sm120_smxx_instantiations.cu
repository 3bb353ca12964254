// sm_120a instantiations of the arch-generic (smxx) JIT kernels the SM120 paths also use:
// the SF layout kernels behind transform_sf_into_required_layout (SGLang's
// _setup_fp8_wo_a_scales: FP32 SF -> packed UE8M0, MN-major, TMA-aligned) and the logits
// cleaner of fp8_fp4_mqa_logits(clean_logits=True). Their headers declare conflicting
// extern shared buffers, so each kernel is its own translation unit, as in the JIT:
// compile-check.sh builds this file once per DG_CHECK_KERNEL below.
// DG_CHECK_KERNELS: 6
#include <deep_gemm/impls/smxx_layout.cuh>
#include <deep_gemm/impls/smxx_clean_logits.cuh>
using namespace deep_gemm;
static void __instantiate_kernel() {
    auto ptr = reinterpret_cast<void*>(
#if DG_CHECK_KERNEL == 0
        &transpose_fp32<512, 48, 56>
#elif DG_CHECK_KERNEL == 1
        &transpose_and_pack_fp32_into_ue8m0<512, 48, 56>
#elif DG_CHECK_KERNEL == 2
        &transpose_and_pack_fp32_into_ue8m0<512, 48, 56, 8, true>
#elif DG_CHECK_KERNEL == 3
        &pack_fp32_into_ue8m0<1, 512, 48, 16, true, false>
#elif DG_CHECK_KERNEL == 4
        &smxx_clean_logits<1, 128, 8, float>
#else
        &smxx_clean_logits<1, 128, 8, __nv_bfloat16>
#endif
    );
    (void)ptr;
}
