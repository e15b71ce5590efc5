// Integer averages are the exact mean, rounded toward zero, with no overflow on the way: the
// extremes of every integer type, negative means, in place and out of place, all-reduce and
// reduce-scatter, one chunk and several, on thread and shm ranks.
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "chorus/chorus.h"
#include "support/matrix.h"

namespace chorus {
namespace {

// Rank r's value at element i, and the mean the ranks must all get: exact, in 128 bits.
template <typename T>
T ValueOf(int r, size_t i) {
  using L = std::numeric_limits<T>;
  switch ((static_cast<size_t>(r) + i) % 4) {
    case 0:
      return L::max();
    case 1:
      return L::min();
    case 2:
      return static_cast<T>(L::max() - static_cast<T>(i % 3));
    default:
      return static_cast<T>(std::is_signed_v<T> ? -static_cast<int64_t>(i % 5) : i % 5);
  }
}

__extension__ using Wide = __int128;  // the exact sum of any p 64-bit values

template <typename T>
T MeanOf(int p, size_t i) {
  Wide sum = 0;
  for (int r = 0; r < p; ++r) sum += ValueOf<T>(r, i);
  return static_cast<T>(sum / p);  // C++ division: toward zero
}

template <typename T>
std::string CheckType(Communicator& comm, size_t n) {
  const int p = comm.size();
  const DataType t = DataTypeOf<T>::value;
  std::string problems;
  for (bool in_place : {false, true}) {
    std::vector<T> send(n), recv(n);
    for (size_t i = 0; i < n; ++i) send[i] = ValueOf<T>(comm.rank(), i);
    T* out = in_place ? send.data() : recv.data();
    Status s = comm.AllReduce({send.data(), n, t}, {out, n, t}, ReduceOp::kAvg);
    if (!s.ok()) return "allreduce: " + s.ToString();
    for (size_t i = 0; i < n; ++i) {
      if (out[i] != MeanOf<T>(p, i)) {
        problems += std::string(DataTypeName(t)) + " allreduce element " + std::to_string(i) +
                    ": got " + std::to_string(out[i]) + ", want " +
                    std::to_string(MeanOf<T>(p, i)) + "\n";
        break;
      }
    }
    // Reduce-scatter: block q of rank r's input is its values at q * n + i.
    std::vector<T> whole(n * static_cast<size_t>(p)), block(n);
    for (size_t i = 0; i < whole.size(); ++i) whole[i] = ValueOf<T>(comm.rank(), i);
    T* mine = in_place ? whole.data() + static_cast<size_t>(comm.rank()) * n : block.data();
    s = comm.ReduceScatter({whole.data(), whole.size(), t}, {mine, n, t}, ReduceOp::kAvg);
    if (!s.ok()) return "reducescatter: " + s.ToString();
    for (size_t i = 0; i < n; ++i) {
      const size_t g = static_cast<size_t>(comm.rank()) * n + i;
      if (mine[i] != MeanOf<T>(p, g)) {
        problems += std::string(DataTypeName(t)) + " reducescatter element " + std::to_string(g) +
                    ": got " + std::to_string(mine[i]) + "\n";
        break;
      }
    }
  }
  return problems;
}

class IntegerAverage : public ::testing::TestWithParam<TransportKind> {};

TEST_P(IntegerAverage, IsTheExactMeanRoundedTowardZero) {
  for (int p : {2, 3, 5}) {
    // 1 element, an odd count, and one that takes several chunks of the lane buffer.
    for (size_t n : {size_t{1}, size_t{37}, size_t{300001}}) {
      if (n > 1000 && (p > 3 || testing::SmallScale())) continue;
      const auto reports =
          testing::RunGroup(GetParam(), p,
                            [n](Communicator& comm) {
                              return CheckType<int8_t>(comm, n) + CheckType<uint8_t>(comm, n) +
                                     CheckType<int32_t>(comm, n) + CheckType<uint32_t>(comm, n) +
                                     CheckType<int64_t>(comm, n) + CheckType<uint64_t>(comm, n);
                            },
                            {.timeout = std::chrono::seconds(60), .wait = testing::TestWaitMode()});
      for (size_t r = 0; r < reports.size(); ++r) {
        EXPECT_EQ(reports[r], "") << "p " << p << " n " << n << " rank " << r;
      }
    }
  }
}

TEST(IntegerAverageCases, TheCasesUsersMeet) {
  auto group = CreateLocalGroup(2);
  ASSERT_TRUE(group.ok());
  std::vector<int8_t> a(1);
  std::vector<uint8_t> b(1);
  std::vector<int32_t> c(1);
  testing::RunRanks(*group, [&](Communicator& comm) {
    std::vector<int8_t> x{100};
    std::vector<uint8_t> y{200};
    std::vector<int32_t> z{comm.rank() == 0 ? -3 : 0};
    ASSERT_TRUE(comm.AllReduce(std::span<int8_t>(x), ReduceOp::kAvg).ok());
    ASSERT_TRUE(comm.AllReduce(std::span<uint8_t>(y), ReduceOp::kAvg).ok());
    ASSERT_TRUE(comm.AllReduce(std::span<int32_t>(z), ReduceOp::kAvg).ok());
    if (comm.rank() == 0) {
      a = x;
      b = y;
      c = z;
    }
  });
  EXPECT_EQ(a[0], 100);  // not -28
  EXPECT_EQ(b[0], 200);  // not 72
  EXPECT_EQ(c[0], -1);   // -1.5 toward zero
}

// The lanes buffer is made by the first integer average; a reduce-scatter first (which cuts it
// into p + 1 chunks) must leave room for a large all-reduce and a reduce after it.
TEST(IntegerAverageCases, AReduceScatterFirstLeavesRoomForTheOthers) {
  constexpr int kRanks = 2;  // 3 chunks, which do not divide the buffer: the room is smallest
  auto group = CreateLocalGroup(kRanks);
  ASSERT_TRUE(group.ok());
  std::vector<std::string> errors(kRanks);
  testing::RunRanks(*group, [&](Communicator& comm) {
    std::string& e = errors[static_cast<size_t>(comm.rank())];
    const int64_t mine = 10 * (comm.rank() + 1);  // mean 15
    std::vector<int64_t> scattered_in(2 * 7, mine), scattered(7);
    std::vector<int64_t> big(size_t{1} << 20, mine), rooted(size_t{1} << 20, mine);
    if (!comm.ReduceScatter(std::span<const int64_t>(scattered_in), std::span<int64_t>(scattered),
                            ReduceOp::kAvg)
             .ok() ||
        scattered != std::vector<int64_t>(7, 15)) {
      e += "reduce-scatter; ";
    }
    if (!comm.AllReduce(std::span<int64_t>(big), ReduceOp::kAvg).ok() ||
        big != std::vector<int64_t>(big.size(), 15)) {
      e += "all-reduce; ";
    }
    const bool root = comm.rank() == 1;
    if (!comm.Reduce(std::span<int64_t>(rooted), ReduceOp::kAvg, 1).ok() ||
        rooted != std::vector<int64_t>(rooted.size(), root ? 15 : mine)) {
      e += "reduce; ";
    }
  });
  for (const std::string& e : errors) EXPECT_EQ(e, "");
}

INSTANTIATE_TEST_SUITE_P(Transports, IntegerAverage,
                         ::testing::Values(TransportKind::kThread, TransportKind::kShm),
                         [](const auto& param_info) {
                           return testing::TransportParamName(param_info.param);
                         });

}  // namespace
}  // namespace chorus
