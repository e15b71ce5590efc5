// How the ranks of one communicator find each other in a store, and only each other.
//
// Under the prefix chorus/<job id>/<name>/ (chorus/<name>/ without a job id) meetings happen in
// numbered rounds. In round n each rank claims its seat with an atomic counter
// (n/claims/<rank>: the first to add 1 holds the seat) and then writes its record
// (n/join/<rank>): a random token, host and pid, the size, its deadline as wall-clock time and
// the options every rank must share. A rank walks up from round 1 (a finished round is marked
// n/done by its rank 0, so skipping one costs two lookups):
//   - a round whose seats are all taken and whose records are all written is a meeting that
//     happened (an earlier communicator of this job, or of an earlier job on a lasting file
//     store): go on to the next;
//   - a round with a record past its deadline, or marked clashed or withdrawn (n/withdrawn: a
//     rank that waited in it gave up), is dead: go on;
//   - a round whose seat for this rank is held by a live record is a clash: another process
//     is joining as this rank right now (two jobs on one store and name, or two processes given
//     one rank). It fails at once, and marks the round clashed (n/clash) so that every rank
//     waiting in it fails at once too, with a message saying why;
//   - else this rank takes the seat and waits for the others, checking their records as they
//     come: a different size or job, or options that disagree, fail every rank of the round
//     alike.
// So ranks of different jobs never share a meeting, ranks that recreate a communicator after a
// failure meet in a fresh round, and a rank that died during an earlier meeting does not hold a
// later one up.
//
// Thread safety: Meet() is one rank's; it touches only the store.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/wait.h"
#include "chorus/store.h"

namespace chorus::internal {

// What a rank tells the others about itself.
struct MemberRecord {
  std::string token;  // random, this Create's own
  std::string host;   // hostname and boot id: ranks with the same one share a host
  int64_t pid = 0;
  int size = 0;
  std::string job;
  int64_t expires_ms = 0;  // wall clock (ms since the epoch) at which this rank gives up
  int cpus = 0;            // CPUs this rank may run on
  // Options every rank must pass alike, as "name=value" words; compared textually.
  std::string settings;
  // What this rank's machine can do, as words ("aesgcm": AES-256-GCM in hardware; "cpu=N": the
  // one CPU the rank is bound to); not compared.
  std::string caps;

  // The CPU the rank was bound to when it met the others (its "cpu=N" word), or -1.
  int BoundCpu() const;

  std::string Encode() const;
  static bool Decode(const std::string& text, MemberRecord* out);
};

struct Meeting {
  int64_t round = 0;
  std::vector<MemberRecord> members;  // by rank
};

struct MeetRequest {
  int rank = 0;
  int size = 1;
  std::string name;           // the communicator's name, for messages
  std::string store_address;  // for messages
  MemberRecord me;
  Deadline deadline;
  std::chrono::milliseconds timeout{0};  // for messages
};

// Meets the other ranks in `store`, which is already scoped to the communicator (the prefix
// above). Errors: kFailedPrecondition for a clash or a disagreement (same text on every rank
// of the round), kDeadlineExceeded naming the ranks that did not come.
Result<Meeting> Meet(Store& store, const MeetRequest& request);

// A fresh random token (hex).
std::string NewToken();

// The CPU `rank` has to itself, or -1: it is bound to it, no other rank of its host is, and every
// rank of its host is bound to one CPU (an unbound rank may run anywhere). As mpirun
// --bind-to core, chorus launch --bind core and srun --cpu-bind=cores bind ranks.
int OwnCpu(const std::vector<MemberRecord>& members, int rank);

// The cores the job's ranks share, summed over their hosts; the same number on every rank. On a
// host: the distinct CPUs its bound ranks are bound to, or the CPUs its unbound ranks may run on
// (the fewest any of them reports), whichever is more; at least 1. Ranks bound each to a CPU of
// its own (mpirun --bind-to core) have a core each, though each may run on one CPU only.
int JobCores(const std::vector<MemberRecord>& members);

}  // namespace chorus::internal
