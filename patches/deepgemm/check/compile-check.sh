#!/usr/bin/env bash
# Compile-check a patched DeepGEMM tree without a GPU (used when making/refreshing this series).
#   usage: compile-check.sh TREE CUTLASS_INCLUDE_DIR
# 1. host: g++ -fsyntax-only of csrc/tvm_ffi_api.cpp (every apis/*.hpp) against torch 2.13
#    (CPU wheel: headers only), apache-tvm-ffi 0.1.11 and CUDA 13 headers;
# 2. device: nvcc, with DeepGEMM's own JIT flags, of the sm_120a kernels DeepSeek-V4 uses
#    (sm120_instantiations.cu).
# Needs: nvcc 13 at /usr/local/cuda, network to PyPI on first use (cached in $WORK).
set -euo pipefail
TREE=$(realpath "$1"); CUTLASS=$(realpath "$2"); HERE=$(dirname "$(realpath "$0")")
WORK=${DG_CHECK_WORK:-/tmp/deepgemm-compile-check}
mkdir -p "$WORK/inc/c10/cuda/impl"
if [ ! -x "$WORK/venv/bin/python" ]; then
  python3 -m venv "$WORK/venv"
  "$WORK/venv/bin/pip" install -q torch==2.13.0 apache-tvm-ffi==0.1.11 pybind11
fi
if [ ! -f "$WORK/inc/nvrtc.h" ]; then  # CUDA library headers torch's ATen/cuda includes
  (cd "$WORK" && pip download -q --no-deps -d dl nvidia-cublas nvidia-cusparse nvidia-cusolver \
     nvidia-cuda-nvrtc && for w in dl/*.whl; do unzip -q -o "$w" '*/include/*' -d x; done \
     && cp -r x/nvidia/cu13/include/* inc/ && rm -rf dl x)
fi
# The CPU torch wheel lacks this generated header of its CUDA build.
printf '#pragma once\n#define C10_CUDA_BUILD_SHARED_LIBS\n' > "$WORK/inc/c10/cuda/impl/cuda_cmake_macros.h"
SP=$("$WORK/venv/bin/python" -c "import sysconfig;print(sysconfig.get_paths()['purelib'])")
PYINC=$("$WORK/venv/bin/python" -c "import sysconfig;print(sysconfig.get_paths()['include'])")
echo "== host: csrc/tvm_ffi_api.cpp"
(cd "$TREE" && g++ -std=c++20 -fsyntax-only -Wno-deprecated-declarations -I"$SP/torch/include" \
  -I"$SP/torch/include/torch/csrc/api/include" -I"$SP/tvm_ffi/include" -I"$SP/pybind11/include" \
  -I"$PYINC" -I/usr/local/cuda/include -I/usr/local/cuda/include/cccl -I"$WORK/inc" \
  -I"$CUTLASS" -I"$TREE/third-party/fmt/include" -Icsrc -Ideep_gemm/include csrc/tvm_ffi_api.cpp)
echo "== device: sm_120a instantiations"
/usr/local/cuda/bin/nvcc -std=c++20 --diag-suppress=39,161,174,177,186,940,550,1886 \
  --ptxas-options=--register-usage-level=10 -gencode=arch=compute_120a,code=sm_120a -cubin \
  --expt-relaxed-constexpr --expt-extended-lambda -O3 \
  --compiler-options=-fPIC,-O3,-fconcepts,-Wno-deprecated-declarations,-Wno-abi \
  -I"$TREE/deep_gemm/include" -I"$CUTLASS" -o "$WORK/sm120.cubin" "$HERE/sm120_instantiations.cu"
echo "ok: host extension and $(strings "$WORK/sm120.cubin" | grep '^\.text\.' | sort -u | wc -l) sm_120a kernels compile"
