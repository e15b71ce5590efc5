// Tests for the per-algorithm cost model (model/algorithm_cost.h), through the algorithm table
// that names each algorithm's terms (algo/select.h): exact terms for hand-worked cases,
// agreement with the ring model of cost_model.h, the fold for p that is not a power of two, the
// rd / Rabenseifner crossover, oversubscription and the edge cases.
//
// Parameters are powers of two where a test compares exact values, so that every product and sum
// is exact in binary floating point and EXPECT_EQ is meaningful.
#include "model/algorithm_cost.h"

#include <gtest/gtest.h>

#include <string_view>
#include <vector>

#include "algo/select.h"
#include "model/cost_model.h"

namespace chorus::model {
namespace {

using Kind = CollectiveKind;

constexpr Kind kKinds[] = {Kind::kAllReduce, Kind::kReduceScatter, Kind::kAllGather};

// One term at a time, so a prediction reads back as steps, sent or reduced bytes.
constexpr MachineParams kAlphaOnly{.alpha_s = 1.0, .beta_s_per_byte = 0, .gamma_s_per_byte = 0};
constexpr MachineParams kBetaOnly{.alpha_s = 0, .beta_s_per_byte = 1.0, .gamma_s_per_byte = 0};
constexpr MachineParams kGammaOnly{.alpha_s = 0, .beta_s_per_byte = 0, .gamma_s_per_byte = 1.0};
constexpr MachineParams kMixed{
    .alpha_s = 0.5, .beta_s_per_byte = 0.125, .gamma_s_per_byte = 0.0625};
constexpr int kManyCores = 1024;  // no oversubscription

// The row of (k, name) in the algorithm table; the test fails where there is none.
const internal::AlgorithmInfo& Row(Kind k, std::string_view name) {
  const internal::AlgorithmInfo* info = internal::FindAlgorithm(k, name);
  if (info == nullptr) {
    ADD_FAILURE() << CollectiveKindName(k) << " has no algorithm " << name;
    info = &internal::Algorithms().front();
  }
  return *info;
}
double PredictSeconds(Kind k, std::string_view name, int p, double n, const MachineParams& m,
                      int cores) {
  return model::PredictSeconds(Row(k, name).terms.get(), p, n, m, cores);
}
AlgorithmTerms Terms(Kind k, std::string_view name, int p) { return Row(k, name).terms(p); }
// The algorithms of `k`, in table order.
std::vector<std::string_view> AlgorithmsOf(Kind k) {
  std::vector<std::string_view> names;
  for (const internal::AlgorithmInfo& info : internal::Algorithms()) {
    if (info.kind == k) names.push_back(info.name);
  }
  return names;
}

double Steps(Kind k, std::string_view name, int p) {
  return PredictSeconds(k, name, p, 1024, kAlphaOnly, kManyCores);
}
double Sent(Kind k, std::string_view name, int p, double n) {
  return PredictSeconds(k, name, p, n, kBetaOnly, kManyCores);
}
double Reduced(Kind k, std::string_view name, int p, double n) {
  return PredictSeconds(k, name, p, n, kGammaOnly, kManyCores);
}

// The closed form of Bruck's per-step block count against counting the positions one by one.
TEST(AlgorithmCost, BruckAllToAllBlocksCountsThePositionsWithTheBitSet) {
  for (int p = 1; p <= 130; ++p) {
    for (int bit = 1; bit < 2 * p; bit *= 2) {
      int want = 0;
      for (int i = 0; i < p; ++i) want += (i & bit) != 0 ? 1 : 0;
      EXPECT_EQ(BruckAllToAllBlocks(p, bit), want) << "p " << p << " bit " << bit;
    }
  }
}

TEST(AlgorithmCost, AlgorithmsInTableOrder) {
  EXPECT_EQ(AlgorithmsOf(Kind::kAllReduce),
            (std::vector<std::string_view>{"oneshot", "direct", "hierarchical", "ring",
                                           "rabenseifner", "rd"}));
  EXPECT_EQ(AlgorithmsOf(Kind::kReduceScatter), (std::vector<std::string_view>{"direct", "ring"}));
  EXPECT_EQ(AlgorithmsOf(Kind::kAllGather),
            (std::vector<std::string_view>{"direct", "ring", "bruck"}));
}

// Every algorithm has its terms (a row without them does not compile); names are exact.
TEST(AlgorithmCost, UnknownAlgorithmHasNoRow) {
  EXPECT_EQ(internal::FindAlgorithm(Kind::kAllReduce, "bruck"), nullptr);
  EXPECT_EQ(internal::FindAlgorithm(Kind::kReduceScatter, "oneshot"), nullptr);
  EXPECT_EQ(internal::FindAlgorithm(Kind::kAllGather, "rd"), nullptr);
  EXPECT_EQ(internal::FindAlgorithm(Kind::kAllReduce, ""), nullptr);
  EXPECT_EQ(internal::FindAlgorithm(Kind::kAllReduce, "Ring"), nullptr);
  EXPECT_EQ(internal::FindAlgorithm(static_cast<Kind>(kNumCollectiveKinds), "ring"), nullptr);
  for (const internal::AlgorithmInfo& info : internal::Algorithms()) {
    EXPECT_EQ(internal::FindAlgorithm(info.kind, info.name), &info);
    EXPECT_NE(info.terms.get(), nullptr) << info.name;
  }
}

TEST(AlgorithmCost, NothingMovesForOneRankOrEmptyBuffer) {
  for (Kind k : kKinds) {
    for (std::string_view name : AlgorithmsOf(k)) {
      SCOPED_TRACE(name);
      EXPECT_EQ(PredictSeconds(k, name, 1, 1 << 20, kMixed, 2), 0);
      EXPECT_EQ(PredictSeconds(k, name, 0, 1 << 20, kMixed, 2), 0);
      EXPECT_EQ(PredictSeconds(k, name, 4, 0, kMixed, 2), 0);
      EXPECT_EQ(PredictSeconds(k, name, 4, -5, kMixed, 2), 0);
      const AlgorithmTerms terms = Terms(k, name, 1);
      EXPECT_EQ(terms.steps, 0);
      EXPECT_EQ(terms.sent, 0);
      EXPECT_EQ(terms.reduced, 0);
    }
  }
}

// The ring rows are the textbook forms of cost_model.h, for every p and kind.
TEST(AlgorithmCost, RingEqualsRingTimeClosedForm) {
  for (Kind k : kKinds) {
    for (int p = 2; p <= 9; ++p) {
      for (double n : {4.0, 1000.0, 1048576.0, 3.0 * 7 * 1024}) {
        EXPECT_DOUBLE_EQ(PredictSeconds(k, "ring", p, n, kMixed, kManyCores),
                         RingTimeClosedForm(k, p, n, kMixed))
            << CollectiveKindName(k) << " p=" << p << " n=" << n;
      }
    }
  }
  // Without host information the hierarchical all-reduce is costed as the flat ring.
  EXPECT_EQ(PredictSeconds(Kind::kAllReduce, "hierarchical", 6, 6144, kMixed, kManyCores),
            PredictSeconds(Kind::kAllReduce, "ring", 6, 6144, kMixed, kManyCores));
}

// Hand-worked values, p = 4, n = 1024 bytes, a = 0.5, b = 1/8, g = 1/16:
//   oneshot      1 a + 3 n b + 3 n g          = 0.5 + 384 + 192           = 576.5
//   direct       2 a + 1.5 n b + 0.75 n g     = 1 + 192 + 48              = 241
//   ring         6 a + 1.5 n b + 0.75 n g     = 3 + 192 + 48              = 243
//   rd           2 a + 2 n b + 2 n g          = 1 + 256 + 128             = 385
//   rabenseifner 4 a + 1.5 n b + 0.75 n g     = 2 + 192 + 48              = 242
//   RS direct    1 a + 0.75 n b + 0.75 n g    = 0.5 + 96 + 48             = 144.5
//   RS ring      3 a + 0.75 n b + 0.75 n g    = 1.5 + 96 + 48             = 145.5
//   AG direct    1 a + 0.75 n b               = 0.5 + 96                  = 96.5
//   AG ring      3 a + 0.75 n b               = 1.5 + 96                  = 97.5
//   AG bruck     2 a + 0.75 n b               = 1 + 96                    = 97
TEST(AlgorithmCost, ExactValuesFourRanks) {
  const double n = 1024;
  auto t = [&](Kind k, std::string_view name) {
    return PredictSeconds(k, name, 4, n, kMixed, kManyCores);
  };
  EXPECT_EQ(t(Kind::kAllReduce, "oneshot"), 576.5);
  EXPECT_EQ(t(Kind::kAllReduce, "direct"), 241);
  EXPECT_EQ(t(Kind::kAllReduce, "ring"), 243);
  EXPECT_EQ(t(Kind::kAllReduce, "rd"), 385);
  EXPECT_EQ(t(Kind::kAllReduce, "rabenseifner"), 242);
  EXPECT_EQ(t(Kind::kReduceScatter, "direct"), 144.5);
  EXPECT_EQ(t(Kind::kReduceScatter, "ring"), 145.5);
  EXPECT_EQ(t(Kind::kAllGather, "direct"), 96.5);
  EXPECT_EQ(t(Kind::kAllGather, "ring"), 97.5);
  EXPECT_EQ(t(Kind::kAllGather, "bruck"), 97);
}

TEST(AlgorithmCost, StepCounts) {
  // p:                       2  3  4  5  6  7  8  9
  const int rd[] = {1, 3, 2, 4, 4, 4, 3, 5};     // lg p' + 2 when p is not a power of two
  const int raben[] = {2, 4, 4, 6, 6, 6, 6, 8};  // 2 lg p' + 2 likewise
  const int bruck[] = {1, 2, 2, 3, 3, 3, 3, 4};  // ceil(lg p)
  for (int p = 2; p <= 9; ++p) {
    SCOPED_TRACE(p);
    const size_t i = static_cast<size_t>(p - 2);
    EXPECT_EQ(Steps(Kind::kAllReduce, "rd", p), rd[i]);
    EXPECT_EQ(Steps(Kind::kAllReduce, "rabenseifner", p), raben[i]);
    EXPECT_EQ(Steps(Kind::kAllGather, "bruck", p), bruck[i]);
    EXPECT_EQ(Steps(Kind::kAllReduce, "oneshot", p), 1);
    EXPECT_EQ(Steps(Kind::kAllReduce, "direct", p), 2);
    EXPECT_EQ(Steps(Kind::kAllReduce, "ring", p), 2 * (p - 1));
    EXPECT_EQ(Steps(Kind::kReduceScatter, "direct", p), 1);
    EXPECT_EQ(Steps(Kind::kReduceScatter, "ring", p), p - 1);
    EXPECT_EQ(Steps(Kind::kAllGather, "direct", p), 1);
    EXPECT_EQ(Steps(Kind::kAllGather, "ring", p), p - 1);
  }
}

// p = 6 folds onto p' = 4: two more steps, each of the whole buffer, and one more reduction.
TEST(AlgorithmCost, FoldForNonPowerOfTwo) {
  const double n = 4096;
  EXPECT_EQ(Steps(Kind::kAllReduce, "rd", 6) - Steps(Kind::kAllReduce, "rd", 4), 2);
  EXPECT_EQ(Sent(Kind::kAllReduce, "rd", 6, n), 2 * n + 2 * n);  // lg 4 = 2 exchanges + fold
  EXPECT_EQ(Sent(Kind::kAllReduce, "rd", 6, n) - Sent(Kind::kAllReduce, "rd", 4, n), 2 * n);
  EXPECT_EQ(Reduced(Kind::kAllReduce, "rd", 6, n) - Reduced(Kind::kAllReduce, "rd", 4, n), n);
  EXPECT_EQ(Steps(Kind::kAllReduce, "rabenseifner", 6) - Steps(Kind::kAllReduce, "rabenseifner", 4),
            2);
  // Rabenseifner over p' = 4: 2 (3/4) n = 1.5 n, plus the fold's 2 n.
  EXPECT_EQ(Sent(Kind::kAllReduce, "rabenseifner", 6, n), 1.5 * n + 2 * n);
  EXPECT_EQ(Reduced(Kind::kAllReduce, "rabenseifner", 6, n), 0.75 * n + n);
  // Powers of two have no fold: p = 8 needs three exchanges and nothing else.
  EXPECT_EQ(Sent(Kind::kAllReduce, "rd", 8, n), 3 * n);
  EXPECT_EQ(Sent(Kind::kAllReduce, "rabenseifner", 8, n), 2 * 7.0 / 8 * n);
  // The fold is the same for every p between two powers of two.
  for (int p = 5; p <= 7; ++p) {
    EXPECT_EQ(Sent(Kind::kAllReduce, "rd", p, n), Sent(Kind::kAllReduce, "rd", 6, n));
  }
}

// Recursive doubling has fewer steps, Rabenseifner fewer bytes: rd wins small buffers, and past
// a crossover Rabenseifner wins. For p = 8 the difference is 3 a - (3 - 1.75) n b - (3 - 0.875)
// n g, zero at n = 3a / (1.25 b + 2.125 g).
TEST(AlgorithmCost, RdRabenseifnerCrossover) {
  const MachineParams m{.alpha_s = 2e-6, .beta_s_per_byte = 1e-10, .gamma_s_per_byte = 1e-10};
  auto rd = [&](double n) { return PredictSeconds(Kind::kAllReduce, "rd", 8, n, m, kManyCores); };
  auto rab = [&](double n) {
    return PredictSeconds(Kind::kAllReduce, "rabenseifner", 8, n, m, kManyCores);
  };
  const double crossover = 3 * m.alpha_s / (1.25 * m.beta_s_per_byte + 2.125 * m.gamma_s_per_byte);
  EXPECT_LT(rd(32), rab(32));
  EXPECT_LT(rd(crossover * 0.9), rab(crossover * 0.9));
  EXPECT_GT(rd(crossover * 1.1), rab(crossover * 1.1));
  EXPECT_GT(rd(64 << 20), rab(64 << 20));
  EXPECT_NEAR(rd(crossover), rab(crossover), 1e-12);
  // With p = 2 both are one exchange of the whole buffer against two of half of it.
  EXPECT_EQ(Steps(Kind::kAllReduce, "rd", 2), 1);
  EXPECT_EQ(Sent(Kind::kAllReduce, "rd", 2, 1024), Sent(Kind::kAllReduce, "rabenseifner", 2, 1024));
}

// More ranks than cores: every term scales by ranks / cores.
TEST(AlgorithmCost, OversubscriptionScalesEveryTerm) {
  EXPECT_EQ(OversubscriptionFactor(4, 2), 2);
  EXPECT_EQ(OversubscriptionFactor(3, 2), 1.5);
  EXPECT_EQ(OversubscriptionFactor(2, 2), 1);
  EXPECT_EQ(OversubscriptionFactor(2, 8), 1);
  EXPECT_EQ(OversubscriptionFactor(4, 0), 1);  // unknown core count
  EXPECT_EQ(OversubscriptionFactor(4, -1), 1);
  const double n = 1024;
  for (Kind k : kKinds) {
    for (std::string_view name : AlgorithmsOf(k)) {
      SCOPED_TRACE(name);
      EXPECT_EQ(PredictSeconds(k, name, 4, n, kAlphaOnly, 2),
                2 * PredictSeconds(k, name, 4, n, kAlphaOnly, kManyCores));
      EXPECT_EQ(PredictSeconds(k, name, 4, n, kBetaOnly, 2),
                2 * PredictSeconds(k, name, 4, n, kBetaOnly, kManyCores));
      EXPECT_EQ(PredictSeconds(k, name, 4, n, kGammaOnly, 2),
                2 * PredictSeconds(k, name, 4, n, kGammaOnly, kManyCores));
      EXPECT_EQ(PredictSeconds(k, name, 4, n, kBetaOnly, 4),
                PredictSeconds(k, name, 4, n, kBetaOnly, kManyCores));
    }
  }
  // p = 4 on 2 cores, hand-worked: ring all-reduce 2 (6 a + 1.5 n b + 0.75 n g).
  EXPECT_EQ(PredictSeconds(Kind::kAllReduce, "ring", 4, 1024, kMixed, 2), 2 * (3 + 192 + 48));
}

// The terms are what PredictSeconds multiplies out.
TEST(AlgorithmCost, TermsMatchPrediction) {
  for (Kind k : kKinds) {
    for (std::string_view name : AlgorithmsOf(k)) {
      for (int p : {2, 3, 4, 5, 8, 12}) {
        const AlgorithmTerms t = Terms(k, name, p);
        const double n = 1 << 16;
        EXPECT_DOUBLE_EQ(PredictSeconds(k, name, p, n, kMixed, kManyCores),
                         t.steps * 0.5 + t.sent * n * 0.125 + t.reduced * n * 0.0625)
            << name << " p=" << p;
        if (k == Kind::kAllGather) {
          EXPECT_EQ(t.reduced, 0) << name;
        }
        // Nothing beats the bandwidth lower bound (Patarasuk and Yuan): 2(p-1)/p n for
        // all-reduce, (p-1)/p n for the other two.
        const double bound = (k == Kind::kAllReduce ? 2.0 : 1.0) * (p - 1) / p;
        EXPECT_GE(t.sent, bound - 1e-12) << name << " p=" << p;
      }
    }
  }
}

}  // namespace
}  // namespace chorus::model
