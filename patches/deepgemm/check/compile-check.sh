#!/usr/bin/env bash
# Compile-check a patched DeepGEMM tree without a GPU (used when making/refreshing this series).
#   usage: compile-check.sh TREE CUTLASS_INCLUDE_DIR FMT_INCLUDE_DIR
# TREE: 731e7c7a with patches/deepgemm/series applied. The include dirs: cutlass f3fde583 and
# fmt 553ec11e `include/` (the pinned deepgemm.cutlass / deepgemm.fmt).
# 1. host: g++ -fsyntax-only of csrc/tvm_ffi_api.cpp (every apis/*.hpp, so every sm120_*.hpp
#    host file) with sgl_deep_gemm/setup.py's flags, against the torch and tvm-ffi of
#    $DG_CHECK_PYTHON (default: .nox/build-toolchain; torch 2.11.0+cu130, apache-tvm-ffi
#    0.1.11) and the CUDA library headers its nvidia/cu13 wheels ship;
# 2. device: nvcc (/usr/local/cuda, CUDA 13) with DeepGEMM's JIT flags of the SM120 kernels
#    DeepSeek-V4 uses (sm120_*_instantiations.cu), for each of $DG_CHECK_ARCHS (default
#    "120a 120f": on NVCC >= 12.9 the JIT builds sm_120f, csrc/jit/device_runtime.hpp);
#    fails unless every instantiated kernel is in the cubin with code.
#    (550 and 1886 are also suppressed: several kernels share one translation unit here, one
#    per JIT build; their extern shared buffers declare different alignments.)
# No GPU is used: this proves the code compiles, not that it computes the right thing.
set -euo pipefail
TREE=$(realpath "$1"); CUTLASS=$(realpath "$2"); FMT=$(realpath "$3"); HERE=$(dirname "$(realpath "$0")")
PY=${DG_CHECK_PYTHON:-$HERE/../../../.nox/build-toolchain/bin/python}
WORK=${DG_CHECK_WORK:-/tmp/deepgemm-compile-check}
mkdir -p "$WORK"
SP=$("$PY" -c "import sysconfig;print(sysconfig.get_paths()['purelib'])")
PYINC=$("$PY" -c "import sysconfig;print(sysconfig.get_paths()['include'])")
"$PY" -c "import torch, tvm_ffi; print('torch', torch.__version__, 'tvm_ffi', tvm_ffi.__version__)"
echo "== host: csrc/tvm_ffi_api.cpp"
(cd "$TREE" && nice -n 19 g++ -std=c++17 -fsyntax-only -fPIC -Wno-psabi -Wno-deprecated-declarations \
  -D_GLIBCXX_USE_CXX11_ABI=1 -I/usr/local/cuda/include -I"$SP/nvidia/cu13/include" -I"$PYINC" \
  -I"$SP/torch/include" -I"$SP/torch/include/torch/csrc/api/include" -I"$SP/tvm_ffi/include" \
  -Ideep_gemm/include -I"$CUTLASS" -I"$FMT" -I/usr/local/cuda/include/cccl csrc/tvm_ffi_api.cpp)
for arch in ${DG_CHECK_ARCHS:-120a 120f}; do
  for cu in "$HERE"/sm120_*_instantiations.cu; do
    name=$(basename "$cu" .cu)
    # A file marked `DG_CHECK_KERNELS: N` holds N kernels that need a translation unit each
    # (selected by -DDG_CHECK_KERNEL=i); any other file instantiates all of its kernels at once.
    per_tu=$(sed -n 's|^// DG_CHECK_KERNELS: \([0-9]*\)$|\1|p' "$cu")
    if [ -n "$per_tu" ]; then units=$(seq 0 $((per_tu - 1))); want=1
    else units=all; want=$(grep -c 'reinterpret_cast<void\*>(&' "$cu"); fi
    for unit in $units; do
      cubin="$WORK/$name.$unit.sm_$arch.cubin"
      echo "== device: $name ($unit) for sm_$arch"
      nice -n 19 /usr/local/cuda/bin/nvcc -std=c++20 --diag-suppress=39,161,174,177,186,940,550,1886 \
        --ptxas-options=--register-usage-level=10 -gencode=arch=compute_$arch,code=sm_$arch -cubin \
        --expt-relaxed-constexpr --expt-extended-lambda -O3 \
        --compiler-options=-fPIC,-O3,-fconcepts,-Wno-deprecated-declarations,-Wno-abi \
        -DDG_CHECK_KERNEL=${unit/all/0} -I"$TREE/deep_gemm/include" -I"$CUTLASS" -o "$cubin" "$cu"
      # kernels with a non-empty .text section (a kernel compiled out by an arch guard is empty)
      got=$(readelf -SW "$cubin" 2>/dev/null | sed 's/^ *\[ *[0-9]*\] *//' \
            | awk '$1 ~ /^\.text\./ && $5 !~ /^0+$/' | wc -l)
      echo "   $got of $want kernels have code"
      [ "$got" -eq "$want" ] || { echo "error: $name ($unit) for sm_$arch: $got of $want kernels have code" >&2; exit 1; }
    done
  done
done
echo "ok: host extension and the SM120 kernels compile"
