// CallTag: what identifies one collective call, carried by every message; and where a rank
// shows the call it is in to the peers that look (Beacon), for the census (census.h).
#pragma once

#include <atomic>
#include <cstdint>

#include "base/wait.h"
#include "chorus/communicator.h"

namespace chorus::internal {

// Identifies one collective call. Every message carries it so that a receiver can prove the
// sender is in the same call with the same arguments.
struct CallTag {
  uint64_t call_index = 0;  // calls made on this communicator before this one, rejected included
  uint64_t count = 0;       // the caller's total buffer count (see model/cost_model.h)
  CollectiveKind kind = CollectiveKind::kAllReduce;
  DataType dtype = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  uint8_t algorithm = 0;  // index in the selection table (algo/select.h)
  uint32_t root = 0;      // the root rank of a rooted collective (base/collectives.h), else 0
  // A varied collective's counts: the digest of the counts every rank passes (all-gather-v,
  // reduce-scatter-v), or the elements this pair of ranks exchanges (the others, set per peer
  // by the algorithm, Channel::SetPairCount); else 0.
  uint64_t layout = 0;

  bool operator==(const CallTag&) const = default;
};

// A tag as the four words of Beacon::call (and of a census answer over TCP or MPI).
inline void PackTag(const CallTag& tag, uint64_t words[Beacon::kCallWords]) {
  words[0] = tag.call_index;
  words[1] = tag.count;
  words[2] = uint64_t{static_cast<uint8_t>(tag.kind)} |
             uint64_t{static_cast<uint8_t>(tag.dtype)} << 8 |
             uint64_t{static_cast<uint8_t>(tag.op)} << 16 | uint64_t{tag.algorithm} << 24 |
             uint64_t{tag.root} << 32;
  words[3] = tag.layout;
}

// 64 bits that stand for all of `tag` but its call index, for a ring entry that has no room
// for the whole tag (Mailbox). Each step below is a bijection of the one word it mixes in, so
// two tags that differ in one word of PackTag's (the count, the layout, or the word of kind,
// type, op, algorithm and root) always differ here; tags that differ in more than one collide
// with a chance of about 2^-64.
inline uint64_t TagDigest(const CallTag& tag) {
  uint64_t words[Beacon::kCallWords];
  PackTag(tag, words);
  uint64_t h = words[1] * 0x9e37'79b9'7f4a'7c15;
  h = ((h ^ (h >> 29)) ^ words[2]) * 0xbf58'476d'1ce4'e5b9;
  h = ((h ^ (h >> 32)) ^ words[3]) * 0x94d0'49bb'1331'11eb;
  return h ^ (h >> 31);
}

// False when the words name no collective, type or op (a peer of another version).
bool UnpackTag(const uint64_t words[Beacon::kCallWords], CallTag* tag);

// Shows `tag` as the call this rank is in. Written by the rank alone, once per call.
inline void PublishCall(Beacon& beacon, const CallTag& tag) {
  uint64_t words[Beacon::kCallWords];
  PackTag(tag, words);
  // A reader that sees any new word (an acquire load of a release store) sees the odd version
  // too, and so knows the words are being rewritten. No fences: TSan does not follow them.
  const uint32_t version = beacon.call_version.load(std::memory_order_relaxed);
  beacon.call_version.store(version + 1, std::memory_order_relaxed);  // odd: being written
  for (int i = 0; i < Beacon::kCallWords; ++i) {
    beacon.call[i].store(words[i], std::memory_order_release);
  }
  beacon.call_version.store(version + 2, std::memory_order_release);
}

// The call `beacon`'s rank last showed, or false if none (or it is being rewritten).
bool ReadCall(const Beacon& beacon, CallTag* tag);

}  // namespace chorus::internal
