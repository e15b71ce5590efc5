// Argument checks at the API edge: each collective's arguments are checked once, on entry,
// before anything is sent. Messages name the operation and the argument:
//   "allreduce: recv.count (10) != send.count (12)".
#pragma once

#include <cstddef>
#include <string_view>

#include "base/collectives.h"
#include "chorus/communicator.h"
#include "chorus/status.h"

namespace chorus::internal {

struct CallShape {
  int rank;
  int size;
  size_t max_segment_bytes;  // the communicator's staging slot size
};

// OK when `call` is a valid call of its collective (base/collectives.h) on this rank: buffers,
// counts, in-place rule, op and root as that collective's row says. `options.segment_bytes`
// and `options.timeout` are checked too. Buffers the collective ignores on this rank (those
// significant only at the root) are not checked.
Status ValidateCall(const CallShape& shape, const CallArgs& call, const CallOptions& options);

// The call with the buffers this rank ignores replaced by its other one (see
// CollectiveInfo::send_only_at_root), so that nothing below needs to ask.
CallArgs Normalized(const CallArgs& call, int rank);

// OK when a call of `op` may use `count` elements of `dtype` at `data` as its buffer `name`
// (a valid type; data, unless count is 0; a count with room for byte offsets and chunks).
Status ValidateBuffer(std::string_view op, const char* name, const void* data, size_t count,
                      DataType dtype);

// Whether two byte ranges share a byte (an empty one shares none).
bool Overlap(const void* a, size_t a_bytes, const void* b, size_t b_bytes);

// OK when `options` can make a communicator of `size` ranks.
Status ValidateCommOptions(const CommOptions& options, int size, const char* op);

}  // namespace chorus::internal
