// Reduction kernels: one loop template over (element type, op), stamped out once per instruction
// set, gathered into constant (DataType x ReduceOp) tables; GetKernel picks a table once.
//
// The loops use GCC vector extensions (16-byte vectors in the portable variant, 32-byte ones in
// the AVX variants) rather than relying on the auto-vectoriser: at -O2 GCC 12 only vectorises
// loops whose trip count is a known multiple of the vector width, and dst may alias a or b, so
// __restrict is not allowed. Every step loads both inputs before it stores, which is what makes
// exact aliasing safe. The ragged tail runs through the same vector step on zero-padded copies,
// so head and tail elements get bit-identical treatment.
//
// Semantics beyond reduce.h:
// - Integer sum/prod wrap around (computed in the unsigned type of the same width).
// - Integer avg: the wrapped sum, read as the signed/unsigned type, divided with C++ semantics.
// - Float min/max: NaN if either input is NaN; -0 < +0. Both make the result independent of the
//   operand order (up to NaN payloads), so ranks that combine in different orders still agree.
// - float16/bfloat16 widen to float32, combine, and round to nearest even once per call. The
//   F16C variants convert float16 in hardware; half.cpp's software conversion is bit-identical.
#include <array>
#include <bit>
#include <concepts>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "reduce/reduce.h"

#if defined(__x86_64__) && defined(__GNUC__)
#define CHORUS_REDUCE_X86 1
#include <cpuid.h>
#include <immintrin.h>
#else
#define CHORUS_REDUCE_X86 0
#endif

namespace chorus::reduce {

namespace {

template <class E, size_t kBytes>
struct VecOf {
  typedef E type __attribute__((vector_size(kBytes)));
};

// The arithmetic type a storage type is computed in.
template <class T>
struct ComputeOf {
  using type = T;
};
template <>
struct ComputeOf<Float16> {
  using type = float;
};
template <>
struct ComputeOf<BFloat16> {
  using type = float;
};

// Sum and product wrap around: do them on the unsigned type, where overflow is defined.
template <class T>
struct WrappingOf {
  using type = T;
};
template <std::integral T>
struct WrappingOf<T> {
  using type = std::make_unsigned_t<T>;
};
template <class T>
using Wrapping = typename WrappingOf<T>::type;

#define CHORUS_REDUCE_INLINE [[gnu::always_inline]] inline

// ---------------------------------------------------------------- ops on one vector of lanes
// Each op updates x in place (vectors are never passed or returned by value: without AVX
// enabled that is an ABI change GCC warns about). `ranks` matters to the avg ops only.

template <class V>
using LaneOf = std::remove_cvref_t<decltype(std::declval<V>()[0])>;

// x /= ranks lane by lane; integers truncate toward zero, reading the lanes as S.
template <class S, class V>
CHORUS_REDUCE_INLINE void DivideLanes(V& x, int ranks) {
  using L = LaneOf<V>;
  if constexpr (std::is_floating_point_v<L>) {
    x /= static_cast<L>(ranks);  // a true division, so small integer sums divide exactly
  } else {
    // No SIMD integer division exists; a wide type keeps ranks above the lane's range correct.
    using Wide = std::conditional_t<std::is_signed_v<S>, int64_t, uint64_t>;
    for (size_t i = 0; i < sizeof(V) / sizeof(L); ++i) {
      x[i] = static_cast<L>(static_cast<Wide>(static_cast<S>(x[i])) / static_cast<Wide>(ranks));
    }
  }
}

struct SumOp {
  template <class V>
  CHORUS_REDUCE_INLINE static void Apply(V& x, const V& y, int /*ranks*/) {
    x += y;
  }
};

struct ProdOp {
  template <class V>
  CHORUS_REDUCE_INLINE static void Apply(V& x, const V& y, int /*ranks*/) {
    x *= y;
  }
};

template <bool kMin>
struct MinMaxOp {
  template <class V>
  CHORUS_REDUCE_INLINE static void Apply(V& x, const V& y, int /*ranks*/) {
    if constexpr (std::is_floating_point_v<LaneOf<V>>) {
      using M = decltype(x < y);  // a lane mask: signed integers as wide as the lanes
      const M xi = __builtin_bit_cast(M, x);
      const M yi = __builtin_bit_cast(M, y);
      M take_x = x != x;  // x is NaN
      if constexpr (kMin) {
        take_x |= x < y;
      } else {
        take_x |= x > y;
      }
      M r = take_x ? xi : yi;  // y when y is NaN or the better one
      // Equal values differ only for +0/-0: OR picks -0 for min, AND picks +0 for max.
      r = (x == y) ? (kMin ? (xi | yi) : (xi & yi)) : r;
      x = __builtin_bit_cast(V, r);
    } else if constexpr (kMin) {
      x = y < x ? y : x;
    } else {
      x = y > x ? y : x;
    }
  }
};

// Sum, then divide by ranks: the final step of kAvg. S is the element type the sum is read as.
template <class S>
struct AvgOp {
  template <class V>
  CHORUS_REDUCE_INLINE static void Apply(V& x, const V& y, int ranks) {
    x += y;
    DivideLanes<S>(x, ranks);
  }
};

// x / ranks; y is ignored (AsDivide passes src twice).
template <class S>
struct DivideOp {
  template <class V>
  CHORUS_REDUCE_INLINE static void Apply(V& x, const V& /*y*/, int ranks) {
    DivideLanes<S>(x, ranks);
  }
};

// ---------------------------------------------------------------- generic loop
// kVecBytes: bytes of one compute vector (16 = SSE2 / portable, 32 = AVX).

// One vector of native elements, or of float16s widened in software (F16C has its own loop).
template <size_t kVecBytes, class T>
CHORUS_REDUCE_INLINE void Load(typename VecOf<typename ComputeOf<T>::type, kVecBytes>::type& x,
                               const unsigned char* p) {
  if constexpr (std::is_same_v<T, Float16>) {
    for (size_t i = 0; i < kVecBytes / sizeof(float); ++i) {
      Float16 h;
      std::memcpy(&h.bits, p + 2 * i, 2);
      x[i] = ToFloat(h);
    }
  } else {
    std::memcpy(&x, p, sizeof(x));
  }
}

template <size_t kVecBytes, class T>
CHORUS_REDUCE_INLINE void Store(
    unsigned char* p, const typename VecOf<typename ComputeOf<T>::type, kVecBytes>::type& x) {
  if constexpr (std::is_same_v<T, Float16>) {
    for (size_t i = 0; i < kVecBytes / sizeof(float); ++i) {
      const Float16 h = ToFloat16(x[i]);
      std::memcpy(p + 2 * i, &h.bits, 2);
    }
  } else {
    std::memcpy(p, &x, sizeof(x));
  }
}

// Vector form of ToBFloat16, leaving the result in the high half of each lane (low half zero):
// round to nearest even; NaNs truncated and made quiet.
template <class U, class V>
CHORUS_REDUCE_INLINE void RoundToBFloat16High(U& out, const V& x) {
  const U u = __builtin_bit_cast(U, x);
  const U rounded = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
  const U quiet_nan = (u | 0x400000u) & 0xffff0000u;
  out = (x != x) ? quiet_nan : rounded;
}

// Storage bytes one Step consumes from each input.
template <size_t kVecBytes, class T>
constexpr size_t kStepBytes = std::is_same_v<T, BFloat16>
                                  ? kVecBytes
                                  : kVecBytes / sizeof(typename ComputeOf<T>::type) * sizeof(T);

template <size_t kVecBytes, class T, class Op>
CHORUS_REDUCE_INLINE void Step(unsigned char* d, const unsigned char* a, const unsigned char* b,
                               int ranks) {
  if constexpr (std::is_same_v<T, BFloat16>) {
    // Each 32-bit lane holds two bfloat16s, the even element in its low half (little-endian).
    // Widening is then a shift or a mask per lane, with no shuffles: even and odd elements
    // form two float vectors, combined separately and merged back.
    static_assert(std::endian::native == std::endian::little);
    using U = typename VecOf<uint32_t, kVecBytes>::type;
    using V = typename VecOf<float, kVecBytes>::type;
    U ua, ub;
    std::memcpy(&ua, a, sizeof(ua));
    std::memcpy(&ub, b, sizeof(ub));
    V x_even = __builtin_bit_cast(V, ua << 16);
    V x_odd = __builtin_bit_cast(V, ua & 0xffff0000u);
    const V y_even = __builtin_bit_cast(V, ub << 16);
    const V y_odd = __builtin_bit_cast(V, ub & 0xffff0000u);
    Op::Apply(x_even, y_even, ranks);
    Op::Apply(x_odd, y_odd, ranks);
    U even, odd;
    RoundToBFloat16High(even, x_even);
    RoundToBFloat16High(odd, x_odd);
    const U merged = (even >> 16) | odd;
    std::memcpy(d, &merged, sizeof(merged));
  } else {
    typename VecOf<typename ComputeOf<T>::type, kVecBytes>::type x, y;
    Load<kVecBytes, T>(x, a);
    Load<kVecBytes, T>(y, b);
    Op::Apply(x, y, ranks);
    Store<kVecBytes, T>(d, x);
  }
}

template <size_t kVecBytes, class T, class Op>
CHORUS_REDUCE_INLINE void Loop(void* dst, const void* a, const void* b, size_t n, int ranks) {
  constexpr size_t kStep = kStepBytes<kVecBytes, T>;
  auto* d = static_cast<unsigned char*>(dst);
  const auto* pa = static_cast<const unsigned char*>(a);
  const auto* pb = static_cast<const unsigned char*>(b);
  const size_t bytes = n * sizeof(T);
  const size_t full = bytes / kStep * kStep;
  for (size_t i = 0; i < full; i += kStep) Step<kVecBytes, T, Op>(d + i, pa + i, pb + i, ranks);
  if (full != bytes) {
    // Zero padding keeps the unused lanes finite and harmless (0 / ranks, 0 * 0, ...).
    unsigned char ta[kStep] = {};
    unsigned char tb[kStep] = {};
    std::memcpy(ta, pa + full, bytes - full);
    std::memcpy(tb, pb + full, bytes - full);
    Step<kVecBytes, T, Op>(ta, ta, tb, ranks);
    std::memcpy(d + full, ta, bytes - full);
  }
}

// ---------------------------------------------------------------- per-ISA entry points
// All kernels share the FinishFn signature; AsCombine / AsDivide adapt it to the other two.

template <class T, class Op>
void RunPortable(void* dst, const void* a, const void* b, size_t n, int ranks) {
  Loop<16, T, Op>(dst, a, b, n, ranks);
}

#if CHORUS_REDUCE_X86
template <class T, class Op>
__attribute__((target("avx,f16c"))) void RunAvx(void* dst, const void* a, const void* b, size_t n,
                                                int ranks) {
  Loop<32, T, Op>(dst, a, b, n, ranks);
}

template <class T, class Op>
__attribute__((target("avx2,f16c"))) void RunAvx2(void* dst, const void* a, const void* b, size_t n,
                                                  int ranks) {
  Loop<32, T, Op>(dst, a, b, n, ranks);
}

// float16 with F16C. Intrinsics only inline into functions compiled for their ISA, so this
// cannot go through the generic Load/Store; it mirrors Loop instead.
template <class Op>
__attribute__((target("avx,f16c"))) void RunF16c(void* dst, const void* a, const void* b, size_t n,
                                                 int ranks) {
  using V = VecOf<float, 32>::type;
  auto step = [ranks](unsigned char* d, const unsigned char* pa, const unsigned char* pb)
      __attribute__((always_inline, target("avx,f16c"))) {
    __m128i ha, hb;
    std::memcpy(&ha, pa, 16);
    std::memcpy(&hb, pb, 16);
    V x = __builtin_bit_cast(V, _mm256_cvtph_ps(ha));
    const V y = __builtin_bit_cast(V, _mm256_cvtph_ps(hb));
    Op::Apply(x, y, ranks);
    const __m128i h = _mm256_cvtps_ph(__builtin_bit_cast(__m256, x), _MM_FROUND_TO_NEAREST_INT);
    std::memcpy(d, &h, 16);
  };
  auto* d = static_cast<unsigned char*>(dst);
  const auto* pa = static_cast<const unsigned char*>(a);
  const auto* pb = static_cast<const unsigned char*>(b);
  const size_t full = n / 8 * 16;
  for (size_t i = 0; i < full; i += 16) step(d + i, pa + i, pb + i);
  if (const size_t tail = 2 * n - full; tail != 0) {
    unsigned char ta[16] = {};
    unsigned char tb[16] = {};
    std::memcpy(ta, pa + full, tail);
    std::memcpy(tb, pb + full, tail);
    step(ta, ta, tb);
    std::memcpy(d + full, ta, tail);
  }
}
#endif

template <FinishFn kRun>
void AsCombine(void* dst, const void* a, const void* b, size_t n) {
  kRun(dst, a, b, n, 1);
}

template <FinishFn kRun>
void AsDivide(void* dst, const void* src, size_t n, int ranks) {
  kRun(dst, src, src, n, ranks);
}

// Variant policies: which entry point a (storage type, op) pair uses.
struct Portable {
  template <class T, class Op>
  static constexpr FinishFn kRun = &RunPortable<T, Op>;
};
#if CHORUS_REDUCE_X86
template <bool kAvx2>
struct Avx {
  template <class T, class Op>
  static constexpr FinishFn kRun = std::is_same_v<T, Float16> ? &RunF16c<Op>
                                   : kAvx2                    ? &RunAvx2<T, Op>
                                                              : &RunAvx<T, Op>;
};
#endif

// ---------------------------------------------------------------- tables

using Row = std::array<Kernel, kNumReduceOps>;
using Table = std::array<Row, kNumDataTypes>;

template <class Variant, class T>
constexpr Row MakeRow() {
  constexpr FinishFn kSum = Variant::template kRun<Wrapping<T>, SumOp>;
  constexpr FinishFn kProd = Variant::template kRun<Wrapping<T>, ProdOp>;
  constexpr FinishFn kMin = Variant::template kRun<T, MinMaxOp<true>>;
  constexpr FinishFn kMax = Variant::template kRun<T, MinMaxOp<false>>;
  constexpr FinishFn kAvg = Variant::template kRun<Wrapping<T>, AvgOp<T>>;
  constexpr FinishFn kDivide = Variant::template kRun<T, DivideOp<T>>;
  Row row{};  // indexed by ReduceOp
  row[static_cast<size_t>(ReduceOp::kSum)] = {&AsCombine<kSum>, kSum, nullptr};
  row[static_cast<size_t>(ReduceOp::kProd)] = {&AsCombine<kProd>, kProd, nullptr};
  row[static_cast<size_t>(ReduceOp::kMin)] = {&AsCombine<kMin>, kMin, nullptr};
  row[static_cast<size_t>(ReduceOp::kMax)] = {&AsCombine<kMax>, kMax, nullptr};
  row[static_cast<size_t>(ReduceOp::kAvg)] = {&AsCombine<kSum>, kAvg, &AsDivide<kDivide>};
  return row;
}

template <class Variant>
constexpr Table MakeTable() {
  Table table{};  // indexed by DataType
  table[static_cast<size_t>(DataType::kInt8)] = MakeRow<Variant, int8_t>();
  table[static_cast<size_t>(DataType::kUint8)] = MakeRow<Variant, uint8_t>();
  table[static_cast<size_t>(DataType::kInt32)] = MakeRow<Variant, int32_t>();
  table[static_cast<size_t>(DataType::kUint32)] = MakeRow<Variant, uint32_t>();
  table[static_cast<size_t>(DataType::kInt64)] = MakeRow<Variant, int64_t>();
  table[static_cast<size_t>(DataType::kUint64)] = MakeRow<Variant, uint64_t>();
  table[static_cast<size_t>(DataType::kFloat16)] = MakeRow<Variant, Float16>();
  table[static_cast<size_t>(DataType::kBFloat16)] = MakeRow<Variant, BFloat16>();
  table[static_cast<size_t>(DataType::kFloat32)] = MakeRow<Variant, float>();
  table[static_cast<size_t>(DataType::kFloat64)] = MakeRow<Variant, double>();
  return table;
}

constexpr Table kPortableTable = MakeTable<Portable>();
#if CHORUS_REDUCE_X86
constexpr Table kAvxTable = MakeTable<Avx<false>>();
constexpr Table kAvx2Table = MakeTable<Avx<true>>();
#endif

#if CHORUS_REDUCE_X86
// F16C (float16 <-> float32 conversions) from CPUID leaf 1, ECX bit 29: clang has no
// __builtin_cpu_supports("f16c"), and this way both compilers build the file.
bool CpuHasF16c() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  return __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & bit_F16C) != 0;
}
#endif

// The table of a variant, or nullptr when this CPU cannot run it.
const Table* VariantTable(int variant) {
  switch (variant) {
    case 0:
      return &kPortableTable;
#if CHORUS_REDUCE_X86
    case 1:
      return __builtin_cpu_supports("avx") && CpuHasF16c() ? &kAvxTable : nullptr;
    case 2:
      return __builtin_cpu_supports("avx2") && CpuHasF16c() ? &kAvx2Table : nullptr;
#endif
    default:
      return nullptr;
  }
}

const Table& BestTable() {
  for (int variant = 2; variant > 0; --variant) {
    if (const Table* table = VariantTable(variant)) return *table;
  }
  return kPortableTable;
}

}  // namespace

const Kernel& GetKernel(DataType dtype, ReduceOp op) {
  static const Table& table = BestTable();
  return table[static_cast<size_t>(dtype)][static_cast<size_t>(op)];
}

const Kernel* GetKernelVariant(int variant, DataType dtype, ReduceOp op) {
  const Table* table = VariantTable(variant);
  if (table == nullptr || static_cast<int>(dtype) >= kNumDataTypes ||
      static_cast<int>(op) >= kNumReduceOps) {
    return nullptr;
  }
  return &(*table)[static_cast<size_t>(dtype)][static_cast<size_t>(op)];
}

}  // namespace chorus::reduce

#undef CHORUS_REDUCE_INLINE
#undef CHORUS_REDUCE_X86
