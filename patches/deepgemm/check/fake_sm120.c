// LD_PRELOAD shim: report the (real, sm_90) GPU as an SM120 RTX PRO 6000 (12.0, 188 SMs,
// 99 KiB opt-in SMEM) so DeepGEMM's host code takes its SM120 paths and JIT-compiles the
// SM120 kernels; loading them then fails on the real GPU, which is expected.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <cuda_runtime_api.h>
typedef cudaError_t (*props_fn)(struct cudaDeviceProp*, int);
cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp* prop, int device) {
    static props_fn real = 0;
    if (!real) real = (props_fn)dlsym(RTLD_NEXT, "cudaGetDeviceProperties");
    cudaError_t err = real(prop, device);
    if (err == cudaSuccess) {
        prop->major = 12; prop->minor = 0; prop->multiProcessorCount = 188;
        prop->sharedMemPerBlockOptin = 101376; prop->sharedMemPerMultiprocessor = 102400;
    }
    return err;
}
