// 05: sub-communicators and going on after a rank leaves. Run it under a launcher with an even
// number of ranks:
//
//   ./build/chorus launch -n 4 -- ./build/examples/05_grid_and_recovery
//   CHORUS_EXAMPLE_LEAVE_RANK=2 ./build/chorus launch -n 4 -- ./build/examples/05_grid_and_recovery
//
// The ranks form a grid of two columns (data parallelism across rows, model parallelism across
// columns): Split gives each rank its row and its column. Each rank owns one shard of a model,
// all-reduces its gradient down its column (the ranks holding the same shard) and all-gathers
// the shards along its row. Then, with CHORUS_EXAMPLE_LEAVE_RANK=r, rank r leaves; the others'
// next all-reduce fails naming it, and they go on in a communicator without it (Shrink).
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <span>
#include <string>
#include <vector>

#include "chorus/chorus.h"

namespace {

int Fail(int rank, const std::string& what, const chorus::Status& s) {
  std::fprintf(stderr, "rank %d: %s: %s\n", rank, what.c_str(), s.ToString().c_str());
  return 1;
}

}  // namespace

int main() {
  auto options = chorus::CommOptionsFromEnvironment();
  if (!options.ok()) {
    std::fprintf(stderr, "%s\n", options.status().ToString().c_str());
    return 2;
  }
  auto world = chorus::Communicator::Create(*options);
  if (!world.ok()) {
    std::fprintf(stderr, "%s\n", world.status().ToString().c_str());
    return 1;
  }
  const int rank = world->rank();
  const int size = world->size();
  if (size % 2 != 0) {
    std::fprintf(stderr, "run it on an even number of ranks, not %d\n", size);
    return 2;
  }
  constexpr int kCols = 2;
  // Row r / 2 holds ranks 2r and 2r + 1; column c holds the ranks c, c + 2, ...
  auto row = world->Split(rank / kCols, rank);
  if (!row.ok()) return Fail(rank, "split into rows", row.status());
  auto col = world->Split(rank % kCols, rank);
  if (!col.ok()) return Fail(rank, "split into columns", col.status());

  // The gradient of this rank's shard: the ranks of a column hold the same shard and average it.
  const int rows = size / kCols;
  std::vector<float> grad(1000, static_cast<float>(rank));
  if (chorus::Status s = (*col)->AllReduce(std::span<float>(grad), chorus::ReduceOp::kAvg);
      !s.ok()) {
    return Fail(rank, "column all-reduce", s);
  }
  float sum = 0;  // of the column's ranks c, c + 2, ...
  for (int r = rank % kCols; r < size; r += kCols) sum += static_cast<float>(r);
  const float want = sum / static_cast<float>(rows);
  // Each row gathers its shards into the whole model.
  std::vector<float> model(kCols * grad.size());
  if (chorus::Status s = (*row)->AllGather(std::span<const float>(grad), std::span<float>(model));
      !s.ok()) {
    return Fail(rank, "row all-gather", s);
  }
  for (size_t i = 0; i < model.size(); ++i) {
    const float shard = want + static_cast<float>(static_cast<int>(i / grad.size()) - rank % kCols);
    if (std::abs(model[i] - shard) > 1e-5f * (1 + std::abs(shard))) {
      std::fprintf(stderr, "rank %d: model[%zu] is %g, want %g\n", rank, i, model[i], shard);
      return 1;
    }
  }
  std::printf("rank %d of %d: row %d of %d ranks, column %d of %d ranks: grid ok\n", rank, size,
              rank / kCols, (*row)->size(), rank % kCols, (*col)->size());
  std::fflush(stdout);

  // A rank leaves; the others find out in their next call, and go on without it.
  const char* leave = std::getenv("CHORUS_EXAMPLE_LEAVE_RANK");
  if (leave == nullptr) return 0;
  const int leaver = std::atoi(leave);
  if (rank == leaver) {
    std::printf("rank %d: leaving\n", rank);
    return 0;
  }
  int64_t one = 1;
  chorus::Status failed = world->AllReduce(std::span<int64_t>(&one, 1), chorus::ReduceOp::kSum);
  if (failed.ok()) {
    std::fprintf(stderr, "rank %d: the all-reduce went ahead without rank %d\n", rank, leaver);
    return 1;
  }
  std::printf("rank %d: %s\n", rank, failed.ToString().c_str());
  const int exclude[] = {leaver};
  auto rest = world->Shrink(exclude);
  if (!rest.ok()) return Fail(rank, "shrink", rest.status());
  int64_t count = 1;
  if (chorus::Status s = rest->AllReduce(std::span<int64_t>(&count, 1), chorus::ReduceOp::kSum);
      !s.ok()) {
    return Fail(rank, "all-reduce after the shrink", s);
  }
  std::printf("rank %d: rank %d of %d after the shrink, all-reduce ok, %lld ranks counted\n", rank,
              rest->rank(), rest->size(), static_cast<long long>(count));
  return count == size - 1 ? 0 : 1;
}
