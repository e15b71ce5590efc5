// Hierarchical all-reduce (see hierarchical.h).
#include "algo/hierarchical.h"

#include "algo/plan.h"
#include "algo/ring.h"

namespace chorus::internal {
namespace {

RingView Over(const std::vector<int>& members, int index) {
  const int n = static_cast<int>(members.size());
  return {n, index, members[static_cast<size_t>(Mod(index - 1, n))],
          members[static_cast<size_t>(Mod(index + 1, n))]};
}

}  // namespace

Status HierarchicalAllReduce(const CallContext& ctx, const void* send, void* recv, size_t count) {
  const HostLayout* layout = ctx.transport->hosts();
  if (layout == nullptr) return RingAllReduce(ctx, send, recv, count);
  const RingView local = Over(layout->local, layout->local_index);
  const RingView cross = Over(layout->cross, layout->host_index);

  // Step 1 sums within the host without finishing an average: that happens once, in step 2,
  // whose finish divides by the whole group's size.
  CallContext host_sum = ctx;
  if (ctx.tag.op == ReduceOp::kAvg)
    host_sum.kernel = &reduce::GetKernel(ctx.tag.dtype, ReduceOp::kSum);
  CHORUS_RETURN_IF_ERROR(RingReduceScatterOver(host_sum, local, send, recv, count, true));

  const Partition part(count, layout->local_size, ctx.segment_elems);
  void* chunk = Advance(recv, part.Offset(layout->local_index), ctx.elem_size);
  const size_t chunk_count = part.Size(layout->local_index);
  CHORUS_RETURN_IF_ERROR(RingAllReduceOver(ctx, cross, chunk, chunk, chunk_count));

  return RingAllGatherOver(ctx, local, chunk, recv, count);
}

}  // namespace chorus::internal
