// Argument checks at the API edge: each collective's arguments are checked once, on entry,
// before anything is sent. Messages name the operation and the argument:
//   "allreduce: recv.count (10) != send.count (12)".
#pragma once

#include <cstddef>

#include "chorus/communicator.h"
#include "chorus/status.h"

namespace chorus::internal {

struct CallShape {
  CollectiveKind kind;
  int rank;
  int size;
  size_t max_segment_bytes;  // the communicator's staging slot size
};

// OK when `send`, `recv` and `op` form a valid call of `shape.kind` (op is ignored for
// all-gather). `options.segment_bytes` is checked too.
Status ValidateCall(const CallShape& shape, ConstBuffer send, MutableBuffer recv, ReduceOp op,
                    const CallOptions& options);

// OK when `options` can make a communicator of `size` ranks.
Status ValidateCommOptions(const CommOptions& options, int size, const char* op);

}  // namespace chorus::internal
