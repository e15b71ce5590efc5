// bench_ops.cpp: the per-collective part of a `chorus bench` rank (bench_rank.h): a call's
// buffers, as the collective's count relation lays them out; their fill before a call; the
// call itself; and the check of its result, by the collective's outcome. Everything is read
// from the collective's row (base/collectives.h), so a new collective needs a new case here
// only if it brings a new Counts or Outcome.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "base/collectives.h"
#include "bench_check.h"
#include "bench_config.h"
#include "bench_rank.h"
#include "chorus/chorus.h"

namespace chorus::cli {

const BlockLayout& BenchRank::LayoutOf(BenchOp op, const SizePoint& size) const {
  if (layout_size_ != &size || layout_op_ != op) {
    LayoutAt(op, size, ranks_, rank_, cfg_.even_split, &layout_);
    layout_size_ = &size;
    layout_op_ = op;
  }
  return layout_;
}

// The call's buffers, as the collective's count relation (base/collectives.h) has them: out of
// place send_ and recv_; in place recv_, where a smaller buffer is this rank's block of it.
internal::CallArgs BenchRank::Args(BenchOp op, Placement where, const SizePoint& size) const {
  const DataType dt = cfg_.dtype;
  const internal::CollectiveInfo& c = InfoOf(op);
  internal::CallArgs args{c.kind, {}, {}, cfg_.redop, cfg_.root, {}, {}};
  if (c.counts == internal::Counts::kNone) return args;
  const BlockLayout& layout = LayoutOf(op, size);
  const size_t send_count = OffsetOf(layout.send, layout.send.size());
  const size_t recv_count = OffsetOf(layout.recv, layout.recv.size());
  uint8_t* send = send_.get();
  uint8_t* recv = recv_.get();
  if (where == Placement::kInPlace && !c.in_place.empty()) {
    if (layout.send.size() == layout.recv.size()) {
      send = recv;  // one buffer for both
    } else {
      // The in-place block: this rank's of the buffer with more blocks.
      const bool recv_large = layout.recv.size() > layout.send.size();
      const std::vector<size_t>& large = recv_large ? layout.recv : layout.send;
      uint8_t* own = recv + OffsetOf(large, static_cast<size_t>(rank_)) * elem_;
      if (recv_large) {
        send = own;  // the block, inside the receive buffer
      } else {
        send = recv;  // the whole buffer is the send; the block inside it receives
        recv = own;
      }
    }
  }
  args.send = {send, send_count, dt};
  args.recv = {recv, recv_count, dt};
  if (c.varied) {
    if (internal::SendIsPerRank(c.counts)) args.send_counts = layout.send;
    if (internal::RecvIsPerRank(c.counts)) args.recv_counts = layout.recv;
  }
  return args;
}

Status BenchRank::RunOp(BenchOp op, Placement where, const SizePoint& size) {
  const internal::CallArgs args = Args(op, where, size);
  if (!IsCollectiveOp(op)) {  // sendrecv: the ring shift, as MPI_Sendrecv (the peers) runs it
    return group_.comm().SendRecv(args.send, (rank_ + 1) % ranks_, args.recv,
                                  (rank_ + ranks_ - 1) % ranks_, message_);
  }
  return internal::RunCollective(group_.comm(), args, call_[static_cast<size_t>(op)]);
}

void BenchRank::Prepare(size_t op_index, Placement where, const SizePoint& size) {
  using internal::Outcome;
  const BenchOp op = cfg_.ops[op_index];
  const internal::CollectiveInfo& c = InfoOf(op);
  if (c.outcome == Outcome::kNothing) return;
  const uint8_t* pattern = patterns_[op_index].input[static_cast<size_t>(rank_)].data();
  const internal::CallArgs args = Args(op, where, size);
  auto* in = static_cast<uint8_t*>(const_cast<void*>(args.send.data));
  // Moved data starts from all 0xFF, so that a block nobody wrote shows.
  if (where == Placement::kOutOfPlace || c.outcome == Outcome::kMoved) {
    std::memset(recv_.get(), 0xFF, std::max(args.recv.count, size.total) * elem_);
  }
  // Every block of the send is the rank's pattern from the block's own offset.
  FillPattern(in, args.send.count, elem_, pattern, 0);
}

uint64_t BenchRank::Verify(size_t op_index, Placement where, const SizePoint& size) const {
  using internal::Outcome;
  const BenchOp op = cfg_.ops[op_index];
  const internal::CollectiveInfo& c = InfoOf(op);
  const Patterns& pat = patterns_[op_index];
  const internal::CallArgs args = Args(op, where, size);
  const auto* out = static_cast<const uint8_t*>(args.recv.data);
  const bool writes_recv = !c.recv_only_at_root || rank_ == cfg_.root;
  switch (c.outcome) {
    case Outcome::kCombined:
      return CountMismatches(out, size.total, elem_, pat.expected.data(), 0);
    case Outcome::kCombinedBlock: {  // rank r holds block r of the send's blocks
      const BlockLayout& layout = LayoutOf(op, size);
      return CountMismatches(out, layout.recv[0], elem_, pat.expected.data(),
                             OffsetOf(layout.send, static_cast<size_t>(rank_)) % kPeriod);
    }
    case Outcome::kCombinedAtRoot:
      return writes_recv ? CountMismatches(out, size.total, elem_, pat.expected.data(), 0) : 0;
    case Outcome::kMoved: {
      if (!writes_recv) return 0;
      const std::vector<size_t> recv = LayoutOf(op, size).recv;  // the sender's replaces it
      uint64_t wrong = 0;
      for (size_t j = 0; j < recv.size(); ++j) {
        const internal::BlockSource from =
            c.source != nullptr ? c.source(rank_, static_cast<int>(j), cfg_.root)
                                : internal::BlockSource{(rank_ + ranks_ - 1) % ranks_, 0};
        // Where the block starts in the sender's send, which it filled from offset 0.
        LayoutAt(op, size, ranks_, from.rank, cfg_.even_split, &layout_);
        layout_size_ = nullptr;
        const size_t phase = OffsetOf(layout_.send, static_cast<size_t>(from.block));
        wrong += CountMismatches(out + OffsetOf(recv, j) * elem_, recv[j], elem_,
                                 pat.input[static_cast<size_t>(from.rank)].data(), phase);
      }
      return wrong;
    }
    case Outcome::kNothing:
      break;
  }
  return 0;
}

}  // namespace chorus::cli
