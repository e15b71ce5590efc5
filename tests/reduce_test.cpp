// Tests for the reduction kernels (src/reduce/kernels.cpp) and the float16/bfloat16 conversions
// (src/reduce/half.cpp).
//
// Expected values never come from the code under test: integers are reduced with uint64_t
// modular arithmetic, floats in double, and float16/bfloat16 are decoded and rounded by a
// reference written from the format definitions (a search over all finite values of the format).
// Rounding through double first is harmless here because double has more than 2p+2 bits for
// every p involved (float32, float16, bfloat16), so double rounding equals direct rounding for
// +, *, and /.
//
// Every (instruction-set variant, dtype, op) is tested over the counts in kCounts, out of place
// and in place (dst == a, dst == b), with misaligned buffers and guard elements on both sides.
#include "reduce/reduce.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#endif

namespace chorus::reduce {
namespace {

constexpr const char* kVariantNames[kNumVariants] = {"portable", "avx", "avx2"};
constexpr const char* kTypeNames[kNumDataTypes] = {"int8",    "uint8",  "int32",   "uint32",
                                                   "int64",   "uint64", "float16", "bfloat16",
                                                   "float32", "float64"};
constexpr const char* kOpNames[kNumReduceOps] = {"sum", "prod", "min", "max", "avg"};
constexpr size_t kCounts[] = {0, 1, 7, 8, 15, 16, 17, 1000, 4099};
constexpr int kRanks[] = {1, 2, 3, 128, 300};  // 128 and 300 exceed the range of 8-bit lanes

// ------------------------------------------------------------------ reference 16-bit floats

struct Format {
  int mantissa_bits;
  int exponent_bits;
  uint16_t max_finite;  // bit pattern of the largest finite value
};
constexpr Format kHalf = {10, 5, 0x7bff};
constexpr Format kBf16 = {7, 8, 0x7f7f};

double RefDecode(uint16_t bits, const Format& f) {
  const int bias = (1 << (f.exponent_bits - 1)) - 1;
  const int exponent = (bits >> f.mantissa_bits) & ((1 << f.exponent_bits) - 1);
  const int mantissa = bits & ((1 << f.mantissa_bits) - 1);
  const double sign = (bits & 0x8000) ? -1.0 : 1.0;
  if (exponent == (1 << f.exponent_bits) - 1) {
    return mantissa != 0 ? std::numeric_limits<double>::quiet_NaN()
                         : sign * std::numeric_limits<double>::infinity();
  }
  if (exponent == 0) return sign * std::ldexp(mantissa, 1 - bias - f.mantissa_bits);
  return sign * std::ldexp(mantissa + (1 << f.mantissa_bits), exponent - bias - f.mantissa_bits);
}

// Round to nearest, ties to even, by searching the (monotonic) non-negative bit patterns.
uint16_t RefEncode(double v, const Format& f) {
  const uint16_t inf = static_cast<uint16_t>(f.max_finite + 1);
  if (std::isnan(v)) return static_cast<uint16_t>(inf | (1 << (f.mantissa_bits - 1)));
  const uint16_t sign = std::signbit(v) ? 0x8000 : 0;
  const double m = std::fabs(v);
  uint32_t lo = 0, hi = f.max_finite;  // largest k with RefDecode(k) <= m
  while (lo < hi) {
    const uint32_t mid = (lo + hi + 1) / 2;
    if (RefDecode(static_cast<uint16_t>(mid), f) <= m) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  const auto k = static_cast<uint16_t>(lo);
  const double below = RefDecode(k, f);
  if (below == m) return sign | k;
  if (k == f.max_finite) {
    // The next value up would be 2^(emax+1); the largest finite value has an odd mantissa, so
    // the halfway point itself rounds to inf.
    const double ulp = RefDecode(k, f) - RefDecode(static_cast<uint16_t>(k - 1), f);
    return sign | (m >= below + ulp / 2 ? inf : k);
  }
  const double above = RefDecode(static_cast<uint16_t>(k + 1), f);
  const uint16_t nearest = (m - below < above - m)   ? k
                           : (m - below > above - m) ? static_cast<uint16_t>(k + 1)
                           : (k & 1)                 ? static_cast<uint16_t>(k + 1)
                                                     : k;
  return sign | nearest;
}

// ------------------------------------------------------------------ typed helpers

template <class T>
constexpr bool kIsFloat =
    std::is_floating_point_v<T> || std::is_same_v<T, Float16> || std::is_same_v<T, BFloat16>;

template <class T>
double ToDouble(T x) {
  if constexpr (std::is_same_v<T, Float16>) {
    return RefDecode(x.bits, kHalf);
  } else if constexpr (std::is_same_v<T, BFloat16>) {
    return RefDecode(x.bits, kBf16);
  } else {
    return static_cast<double>(x);
  }
}

template <class T>
T FromDouble(double v) {
  if constexpr (std::is_same_v<T, Float16>) {
    return T{RefEncode(v, kHalf)};
  } else if constexpr (std::is_same_v<T, BFloat16>) {
    return T{RefEncode(v, kBf16)};
  } else {
    return static_cast<T>(v);
  }
}

template <class T>
bool IsNan(T x) {
  if constexpr (kIsFloat<T>) {
    return std::isnan(ToDouble(x));
  } else {
    return false;
  }
}

// Bitwise equality, except that any NaN matches any NaN (payloads are not specified). A
// float16/bfloat16 NaN must also be quiet: the kernels round every result through a conversion
// that quiets NaNs, even when min/max pass a signalling NaN input through.
template <class T>
bool Same(T actual, T expected) {
  if constexpr (std::is_same_v<T, Float16> || std::is_same_v<T, BFloat16>) {
    const uint16_t quiet_bit = std::is_same_v<T, Float16> ? 0x200 : 0x40;
    if (IsNan(actual) && !(actual.bits & quiet_bit)) return false;
  }
  if (IsNan(actual) || IsNan(expected)) return IsNan(actual) && IsNan(expected);
  return std::memcmp(&actual, &expected, sizeof(T)) == 0;
}

template <class T>
std::string Show(T x) {
  if constexpr (std::is_same_v<T, Float16> || std::is_same_v<T, BFloat16>) {
    return std::to_string(ToDouble(x)) + " (0x" + std::to_string(x.bits) + ")";
  } else if constexpr (std::is_floating_point_v<T>) {
    return std::to_string(x);
  } else {
    return std::to_string(
        static_cast<std::conditional_t<std::is_signed_v<T>, int64_t, uint64_t>>(x));
  }
}

// Values that hit the interesting cases: wrap-around, sign, extremes, rounding, inf, NaN.
template <class T>
std::vector<T> Interesting() {
  if constexpr (std::is_integral_v<T>) {
    using L = std::numeric_limits<T>;
    std::vector<T> v = {0, 1, 2, 3, 7, 100, L::max()};
    v.push_back(static_cast<T>(L::max() - 1));
    v.push_back(static_cast<T>(L::max() / 2 + 1));
    if constexpr (std::is_signed_v<T>) {
      for (T x : {T{-1}, T{-2}, T{-3}, T{-7}, T{-100}, L::min(), static_cast<T>(L::min() + 1)}) {
        v.push_back(x);
      }
    }
    return v;
  } else {
    const double inf = std::numeric_limits<double>::infinity();
    // 257, 2049 and 16777217 sit halfway between neighbours in bfloat16, float16, float32; the
    // formats that cannot hold them round them, and sums with 1 and 3 produce fresh ties.
    std::vector<double> d = {
        0.0,      -0.0, 1,      -1,   2,     3,
        -5,       10,   -12,    0.5,  -0.25, 100,
        -100,     0.1,  257,    2048, 2049,  16777216,
        16777217, 1e30, -1e-30, inf,  -inf,  std::numeric_limits<double>::quiet_NaN()};
    std::vector<T> v;
    for (double x : d) v.push_back(FromDouble<T>(x));
    if constexpr (std::is_same_v<T, Float16> || std::is_same_v<T, BFloat16>) {
      const uint16_t max = std::is_same_v<T, Float16> ? kHalf.max_finite : kBf16.max_finite;
      const uint16_t min_normal = std::is_same_v<T, Float16> ? 0x0400 : 0x0080;
      const auto signalling_nan = static_cast<uint16_t>(max + 2);  // exponent all ones, mantissa 1
      for (uint16_t bits : {max, static_cast<uint16_t>(max | 0x8000), min_normal, uint16_t{1},
                            uint16_t{0x8001}, signalling_nan}) {
        v.push_back(T{bits});
      }
    } else {
      using L = std::numeric_limits<T>;
      for (T x : {L::max(), -L::max(), L::min(), L::denorm_min(), -L::denorm_min()}) {
        v.push_back(x);
      }
    }
    return v;
  }
}

// The expected result of one element. `last` selects finish (divides for kAvg) over combine.
template <class T>
T Expected(ReduceOp op, T a, T b, int ranks, bool last) {
  if constexpr (std::is_integral_v<T>) {
    const T sum = static_cast<T>(static_cast<uint64_t>(a) + static_cast<uint64_t>(b));
    switch (op) {
      case ReduceOp::kSum:
        return sum;
      case ReduceOp::kProd:
        return static_cast<T>(static_cast<uint64_t>(a) * static_cast<uint64_t>(b));
      case ReduceOp::kMin:
        return std::min(a, b);
      case ReduceOp::kMax:
        return std::max(a, b);
      case ReduceOp::kAvg:
        if (!last) return sum;
        if constexpr (std::is_signed_v<T>) {
          return static_cast<T>(static_cast<int64_t>(sum) / ranks);
        } else {
          return static_cast<T>(static_cast<uint64_t>(sum) / static_cast<uint64_t>(ranks));
        }
    }
  } else {
    // The kernels accumulate in float32 (float64 for double) before dividing.
    using Acc = std::conditional_t<std::is_same_v<T, double>, double, float>;
    const double x = ToDouble(a);
    const double y = ToDouble(b);
    const double nan = std::numeric_limits<double>::quiet_NaN();
    switch (op) {
      case ReduceOp::kSum:
        return FromDouble<T>(x + y);
      case ReduceOp::kProd:
        return FromDouble<T>(x * y);
      case ReduceOp::kMin:  // NaN wins; -0 < +0
        if (std::isnan(x) || std::isnan(y)) return FromDouble<T>(nan);
        if (x == y) return std::signbit(x) ? a : b;
        return x < y ? a : b;
      case ReduceOp::kMax:
        if (std::isnan(x) || std::isnan(y)) return FromDouble<T>(nan);
        if (x == y) return std::signbit(x) ? b : a;
        return x > y ? a : b;
      case ReduceOp::kAvg:
        if (!last) return FromDouble<T>(x + y);
        return FromDouble<T>(static_cast<double>(static_cast<Acc>(x + y)) / ranks);
    }
  }
  return T{};
}

template <class T>
T ExpectedDivide(T a, int ranks) {
  if constexpr (std::is_integral_v<T>) {
    return Expected<T>(ReduceOp::kAvg, a, T{0}, ranks, true);
  } else {
    return FromDouble<T>(ToDouble(a) / ranks);
  }
}

// ------------------------------------------------------------------ buffers with guards

constexpr unsigned char kGuardByte = 0xa5;

// n elements at an address one element past a (16-byte aligned) allocation, with a guard
// element on each side, so loads are misaligned and overruns are caught.
template <class T>
class Guarded {
 public:
  explicit Guarded(const std::vector<T>& values) : storage_(values.size() + 2) {
    std::memset(storage_.data(), kGuardByte, storage_.size() * sizeof(T));
    std::copy(values.begin(), values.end(), storage_.begin() + 1);
  }
  T* data() { return storage_.data() + 1; }
  T& operator[](size_t i) { return storage_[i + 1]; }
  bool GuardsIntact() const {
    const auto* front = reinterpret_cast<const unsigned char*>(storage_.data());
    const auto* back = reinterpret_cast<const unsigned char*>(&storage_.back());
    for (size_t i = 0; i < sizeof(T); ++i) {
      if (front[i] != kGuardByte || back[i] != kGuardByte) return false;
    }
    return true;
  }
  bool Equals(const std::vector<T>& values) const {
    return values.empty() ||
           std::memcmp(storage_.data() + 1, values.data(), values.size() * sizeof(T)) == 0;
  }

 private:
  std::vector<T> storage_;
};

// Compares a result buffer against expected values; reports the first few mismatches.
template <class T>
void ExpectResult(Guarded<T>& actual, const std::vector<T>& a, const std::vector<T>& b,
                  const std::vector<T>& expected, const std::string& what) {
  EXPECT_TRUE(actual.GuardsIntact()) << what << ": wrote outside [0, n)";
  int reported = 0;
  for (size_t i = 0; i < expected.size(); ++i) {
    if (Same(actual[i], expected[i])) continue;
    ADD_FAILURE() << what << ": element " << i << " of " << expected.size() << ": a=" << Show(a[i])
                  << " b=" << Show(b[i]) << " got " << Show(actual[i]) << ", expected "
                  << Show(expected[i]);
    if (++reported == 5) return;
  }
}

// ------------------------------------------------------------------ the matrix

using Param = std::tuple<int, DataType, ReduceOp>;

class KernelTest : public ::testing::TestWithParam<Param> {
 protected:
  void SetUp() override {
    const auto [variant, dtype, op] = GetParam();
    kernel_ = GetKernelVariant(variant, dtype, op);
    if (kernel_ == nullptr) GTEST_SKIP() << kVariantNames[variant] << " not supported by this CPU";
  }

  template <class T>
  void Run() {
    const ReduceOp op = std::get<2>(GetParam());
    const std::vector<T> pool = Interesting<T>();
    const size_t k = pool.size();
    for (size_t n : kCounts) {
      // Every ordered pair of pool values appears once n >= k * k.
      std::vector<T> a(n), b(n);
      for (size_t i = 0; i < n; ++i) {
        a[i] = pool[i % k];
        b[i] = pool[(i / k + i / (k * k)) % k];
      }
      const std::string at = " n=" + std::to_string(n);
      std::vector<T> expected(n);

      for (size_t i = 0; i < n; ++i) expected[i] = Expected(op, a[i], b[i], 1, false);
      {
        Guarded<T> ga(a), gb(b), dst{std::vector<T>(n, a.empty() ? T{} : a[0])};
        kernel_->combine(dst.data(), ga.data(), gb.data(), n);
        ExpectResult(dst, a, b, expected, "combine" + at);
        EXPECT_TRUE(ga.Equals(a) && gb.Equals(b) && ga.GuardsIntact() && gb.GuardsIntact())
            << "combine modified an input" << at;
      }
      {
        Guarded<T> ga(a), gb(b);
        kernel_->combine(ga.data(), ga.data(), gb.data(), n);
        ExpectResult(ga, a, b, expected, "combine dst==a" + at);
      }
      {
        Guarded<T> ga(a), gb(b);
        kernel_->combine(gb.data(), ga.data(), gb.data(), n);
        ExpectResult(gb, a, b, expected, "combine dst==b" + at);
      }

      for (int ranks : kRanks) {
        const std::string with = at + " ranks=" + std::to_string(ranks);
        for (size_t i = 0; i < n; ++i) expected[i] = Expected(op, a[i], b[i], ranks, true);
        {
          Guarded<T> ga(a), gb(b), dst{std::vector<T>(n)};
          kernel_->finish(dst.data(), ga.data(), gb.data(), n, ranks);
          ExpectResult(dst, a, b, expected, "finish" + with);
        }
        {
          Guarded<T> ga(a), gb(b);
          kernel_->finish(ga.data(), ga.data(), gb.data(), n, ranks);
          ExpectResult(ga, a, b, expected, "finish dst==a" + with);
        }
        {
          Guarded<T> ga(a), gb(b);
          kernel_->finish(gb.data(), ga.data(), gb.data(), n, ranks);
          ExpectResult(gb, a, b, expected, "finish dst==b" + with);
        }
        if (op != ReduceOp::kAvg) continue;
        for (size_t i = 0; i < n; ++i) expected[i] = ExpectedDivide(a[i], ranks);
        {
          Guarded<T> ga(a), dst{std::vector<T>(n)};
          kernel_->divide(dst.data(), ga.data(), n, ranks);
          ExpectResult(dst, a, a, expected, "divide" + with);
          EXPECT_TRUE(ga.Equals(a)) << "divide modified its input" << with;
        }
        {
          Guarded<T> ga(a);
          kernel_->divide(ga.data(), ga.data(), n, ranks);
          ExpectResult(ga, a, a, expected, "divide in place" + with);
        }
      }
    }
  }

  const Kernel* kernel_ = nullptr;
};

template <class F>
void WithType(DataType dtype, F&& f) {
  switch (dtype) {
    case DataType::kInt8:
      return f(int8_t{});
    case DataType::kUint8:
      return f(uint8_t{});
    case DataType::kInt32:
      return f(int32_t{});
    case DataType::kUint32:
      return f(uint32_t{});
    case DataType::kInt64:
      return f(int64_t{});
    case DataType::kUint64:
      return f(uint64_t{});
    case DataType::kFloat16:
      return f(Float16{});
    case DataType::kBFloat16:
      return f(BFloat16{});
    case DataType::kFloat32:
      return f(float{});
    case DataType::kFloat64:
      return f(double{});
  }
  FAIL() << "bad dtype";
}

TEST_P(KernelTest, MatchesReference) {
  WithType(std::get<1>(GetParam()), [&](auto tag) { Run<decltype(tag)>(); });
}

TEST_P(KernelTest, DivideOnlyForAvg) {
  EXPECT_NE(kernel_->combine, nullptr);
  EXPECT_NE(kernel_->finish, nullptr);
  EXPECT_EQ(kernel_->divide != nullptr, std::get<2>(GetParam()) == ReduceOp::kAvg);
}

std::vector<Param> AllParams() {
  std::vector<Param> params;
  for (int v = 0; v < kNumVariants; ++v) {
    for (int t = 0; t < kNumDataTypes; ++t) {
      for (int o = 0; o < kNumReduceOps; ++o) {
        params.emplace_back(v, static_cast<DataType>(t), static_cast<ReduceOp>(o));
      }
    }
  }
  return params;
}

std::string ParamName(const ::testing::TestParamInfo<Param>& param_info) {
  const auto [variant, dtype, op] = param_info.param;
  return std::string(kVariantNames[variant]) + "_" + kTypeNames[static_cast<int>(dtype)] + "_" +
         kOpNames[static_cast<int>(op)];
}

INSTANTIATE_TEST_SUITE_P(All, KernelTest, ::testing::ValuesIn(AllParams()), ParamName);

// GetKernel serves the best variant the CPU supports.
TEST(GetKernel, PicksBestSupportedVariant) {
  int best = 0;
  for (int v = kNumVariants - 1; v > 0 && best == 0; --v) {
    if (GetKernelVariant(v, DataType::kFloat32, ReduceOp::kSum) != nullptr) best = v;
  }
  for (int t = 0; t < kNumDataTypes; ++t) {
    for (int o = 0; o < kNumReduceOps; ++o) {
      const auto dtype = static_cast<DataType>(t);
      const auto op = static_cast<ReduceOp>(o);
      EXPECT_EQ(&GetKernel(dtype, op), GetKernelVariant(best, dtype, op)) << t << " " << o;
    }
  }
  EXPECT_EQ(GetKernelVariant(kNumVariants, DataType::kFloat32, ReduceOp::kSum), nullptr);
}

#if defined(__x86_64__)
// F16C from CPUID leaf 1, ECX bit 29, as the library asks: clang has no
// __builtin_cpu_supports("f16c").
bool HasF16c() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  return __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & bit_F16C) != 0;
}

// On AVX hardware the wide variants must be available (they are what production uses).
TEST(GetKernel, WideVariantsAvailableWhereSupported) {
  __builtin_cpu_init();
  EXPECT_EQ(GetKernelVariant(1, DataType::kFloat32, ReduceOp::kSum) != nullptr,
            __builtin_cpu_supports("avx") && HasF16c());
  EXPECT_EQ(GetKernelVariant(2, DataType::kFloat32, ReduceOp::kSum) != nullptr,
            __builtin_cpu_supports("avx2") && HasF16c());
}
#endif

// Random bit patterns (NaNs, infinities, subnormals included): the wide variants agree with the
// portable one, which for float16 checks F16C against the software conversion.
TEST(KernelVariants, AgreeOnRandomBits) {
  std::mt19937_64 rng(12345);
  constexpr size_t kN = 4099;
  std::vector<unsigned char> a(kN * 8), b(kN * 8), want(kN * 8), got(kN * 8);
  for (auto& x : a) x = static_cast<unsigned char>(rng());
  for (auto& x : b) x = static_cast<unsigned char>(rng());
  int compared = 0;
  for (int t = 0; t < kNumDataTypes; ++t) {
    for (int o = 0; o < kNumReduceOps; ++o) {
      const auto dtype = static_cast<DataType>(t);
      const auto op = static_cast<ReduceOp>(o);
      const Kernel* portable = GetKernelVariant(0, dtype, op);
      ASSERT_NE(portable, nullptr);
      portable->finish(want.data(), a.data(), b.data(), kN, 3);
      for (int v = 1; v < kNumVariants; ++v) {
        const Kernel* wide = GetKernelVariant(v, dtype, op);
        if (wide == nullptr) continue;
        wide->finish(got.data(), a.data(), b.data(), kN, 3);
        ++compared;
        WithType(dtype, [&](auto tag) {
          using T = decltype(tag);
          std::vector<T> w(kN), g(kN);
          std::memcpy(w.data(), want.data(), kN * sizeof(T));
          std::memcpy(g.data(), got.data(), kN * sizeof(T));
          for (size_t i = 0; i < kN; ++i) {
            ASSERT_TRUE(Same(w[i], g[i]))
                << kVariantNames[v] << " " << kTypeNames[t] << " " << kOpNames[o] << " element "
                << i << ": " << Show(g[i]) << " vs portable " << Show(w[i]);
          }
        });
      }
    }
  }
#if defined(__x86_64__)
  if (__builtin_cpu_supports("avx") && HasF16c()) {
    EXPECT_GT(compared, 0);
  }
#endif
}

// ------------------------------------------------------------------ conversions

// Every float16 / bfloat16 pattern decodes to its value and survives the round trip; NaNs
// stay NaN, keep sign and payload, and come out quiet.
TEST(HalfConversion, AllFloat16PatternsRoundTrip) {
  for (uint32_t bits = 0; bits <= 0xffff; ++bits) {
    const Float16 h{static_cast<uint16_t>(bits)};
    const float f = ToFloat(h);
    const double want = RefDecode(h.bits, kHalf);
    if (std::isnan(want)) {
      ASSERT_TRUE(std::isnan(f)) << bits;
      const uint32_t fb = std::bit_cast<uint32_t>(f);
      ASSERT_EQ(fb >> 31, bits >> 15) << bits;
      ASSERT_EQ((fb >> 13) & 0x3ff, (bits & 0x3ff) | 0x200) << bits;  // payload, quiet bit
      ASSERT_EQ(ToFloat16(f).bits, bits | 0x200) << bits;
    } else {
      ASSERT_EQ(static_cast<double>(f), want) << bits;
      ASSERT_EQ(std::signbit(f), (bits & 0x8000) != 0) << bits;
      ASSERT_EQ(ToFloat16(f).bits, bits) << bits;
    }
  }
}

TEST(HalfConversion, AllBFloat16PatternsRoundTrip) {
  for (uint32_t bits = 0; bits <= 0xffff; ++bits) {
    const BFloat16 h{static_cast<uint16_t>(bits)};
    const float f = ToFloat(h);
    const double want = RefDecode(h.bits, kBf16);
    if (std::isnan(want)) {
      ASSERT_TRUE(std::isnan(f)) << bits;
      ASSERT_EQ(std::bit_cast<uint32_t>(f), (bits | 0x40) << 16) << bits;
      ASSERT_EQ(ToBFloat16(f).bits, bits | 0x40) << bits;
    } else {
      ASSERT_EQ(static_cast<double>(f), want) << bits;
      ASSERT_EQ(std::bit_cast<uint32_t>(f), bits << 16) << bits;
      ASSERT_EQ(ToBFloat16(f).bits, bits) << bits;
    }
  }
}

// Between every two neighbouring finite values: the exact midpoint goes to the even pattern,
// one float below or above it to the nearer value. Covers subnormals, exponent steps and the
// top of the range; both signs.
template <class T, class Convert>
void CheckMidpoints(const Format& format, Convert convert) {
  for (uint32_t k = 0; k < format.max_finite; ++k) {
    const auto lo = static_cast<uint16_t>(k);
    const auto hi = static_cast<uint16_t>(k + 1);
    const auto mid = static_cast<float>((RefDecode(lo, format) + RefDecode(hi, format)) / 2);
    ASSERT_EQ(static_cast<double>(mid), (RefDecode(lo, format) + RefDecode(hi, format)) / 2);
    const uint16_t even = (k & 1) ? hi : lo;
    const float inf = std::numeric_limits<float>::infinity();
    ASSERT_EQ(convert(mid).bits, even) << k;
    ASSERT_EQ(convert(std::nextafter(mid, 0.0f)).bits, lo) << k;
    ASSERT_EQ(convert(std::nextafter(mid, inf)).bits, hi) << k;
    ASSERT_EQ(convert(-mid).bits, even | 0x8000) << k;
    ASSERT_EQ(convert(-std::nextafter(mid, 0.0f)).bits, lo | 0x8000) << k;
    ASSERT_EQ(convert(-std::nextafter(mid, inf)).bits, hi | 0x8000) << k;
  }
}

TEST(HalfConversion, Float16RoundsToNearestEven) {
  CheckMidpoints<Float16>(kHalf, [](float f) { return ToFloat16(f); });
  EXPECT_EQ(ToFloat16(2049.0f).bits, ToFloat16(2048.0f).bits);  // tie, 2048 is even
  EXPECT_EQ(ToFloat16(2051.0f).bits, ToFloat16(2052.0f).bits);  // tie, 2052 is even
  EXPECT_EQ(ToFloat16(0x1p-25f).bits, 0x0000);                  // half the smallest subnormal
  EXPECT_EQ(ToFloat16(std::nextafter(0x1p-25f, 1.0f)).bits, 0x0001);
  EXPECT_EQ(ToFloat16(0x1.ffcp-15f).bits, 0x0400);  // rounds up into the normal range
}

TEST(HalfConversion, BFloat16RoundsToNearestEven) {
  CheckMidpoints<BFloat16>(kBf16, [](float f) { return ToBFloat16(f); });
  EXPECT_EQ(ToBFloat16(257.0f).bits, ToBFloat16(256.0f).bits);
  EXPECT_EQ(ToBFloat16(259.0f).bits, ToBFloat16(260.0f).bits);
}

TEST(HalfConversion, OverflowInfAndNan) {
  const float inf = std::numeric_limits<float>::infinity();
  const float max = std::numeric_limits<float>::max();
  EXPECT_EQ(ToFloat16(65504.0f).bits, 0x7bff);
  EXPECT_EQ(ToFloat16(65519.996f).bits, 0x7bff);
  EXPECT_EQ(ToFloat16(65520.0f).bits, 0x7c00);  // the tie rounds to even, which is inf
  EXPECT_EQ(ToFloat16(-65520.0f).bits, 0xfc00);
  EXPECT_EQ(ToFloat16(1e10f).bits, 0x7c00);
  EXPECT_EQ(ToFloat16(max).bits, 0x7c00);
  EXPECT_EQ(ToFloat16(inf).bits, 0x7c00);
  EXPECT_EQ(ToFloat16(-inf).bits, 0xfc00);
  EXPECT_EQ(ToFloat16(-0.0f).bits, 0x8000);
  EXPECT_EQ(ToFloat16(std::numeric_limits<float>::denorm_min()).bits, 0x0000);
  EXPECT_EQ(ToBFloat16(max).bits, 0x7f80);  // above the last midpoint: rounds to inf
  EXPECT_EQ(ToBFloat16(inf).bits, 0x7f80);
  EXPECT_EQ(ToBFloat16(-inf).bits, 0xff80);
  EXPECT_EQ(ToBFloat16(-0.0f).bits, 0x8000);
  EXPECT_EQ(ToBFloat16(std::numeric_limits<float>::denorm_min()).bits, 0x0000);
  EXPECT_EQ(ToFloat(Float16{0x7c00}), inf);
  EXPECT_EQ(ToFloat(BFloat16{0xff80}), -inf);
  // Signalling NaNs whose payload lives only in the low bits must not turn into inf.
  EXPECT_EQ(ToFloat16(std::bit_cast<float>(0x7f800001u)).bits, 0x7e00);
  EXPECT_EQ(ToFloat16(std::bit_cast<float>(0xffa00001u)).bits, 0xff00);
  EXPECT_EQ(ToFloat16(std::numeric_limits<float>::quiet_NaN()).bits, 0x7e00);
  EXPECT_EQ(ToBFloat16(std::bit_cast<float>(0x7f800001u)).bits, 0x7fc0);
  EXPECT_EQ(ToBFloat16(std::bit_cast<float>(0xff812345u)).bits, 0xffc1);
  EXPECT_EQ(std::bit_cast<uint32_t>(ToFloat(Float16{0x7c01})), 0x7fc02000u);
  EXPECT_EQ(std::bit_cast<uint32_t>(ToFloat(BFloat16{0x7f81})), 0x7fc10000u);
}

// A sample of all float bit patterns against the reference rounding.
TEST(HalfConversion, SampledFloatsMatchReference) {
  for (uint64_t bits = 0; bits <= 0xffffffffu; bits += 65521) {  // prime stride
    const float f = std::bit_cast<float>(static_cast<uint32_t>(bits));
    if (std::isnan(f)) continue;  // covered above
    ASSERT_EQ(ToFloat16(f).bits, RefEncode(f, kHalf)) << bits;
    ASSERT_EQ(ToBFloat16(f).bits, RefEncode(f, kBf16)) << bits;
  }
}

#if defined(__x86_64__)
__attribute__((target("f16c"))) uint16_t HardwareToFloat16(float f) {
  return static_cast<uint16_t>(
      _mm_extract_epi16(_mm_cvtps_ph(_mm_set_ss(f), _MM_FROUND_TO_NEAREST_INT), 0));
}

// The software conversion is bit-identical to F16C (NaNs included), so ranks with and without
// F16C agree.
TEST(HalfConversion, SoftwareMatchesF16c) {
  if (!HasF16c()) GTEST_SKIP() << "no F16C";
  for (uint64_t bits = 0; bits <= 0xffffffffu; bits += 997) {
    const float f = std::bit_cast<float>(static_cast<uint32_t>(bits));
    ASSERT_EQ(ToFloat16(f).bits, HardwareToFloat16(f)) << bits;
  }
}
#endif

}  // namespace
}  // namespace chorus::reduce
