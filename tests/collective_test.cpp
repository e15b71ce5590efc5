// The collective matrix on thread ranks: kind x ranks x count x dtype x op x in-place, with
// exact data (support/matrix.h).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "chorus/chorus.h"
#include "support/matrix.h"
#include "support/spawn.h"

namespace chorus {
namespace {

using testing::MatrixGroupParam;

class CollectiveMatrix : public ::testing::TestWithParam<MatrixGroupParam> {};

TEST_P(CollectiveMatrix, ExactResults) {
  const MatrixGroupParam m = GetParam();
  auto group = CreateLocalGroup(m.ranks, {.timeout = std::chrono::seconds(60),
                                          .segment_bytes = testing::MatrixSegmentBytes(),
                                          .wait = testing::TestWaitMode(),
                                          .slot_stores = testing::TestSlotStores()});
  ASSERT_TRUE(group.ok()) << group.status();
  std::vector<std::vector<std::string>> errors(static_cast<size_t>(m.ranks));
  testing::RunRanks(*group, [&](Communicator& comm) {
    errors[static_cast<size_t>(comm.rank())] = testing::RunMatrixGroup(comm, m);
  });
  for (const auto& rank_errors : errors) {
    for (const std::string& e : rank_errors) ADD_FAILURE() << e;
  }
}

INSTANTIATE_TEST_SUITE_P(Matrix, CollectiveMatrix,
                         ::testing::ValuesIn(testing::MatrixGroupParams({1, 2, 3, 4, 5, 7, 8})),
                         [](const auto& param_info) {
                           return testing::MatrixGroupName(param_info.param);
                         });

}  // namespace
}  // namespace chorus
