// Reduction kernels: one type-erased function pair per (DataType, ReduceOp), picked once per
// call from a table.
//
//   const chorus::reduce::Kernel& k = chorus::reduce::GetKernel(DataType::kFloat32,
//   ReduceOp::kAvg); k.combine(dst, a, b, n);              // dst = a + b          (every step but
//   the last) k.finish(dst, a, b, n, /*ranks=*/4);  // dst = (a + b) / 4    (the step that
//   completes it)
//
// dst may alias a or b exactly (in place); no other overlap. float16 and bfloat16 convert to
// float32, combine, and round back to nearest even once per call. kAvg combines as kSum; its
// finish divides the sum by `ranks` (integers truncate toward zero). For every other op
// finish == combine and `ranks` is ignored. Kernels are vectorised with runtime CPU dispatch.
// Thread safety: pure functions.
#pragma once

#include <cstddef>

#include "chorus/types.h"

namespace chorus::reduce {

using CombineFn = void (*)(void* dst, const void* a, const void* b, size_t n);
using FinishFn = void (*)(void* dst, const void* a, const void* b, size_t n, int ranks);
// dst = src / ranks elementwise (kAvg with a single rank or the direct algorithms' last step).
using ScaleFn = void (*)(void* dst, const void* src, size_t n, int ranks);

struct Kernel {
  CombineFn combine = nullptr;
  FinishFn finish = nullptr;
  ScaleFn divide = nullptr;  // only set for kAvg
};

// Precondition: IsValid(dtype) && IsValid(op).
const Kernel& GetKernel(DataType dtype, ReduceOp op);

// Instruction-set variants, best last; GetKernel uses the best one this CPU runs.
enum Variant : int { kPortable = 0, kAvxF16c = 1, kAvx2F16c = 2, kNumVariants = 3 };
// The kernel of one variant, or nullptr when this CPU lacks it (tests reach every variant).
const Kernel* GetKernelVariant(int variant, DataType dtype, ReduceOp op);

}  // namespace chorus::reduce
