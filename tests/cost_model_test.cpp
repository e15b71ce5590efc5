// Tests for the ring cost model: the seed's figures, hand-worked uneven splits, and a sweep
// that checks every rank against an independent step-by-step simulation of the ring schedule.
//
// The simulation does not trust the schedule either: it tracks which ranks' contributions each
// chunk holds, so a wrong chunk index would show up as a double-counted or missing
// contribution, not just as a byte count that happens to agree.
#include "model/cost_model.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "chorus/communicator.h"
#include "chorus/types.h"

namespace chorus::model {
namespace {

constexpr CollectiveKind kKinds[] = {CollectiveKind::kAllReduce, CollectiveKind::kReduceScatter,
                                     CollectiveKind::kAllGather};
constexpr DataType kTypes[] = {DataType::kInt8, DataType::kBFloat16, DataType::kFloat32,
                               DataType::kFloat64};
const std::vector<size_t> kCounts = {0, 1, 7, 8, 1000, (size_t{1} << 20) + 3};

int Mod(int a, int p) { return ((a % p) + p) % p; }

// Chunk sizes in elements from the chunk offsets (start of chunk c = c*q + min(c, rem)), a
// different formulation from the one in the library.
std::vector<uint64_t> ChunkSizes(uint64_t count, int p) {
  const uint64_t q = count / static_cast<uint64_t>(p);
  const uint64_t rem = count % static_cast<uint64_t>(p);
  auto start = [&](uint64_t c) { return c * q + std::min(c, rem); };
  std::vector<uint64_t> sizes(static_cast<size_t>(p));
  for (int c = 0; c < p; ++c) {
    const auto u = static_cast<uint64_t>(c);
    sizes[static_cast<size_t>(c)] = start(u + 1) - start(u);
  }
  return sizes;
}

// Walks the ring schedule of `kind` for all ranks at once and returns each rank's cost.
std::vector<RingCost> Simulate(CollectiveKind kind, int p, size_t count, DataType dtype) {
  std::vector<RingCost> costs(static_cast<size_t>(p));
  if (count == 0) return costs;  // documented: an empty buffer sends no messages
  const std::vector<uint64_t> elems = ChunkSizes(count, p);
  const uint64_t elem_bytes = DataTypeSize(dtype);
  auto bytes = [&](int chunk) { return elems[static_cast<size_t>(chunk)] * elem_bytes; };
  auto at = [](auto& table, int r, int c) -> auto& {
    return table[static_cast<size_t>(r)][static_cast<size_t>(c)];
  };
  const uint32_t everyone = (uint32_t{1} << p) - 1;

  // owners[r][c]: the set of ranks whose input rank r's copy of chunk c already includes.
  std::vector<std::vector<uint32_t>> owners(static_cast<size_t>(p),
                                            std::vector<uint32_t>(static_cast<size_t>(p)));
  for (int r = 0; r < p; ++r) {
    for (int c = 0; c < p; ++c) at(owners, r, c) = uint32_t{1} << r;
  }

  const bool reduce_phase = kind != CollectiveKind::kAllGather;
  const bool gather_phase = kind != CollectiveKind::kReduceScatter;

  if (reduce_phase) {
    for (int s = 0; s <= p - 2; ++s) {
      std::vector<int> sent_chunk(static_cast<size_t>(p));
      std::vector<uint32_t> sent_set(static_cast<size_t>(p));
      for (int r = 0; r < p; ++r) {
        const int c = Mod(r - 1 - s, p);
        sent_chunk[static_cast<size_t>(r)] = c;
        sent_set[static_cast<size_t>(r)] = at(owners, r, c);
        costs[static_cast<size_t>(r)].bytes_sent += bytes(c);
        ++costs[static_cast<size_t>(r)].steps;
      }
      for (int q = 0; q < p; ++q) {
        const int from = Mod(q - 1, p);
        const int c = Mod(q - 2 - s, p);
        EXPECT_EQ(sent_chunk[static_cast<size_t>(from)], c) << "p=" << p << " step " << s;
        EXPECT_EQ(at(owners, q, c) & sent_set[static_cast<size_t>(from)], 0u) << "double count";
        at(owners, q, c) |= sent_set[static_cast<size_t>(from)];
        costs[static_cast<size_t>(q)].bytes_received += bytes(c);
        costs[static_cast<size_t>(q)].bytes_reduced += bytes(c);
      }
    }
    for (int r = 0; r < p; ++r) EXPECT_EQ(at(owners, r, r), everyone) << "rank " << r;
  }

  if (gather_phase) {
    // has[r][c]: rank r holds the final value of chunk c.
    std::vector<std::vector<char>> has(static_cast<size_t>(p),
                                       std::vector<char>(static_cast<size_t>(p), 0));
    for (int r = 0; r < p; ++r) at(has, r, r) = 1;
    for (int s = 0; s <= p - 2; ++s) {
      std::vector<int> sent_chunk(static_cast<size_t>(p));
      for (int r = 0; r < p; ++r) {
        const int c = Mod(r - s, p);
        EXPECT_TRUE(at(has, r, c)) << "rank " << r << " forwards chunk " << c << " it lacks";
        sent_chunk[static_cast<size_t>(r)] = c;
        costs[static_cast<size_t>(r)].bytes_sent += bytes(c);
        ++costs[static_cast<size_t>(r)].steps;
      }
      for (int q = 0; q < p; ++q) {
        const int c = Mod(q - 1 - s, p);
        EXPECT_EQ(sent_chunk[static_cast<size_t>(Mod(q - 1, p))], c);
        EXPECT_FALSE(at(has, q, c)) << "chunk received twice";
        at(has, q, c) = 1;
        costs[static_cast<size_t>(q)].bytes_received += bytes(c);
      }
    }
    for (int r = 0; r < p; ++r) {
      for (int c = 0; c < p; ++c) EXPECT_TRUE(at(has, r, c)) << "rank " << r << " chunk " << c;
    }
  }
  return costs;
}

TEST(CostModelTest, SeedFigures) {
  // 8 float32 values (32 bytes) on 4 ranks.
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(RingBytesSent(CollectiveKind::kAllReduce, 4, r, 8, DataType::kFloat32), 48u);
    EXPECT_EQ(RingBytesSent(CollectiveKind::kReduceScatter, 4, r, 8, DataType::kFloat32), 24u);
    EXPECT_EQ(RingBytesSent(CollectiveKind::kAllGather, 4, r, 8, DataType::kFloat32), 24u);
    // "scatter + gather": the two halves of the all-reduce cost what the all-reduce costs.
    EXPECT_EQ(RingBytesSent(CollectiveKind::kReduceScatter, 4, r, 8, DataType::kFloat32) +
                  RingBytesSent(CollectiveKind::kAllGather, 4, r, 8, DataType::kFloat32),
              48u);
  }
  EXPECT_EQ(RingMaxBytesSent(CollectiveKind::kAllReduce, 4, 8, DataType::kFloat32), 48u);
  EXPECT_EQ(RingMaxBytesSent(CollectiveKind::kReduceScatter, 4, 8, DataType::kFloat32), 24u);
  EXPECT_EQ(RingMaxBytesSent(CollectiveKind::kAllGather, 4, 8, DataType::kFloat32), 24u);
  EXPECT_DOUBLE_EQ(RingBytesClosedForm(CollectiveKind::kAllReduce, 4, 32.0), 48.0);
  EXPECT_DOUBLE_EQ(RingBytesClosedForm(CollectiveKind::kReduceScatter, 4, 32.0), 24.0);

  const RingCost ar = Ring(CollectiveKind::kAllReduce, 4, 0, 8, DataType::kFloat32);
  EXPECT_EQ(ar.bytes_received, 48u);
  EXPECT_EQ(ar.bytes_reduced, 24u);
  EXPECT_EQ(ar.steps, 6);
}

TEST(CostModelTest, UnevenSplitWorkedByHand) {
  // 7 float32 on 4 ranks: chunks of 2, 2, 2, 1 elements = 8, 8, 8, 4 bytes; 28 bytes in all.
  const DataType f32 = DataType::kFloat32;
  const uint64_t rs_sent[] = {20, 20, 20, 24};      // 28 - chunk r
  const uint64_t rs_received[] = {24, 20, 20, 20};  // 28 - chunk r-1
  const uint64_t ag_sent[] = {20, 20, 24, 20};      // 28 - chunk r+1
  const uint64_t ar_sent[] = {40, 40, 44, 44};      // 56 - chunk r - chunk r+1
  for (int r = 0; r < 4; ++r) {
    const RingCost rs = Ring(CollectiveKind::kReduceScatter, 4, r, 7, f32);
    EXPECT_EQ(rs.bytes_sent, rs_sent[r]) << r;
    EXPECT_EQ(rs.bytes_received, rs_received[r]) << r;
    EXPECT_EQ(rs.bytes_reduced, rs_received[r]) << r;
    EXPECT_EQ(RingBytesSent(CollectiveKind::kAllGather, 4, r, 7, f32), ag_sent[r]) << r;
    EXPECT_EQ(RingBytesSent(CollectiveKind::kAllReduce, 4, r, 7, f32), ar_sent[r]) << r;
  }
  EXPECT_EQ(RingMaxBytesSent(CollectiveKind::kReduceScatter, 4, 7, f32), 24u);
  EXPECT_EQ(RingMaxBytesSent(CollectiveKind::kAllGather, 4, 7, f32), 24u);
  EXPECT_EQ(RingMaxBytesSent(CollectiveKind::kAllReduce, 4, 7, f32), 44u);

  // The slowest rank, not the sum of separate maxima: per rank sent + reduced is
  // 40+24, 40+20, 44+20, 44+20, so 64 (max sent 44 + max reduced 24 would be 68).
  const MachineParams bytes_only{.alpha_s = 0.0, .beta_s_per_byte = 1.0, .gamma_s_per_byte = 1.0};
  EXPECT_DOUBLE_EQ(RingTime(CollectiveKind::kAllReduce, 4, 7, f32, bytes_only), 64.0);
}

TEST(CostModelTest, FewerElementsThanRanks) {
  // 1 element on 4 ranks: only chunk 0 is non-empty, yet the schedule keeps its steps.
  for (int r = 0; r < 4; ++r) {
    const RingCost ag = Ring(CollectiveKind::kAllGather, 4, r, 1, DataType::kFloat64);
    EXPECT_EQ(ag.bytes_sent, r == 3 ? 0u : 8u) << r;  // rank 3 never sends chunk 0
    EXPECT_EQ(ag.bytes_received, r == 0 ? 0u : 8u) << r;
    EXPECT_EQ(ag.steps, 3);
  }
}

TEST(CostModelTest, NothingMovesForOneRankOrEmptyBuffer) {
  for (CollectiveKind kind : kKinds) {
    const RingCost one = Ring(kind, 1, 0, 1000, DataType::kFloat32);
    EXPECT_EQ(one.bytes_sent, 0u);
    EXPECT_EQ(one.bytes_received, 0u);
    EXPECT_EQ(one.bytes_reduced, 0u);
    EXPECT_EQ(one.steps, 0);
    const RingCost empty = Ring(kind, 5, 2, 0, DataType::kFloat32);
    EXPECT_EQ(empty.bytes_sent, 0u);
    EXPECT_EQ(empty.steps, 0);
    EXPECT_EQ(RingTime(kind, 1, 1000, DataType::kFloat32), 0.0);
    EXPECT_EQ(RingTime(kind, 5, 0, DataType::kFloat32), 0.0);
    EXPECT_EQ(RingTimeClosedForm(kind, 1, 4000.0), 0.0);
    EXPECT_EQ(RingTimeClosedForm(kind, 5, 0.0), 0.0);
    EXPECT_EQ(BusBandwidthFactor(kind, 1), 0.0);
  }
}

TEST(CostModelTest, OutOfRangeArgumentsGiveZero) {
  for (CollectiveKind kind : kKinds) {
    EXPECT_EQ(Ring(kind, 0, 0, 8, DataType::kFloat32).bytes_sent, 0u);
    EXPECT_EQ(Ring(kind, 4, -1, 8, DataType::kFloat32).bytes_sent, 0u);
    EXPECT_EQ(Ring(kind, 4, 4, 8, DataType::kFloat32).bytes_sent, 0u);
    EXPECT_EQ(RingMaxBytesSent(kind, 0, 8, DataType::kFloat32), 0u);
    EXPECT_EQ(RingMaxBytesSent(kind, -3, 8, DataType::kFloat32), 0u);
  }
  EXPECT_EQ(Ring(static_cast<CollectiveKind>(200), 4, 0, 8, DataType::kFloat32).steps, 0);
}

TEST(CostModelTest, MatchesStepByStepSimulation) {
  for (CollectiveKind kind : kKinds) {
    for (int p = 1; p <= 8; ++p) {
      for (size_t count : kCounts) {
        for (DataType dtype : kTypes) {
          SCOPED_TRACE(testing::Message() << CollectiveKindName(kind) << " p=" << p
                                          << " count=" << count << " " << DataTypeName(dtype));
          const std::vector<RingCost> expected = Simulate(kind, p, count, dtype);
          uint64_t total_sent = 0;
          uint64_t total_received = 0;
          uint64_t most_sent = 0;
          for (int r = 0; r < p; ++r) {
            const RingCost want = expected[static_cast<size_t>(r)];
            const RingCost got = Ring(kind, p, r, count, dtype);
            EXPECT_EQ(got.bytes_sent, want.bytes_sent) << "rank " << r;
            EXPECT_EQ(got.bytes_received, want.bytes_received) << "rank " << r;
            EXPECT_EQ(got.bytes_reduced, want.bytes_reduced) << "rank " << r;
            EXPECT_EQ(got.steps, want.steps) << "rank " << r;
            EXPECT_EQ(RingBytesSent(kind, p, r, count, dtype), want.bytes_sent);
            total_sent += got.bytes_sent;
            total_received += got.bytes_received;
            most_sent = std::max(most_sent, want.bytes_sent);
          }
          // Every byte sent on the ring is received by the next rank.
          EXPECT_EQ(total_sent, total_received);
          EXPECT_EQ(RingMaxBytesSent(kind, p, count, dtype), most_sent);
        }
      }
    }
  }
}

TEST(CostModelTest, TotalsAcrossRanks) {
  // Summed over ranks: each phase moves every chunk p-1 times, i.e. (p-1) * n bytes.
  for (CollectiveKind kind : kKinds) {
    const uint64_t phases = kind == CollectiveKind::kAllReduce ? 2 : 1;
    for (int p = 1; p <= 8; ++p) {
      for (size_t count : kCounts) {
        uint64_t total = 0;
        uint64_t reduced = 0;
        for (int r = 0; r < p; ++r) {
          total += RingBytesSent(kind, p, r, count, DataType::kFloat32);
          reduced += Ring(kind, p, r, count, DataType::kFloat32).bytes_reduced;
        }
        const uint64_t n = count * 4;
        const uint64_t hops = static_cast<uint64_t>(p - 1);
        EXPECT_EQ(total, phases * hops * n) << p << " " << count;
        EXPECT_EQ(reduced, kind == CollectiveKind::kAllGather ? 0 : hops * n) << p << " " << count;
      }
    }
  }
}

TEST(CostModelTest, EvenSplitEqualsClosedForm) {
  for (int p = 1; p <= 8; ++p) {
    for (uint64_t per_rank : {1u, 2u, 125u, 4099u}) {
      const size_t count = per_rank * static_cast<uint64_t>(p);
      for (DataType dtype : kTypes) {
        const uint64_t n = count * DataTypeSize(dtype);
        const uint64_t hops = static_cast<uint64_t>(p - 1);
        for (int r = 0; r < p; ++r) {
          // Integer forms of 2(p-1)/p n and (p-1)/p n: exact, no rounding.
          const RingCost ar = Ring(CollectiveKind::kAllReduce, p, r, count, dtype);
          EXPECT_EQ(ar.bytes_sent * static_cast<uint64_t>(p), 2 * hops * n);
          EXPECT_EQ(ar.bytes_received * static_cast<uint64_t>(p), 2 * hops * n);
          EXPECT_EQ(ar.bytes_reduced * static_cast<uint64_t>(p), hops * n);
          EXPECT_EQ(RingBytesSent(CollectiveKind::kReduceScatter, p, r, count, dtype) *
                        static_cast<uint64_t>(p),
                    hops * n);
          EXPECT_EQ(RingBytesSent(CollectiveKind::kAllGather, p, r, count, dtype) *
                        static_cast<uint64_t>(p),
                    hops * n);
        }
        for (CollectiveKind kind : kKinds) {
          EXPECT_DOUBLE_EQ(RingBytesClosedForm(kind, p, static_cast<double>(n)),
                           static_cast<double>(RingMaxBytesSent(kind, p, count, dtype)));
        }
      }
    }
  }
}

TEST(CostModelTest, RingTimeMatchesClosedFormOnEvenSplits) {
  const MachineParams params[] = {
      MachineParams{},
      MachineParams{.alpha_s = 1.0, .beta_s_per_byte = 0.0, .gamma_s_per_byte = 0.0},
      MachineParams{.alpha_s = 0.0, .beta_s_per_byte = 1.0, .gamma_s_per_byte = 0.0},
      MachineParams{.alpha_s = 0.0, .beta_s_per_byte = 0.0, .gamma_s_per_byte = 1.0},
      MachineParams{.alpha_s = 5e-6, .beta_s_per_byte = 1e-10, .gamma_s_per_byte = 3e-10},
  };
  for (const MachineParams& mp : params) {
    for (CollectiveKind kind : kKinds) {
      for (int p = 1; p <= 8; ++p) {
        for (size_t count : {size_t{0}, size_t{8} * 105, (size_t{1} << 20) * 105}) {
          const double n = static_cast<double>(count) * 4;
          const double want = RingTimeClosedForm(kind, p, n, mp);
          const double got = RingTime(kind, p, count, DataType::kFloat32, mp);
          EXPECT_NEAR(got, want, 1e-12 * want) << CollectiveKindName(kind) << " p=" << p;
        }
      }
    }
  }
  // Pure alpha counts the steps; pure beta the bytes.
  const MachineParams alpha_only{.alpha_s = 1.0, .beta_s_per_byte = 0.0, .gamma_s_per_byte = 0.0};
  EXPECT_DOUBLE_EQ(RingTime(CollectiveKind::kAllReduce, 4, 8, DataType::kFloat32, alpha_only), 6.0);
  EXPECT_DOUBLE_EQ(RingTime(CollectiveKind::kAllGather, 4, 8, DataType::kFloat32, alpha_only), 3.0);
  const MachineParams beta_only{.alpha_s = 0.0, .beta_s_per_byte = 1.0, .gamma_s_per_byte = 0.0};
  EXPECT_DOUBLE_EQ(RingTime(CollectiveKind::kAllReduce, 4, 8, DataType::kFloat32, beta_only), 48.0);
  // Default parameters: 6 * 2 us + 48 B / 8 GB/s + 24 B / 10 GB/s.
  EXPECT_NEAR(RingTime(CollectiveKind::kAllReduce, 4, 8, DataType::kFloat32),
              12e-6 + 48.0 / 8e9 + 24.0 / 10e9, 1e-18);
}

TEST(CostModelTest, RingTimeIsMonotoneInCount) {
  for (CollectiveKind kind : kKinds) {
    for (int p = 1; p <= 8; ++p) {
      double last = -1.0;
      for (size_t count = 0; count <= 100; ++count) {
        const double t = RingTime(kind, p, count, DataType::kFloat16);
        EXPECT_GE(t, last) << CollectiveKindName(kind) << " p=" << p << " count=" << count;
        last = t;
      }
      EXPECT_LE(RingTime(kind, p, 1000, DataType::kFloat16),
                RingTime(kind, p, (size_t{1} << 20) + 3, DataType::kFloat16));
    }
  }
}

TEST(CostModelTest, BusBandwidthFactors) {
  EXPECT_DOUBLE_EQ(BusBandwidthFactor(CollectiveKind::kAllReduce, 4), 1.5);
  EXPECT_DOUBLE_EQ(BusBandwidthFactor(CollectiveKind::kReduceScatter, 4), 0.75);
  EXPECT_DOUBLE_EQ(BusBandwidthFactor(CollectiveKind::kAllGather, 8), 0.875);
  EXPECT_DOUBLE_EQ(BusBandwidthFactor(CollectiveKind::kAllReduce, 2), 1.0);
  // busbw factor * buffer bytes == bytes per rank: the bus bandwidth is the rate at which a
  // rank's link moves the ring's payload.
  for (CollectiveKind kind : kKinds) {
    for (int p = 1; p <= 8; ++p) {
      EXPECT_DOUBLE_EQ(BusBandwidthFactor(kind, p) * 840.0, RingBytesClosedForm(kind, p, 840.0));
    }
  }
}

}  // namespace
}  // namespace chorus::model
