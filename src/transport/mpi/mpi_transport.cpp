// MPI transport (see mpi_transport.h).
#include "transport/mpi/mpi_transport.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <thread>
#include <type_traits>
#include <utility>

#include "base/check.h"
#include "base/collectives.h"
#include "base/pages.h"
#include "base/wait.h"
#include "transport/mpi/mpi_notice.h"

namespace chorus::internal {
namespace {

// The data messages' tag on the private duplicate (the notices' is kNoticeTag, mpi_notice.h).
constexpr int kDataTag = 0x6301;

// Every data message starts with this, padded to 64 bytes so payloads stay aligned.
constexpr size_t kHeaderBytes = 64;
// Explicit fields rather than a copy of CallTag, so no padding byte goes out uninitialised.
struct Header {
  uint64_t seq;    // per link, from 0: proves the FIFO assumption on every message
  uint64_t bytes;  // payload
  uint64_t call_index;
  uint64_t count;
  uint8_t kind;
  uint8_t dtype;
  uint8_t op;
  uint8_t algorithm;
  uint32_t root;
  uint64_t layout;

  CallTag tag() const {
    return {call_index,
            count,
            static_cast<CollectiveKind>(kind),
            static_cast<DataType>(dtype),
            static_cast<ReduceOp>(op),
            algorithm,
            root,
            layout};
  }
};
static_assert(sizeof(Header) <= kHeaderBytes && std::is_trivial_v<Header>);

}  // namespace

Status MpiError(const std::string& what, int code) {
  char text[MPI_MAX_ERROR_STRING] = {};
  int length = 0;
  MPI_Error_string(code, text, &length);
  return Unavailable("mpi: " + what + ": " + std::string(text, static_cast<size_t>(length)));
}

Result<std::unique_ptr<MpiTransport>> MpiTransport::Connect(MPI_Comm comm, size_t slot_bytes,
                                                            int depth,
                                                            std::chrono::milliseconds timeout) {
  MPI_Comm dup = MPI_COMM_NULL;
  if (const int rc = MPI_Comm_dup(comm, &dup); rc != MPI_SUCCESS) {
    return MpiError("MPI_Comm_dup", rc);
  }
  // From here on an MPI error is a Status, not the end of the job.
  MPI_Comm_set_errhandler(dup, MPI_ERRORS_RETURN);
  int rank = 0;
  int size = 1;
  MPI_Comm_rank(dup, &rank);
  MPI_Comm_size(dup, &size);
  int ranks_on_host = 1;
  MPI_Comm node = MPI_COMM_NULL;
  if (MPI_Comm_split_type(dup, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node) == MPI_SUCCESS) {
    MPI_Comm_size(node, &ranks_on_host);
    MPI_Comm_free(&node);
  }
  int level = MPI_THREAD_SINGLE;
  MPI_Query_thread(&level);

  // Local setup first, then agree: a rank that cannot allocate must not leave the others
  // waiting in their first collective.
  Bytes control_memory(static_cast<std::byte*>(std::aligned_alloc(64, Control::Bytes(size))));
  std::unique_ptr<MpiTransport> transport;
  if (control_memory) {
    transport.reset(new MpiTransport(std::move(control_memory), dup, rank, size, slot_bytes, depth,
                                     ranks_on_host, level == MPI_THREAD_MULTIPLE, timeout));
  }
  const bool ready =
      transport && (size == 1 || (transport->SetUpLink((rank + 1) % size, true) &&
                                  transport->SetUpLink((rank + size - 1) % size, false)));
  const int64_t mine = ready ? 0 : rank + 1;
  int64_t worst = 0;
  const int rc = MPI_Allreduce(&mine, &worst, 1, MPI_INT64_T, MPI_MAX, dup);
  if (rc == MPI_SUCCESS && worst == 0) return transport;
  if (!transport) MPI_Comm_free(&dup);  // else the transport's destructor frees it
  if (rc != MPI_SUCCESS) return MpiError("CreateMpiCommunicator: MPI_Allreduce", rc);
  if (mine != 0) {
    return Unavailable("CreateMpiCommunicator: rank " + std::to_string(rank) +
                       " cannot allocate its staging (" + std::to_string(depth) + " x " +
                       std::to_string(slot_bytes) + " bytes per link and direction)");
  }
  return Unavailable("CreateMpiCommunicator: rank " + std::to_string(worst - 1) +
                     " cannot allocate its staging (see its error)");
}

MpiTransport::MpiTransport(Bytes control_memory, MPI_Comm comm, int rank, int size,
                           size_t slot_bytes, int depth, int ranks_on_host, bool thread_multiple,
                           std::chrono::milliseconds timeout)
    : ControlledTransport(*Control::Create(control_memory.get(), size), rank),
      control_memory_(std::move(control_memory)),
      comm_(comm),
      slot_bytes_(slot_bytes),
      stride_(RoundUp(kHeaderBytes + slot_bytes, 64)),
      depth_(depth),
      ranks_on_host_(ranks_on_host),
      thread_multiple_(thread_multiple),
      timeout_(timeout),
      driver_(std::this_thread::get_id()),
      send_(static_cast<size_t>(size)),
      recv_(static_cast<size_t>(size)),
      incoming_(std::make_unique<Notice>()),
      notices_sent_(static_cast<size_t>(size)),
      notices_received_(static_cast<size_t>(size)),
      answers_(static_cast<size_t>(size)),
      answered_(static_cast<size_t>(size)),
      replies_(static_cast<size_t>(size)) {
  if (const int rc = MPI_Irecv(incoming_.get(), sizeof(Notice), MPI_BYTE, MPI_ANY_SOURCE,
                               kNoticeTag, comm_, &incoming_request_);
      rc != MPI_SUCCESS) {
    RecordFailure(MpiError("MPI_Irecv of group notices", rc));
  }
}

// Teardown is collective, like MPI_Comm_free: the ranks swap how many messages each sent to
// each, take every one still on its way, and only then free the communicator. A message left in
// flight would be delivered to the next communicator that MPI gives the same context id (Open
// MPI reuses them), and pass there for that communicator's traffic.
MpiTransport::~MpiTransport() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;  // nothing may call MPI now; MPI no longer touches our buffers either
  driver_.store(std::this_thread::get_id(), std::memory_order_relaxed);
  PollControl();  // sends a failure that is still unsent
  if (Quiesce(DeadlineAfter(timeout_))) {
    MPI_Comm_free(&comm_);
  } else {
    Abandon();
  }
}

bool MpiTransport::Progress(MPI_Request* request, Deadline give_up) {
  while (*request != MPI_REQUEST_NULL) {
    int done = 0;
    if (MPI_Test(request, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) return false;
    if (done != 0) return true;
    if (Clock::now() >= give_up) return false;
    YieldCpu();
  }
  return true;
}

bool MpiTransport::Quiesce(Deadline give_up) {
  const auto p = static_cast<size_t>(size());
  std::vector<uint64_t> sent(2 * p, 0);
  std::vector<uint64_t> due(2 * p, 0);
  {
    std::lock_guard lock(control_mutex_);
    closing_ = true;  // no notice may leave after its count did
    for (size_t q = 0; q < p; ++q) {
      sent[2 * q] = send_[q] ? send_[q]->next : 0;
      sent[2 * q + 1] = notices_sent_[q];
    }
  }
  MPI_Request exchange = MPI_REQUEST_NULL;
  if (MPI_Ialltoall(sent.data(), 2, MPI_UINT64_T, due.data(), 2, MPI_UINT64_T, comm_, &exchange) !=
      MPI_SUCCESS) {
    return false;
  }
  // A rank that never tears down leaves this unfinished; MPI forbids freeing the request of a
  // collective, so it is left with the communicator.
  if (!Progress(&exchange, give_up)) return false;

  for (size_t q = 0; q < p; ++q) {
    if (q != static_cast<size_t>(rank_) && !DrainLink(static_cast<int>(q), due[2 * q], give_up)) {
      return false;
    }
  }
  for (bool all = false; !all;) {
    std::lock_guard lock(control_mutex_);
    PollControlLocked();
    all = true;
    for (size_t q = 0; q < p; ++q) all = all && notices_received_[q] >= due[2 * q + 1];
    if (!all && Clock::now() >= give_up) return false;
    if (!all) YieldCpu();
  }
  // Our own messages: the peers' drains take them.
  for (auto& link : send_) {
    if (!link) continue;
    for (MPI_Request& request : link->requests) {
      if (!Progress(&request, give_up)) return false;
    }
  }
  for (Outgoing& notice : outgoing_) {
    for (MPI_Request& request : notice.requests) {
      if (!Progress(&request, give_up)) return false;
    }
  }
  // Nothing is left to match the receives still posted.
  for (auto& link : recv_) {
    if (!link) continue;
    for (MPI_Request& request : link->requests) {
      if (request != MPI_REQUEST_NULL) MPI_Cancel(&request);
      if (!Progress(&request, give_up)) return false;
    }
  }
  if (incoming_request_ != MPI_REQUEST_NULL) MPI_Cancel(&incoming_request_);
  return Progress(&incoming_request_, give_up);
}

bool MpiTransport::DrainLink(int peer, uint64_t due, Deadline give_up) {
  if (due == 0) return true;
  if (!SetUpLink(peer, /*send=*/false)) return false;
  Link& link = *recv_[static_cast<size_t>(peer)];
  const auto depth = static_cast<uint64_t>(depth_);
  for (uint64_t i = link.next; i < due; ++i) {
    const bool taken = i == link.next && link.head_ready;
    if (!taken && !Progress(&link.requests[i % depth], give_up)) return false;
    if (i + depth < due) PostRecv(peer, link, i + depth);
  }
  link.next = std::max(link.next, due);
  link.head_ready = false;
  return true;
}

// Teardown did not finish: requests are freed, the buffers MPI may still use are leaked, and the
// communicator is kept, so that its context id is not handed to another one.
void MpiTransport::Abandon() {
  auto release = [](MPI_Request& request, bool receive) {
    if (request == MPI_REQUEST_NULL) return true;
    if (receive) MPI_Cancel(&request);
    MPI_Request_free(&request);
    return false;
  };
  for (auto* links : {&send_, &recv_}) {
    for (auto& link : *links) {
      if (!link) continue;
      bool idle = true;
      for (MPI_Request& request : link->requests) idle = release(request, links == &recv_) && idle;
      if (!idle) (void)link->slots.release();
    }
  }
  for (Outgoing& notice : outgoing_) {
    bool idle = true;
    for (MPI_Request& request : notice.requests) idle = release(request, false) && idle;
    if (!idle) (void)notice.notice.release();
  }
  if (!release(incoming_request_, true)) (void)incoming_.release();
}

MpiTransport::Bytes MpiTransport::AllocateSlots() const {
  const size_t bytes = RoundUp(stride_ * static_cast<size_t>(depth_), kPage);
  Bytes slots(static_cast<std::byte*>(std::aligned_alloc(kPage, bytes)));
  // Touched now, so the first collective does not pay the page faults.
  if (slots) std::memset(slots.get(), 0, bytes);
  return slots;
}

std::byte* MpiTransport::SlotAt(Link& link, uint64_t index) const {
  return link.slots.get() + (index % static_cast<uint64_t>(depth_)) * stride_;
}

bool MpiTransport::SetUpLink(int peer, bool send) {
  std::unique_ptr<Link>& cell = (send ? send_ : recv_)[static_cast<size_t>(peer)];
  if (cell) return true;
  auto link = std::make_unique<Link>();
  link->slots = AllocateSlots();
  if (!link->slots) return false;
  link->requests.assign(static_cast<size_t>(depth_), MPI_REQUEST_NULL);
  if (!send) {
    for (int i = 0; i < depth_; ++i) PostRecv(peer, *link, static_cast<uint64_t>(i));
  }
  cell = std::move(link);
  return true;
}

MpiTransport::Link* MpiTransport::SendLink(int peer) {
  Link* link = send_[static_cast<size_t>(peer)].get();
  if (link != nullptr) return link;
  if (!SetUpLink(peer, /*send=*/true)) {
    Fail(Unavailable("mpi: rank " + std::to_string(rank_) + " cannot allocate staging for rank " +
                     std::to_string(peer)));
    return nullptr;
  }
  return send_[static_cast<size_t>(peer)].get();
}

MpiTransport::Link* MpiTransport::RecvLink(int peer) {
  Link* link = recv_[static_cast<size_t>(peer)].get();
  if (link != nullptr) return link;
  if (!SetUpLink(peer, /*send=*/false)) {
    Fail(Unavailable("mpi: rank " + std::to_string(rank_) +
                     " cannot allocate receive slots for rank " + std::to_string(peer)));
    return nullptr;
  }
  return recv_[static_cast<size_t>(peer)].get();
}

void MpiTransport::PostRecv(int peer, Link& link, uint64_t index) {
  MPI_Request& request = link.requests[index % static_cast<uint64_t>(depth_)];
  const int rc = MPI_Irecv(SlotAt(link, index), static_cast<int>(kHeaderBytes + slot_bytes_),
                           MPI_BYTE, peer, kDataTag, comm_, &request);
  if (rc != MPI_SUCCESS) FailMpi("MPI_Irecv from rank " + std::to_string(peer), rc);
}

bool MpiTransport::Linked(int peer) {
  if (recv_[static_cast<size_t>(peer)] != nullptr) return true;
  int waiting = 0;
  if (const int rc = MPI_Iprobe(peer, kDataTag, comm_, &waiting, MPI_STATUS_IGNORE);
      rc != MPI_SUCCESS) {
    FailMpi("MPI_Iprobe from rank " + std::to_string(peer), rc);
    return false;
  }
  return waiting != 0;
}

bool MpiTransport::TryCredit(int peer) { return TryReserve(peer) != nullptr; }

void* MpiTransport::TryReserve(int peer) {
  Link* link = SendLink(peer);
  if (link == nullptr) return nullptr;
  MPI_Request& request = link->requests[link->next % static_cast<uint64_t>(depth_)];
  if (request != MPI_REQUEST_NULL) {
    int done = 0;
    if (const int rc = MPI_Test(&request, &done, MPI_STATUS_IGNORE); rc != MPI_SUCCESS) {
      FailMpi("a send to rank " + std::to_string(peer), rc);
      return nullptr;
    }
    if (!done) {
      PollControl();
      return nullptr;
    }
  }
  return SlotAt(*link, link->next) + kHeaderBytes;
}

void MpiTransport::Post(int peer, const Message& m) {
  Link* link = send_[static_cast<size_t>(peer)].get();
  CHORUS_CHECK(link != nullptr);  // callers reserve first
  std::byte* slot = SlotAt(*link, link->next);
  CHORUS_CHECK(m.data == slot + kHeaderBytes);
  CHORUS_CHECK_LE(m.bytes, slot_bytes_);
  const Header header{link->next,
                      m.bytes,
                      m.tag.call_index,
                      m.tag.count,
                      static_cast<uint8_t>(m.tag.kind),
                      static_cast<uint8_t>(m.tag.dtype),
                      static_cast<uint8_t>(m.tag.op),
                      m.tag.algorithm,
                      m.tag.root,
                      m.tag.layout};
  std::memcpy(slot, &header, sizeof(header));
  MPI_Request& request = link->requests[link->next % static_cast<uint64_t>(depth_)];
  ++link->next;
  const int rc = MPI_Isend(slot, static_cast<int>(kHeaderBytes + m.bytes), MPI_BYTE, peer, kDataTag,
                           comm_, &request);
  if (rc != MPI_SUCCESS) FailMpi("MPI_Isend to rank " + std::to_string(peer), rc);
}

bool MpiTransport::TryPeek(int peer, Message* m, const CallTag* /*expect*/) {
  Link* link = RecvLink(peer);
  if (link == nullptr) return false;
  if (!link->head_ready) {
    MPI_Request& request = link->requests[link->next % static_cast<uint64_t>(depth_)];
    int done = 0;
    MPI_Status status;
    if (const int rc = MPI_Test(&request, &done, &status); rc != MPI_SUCCESS) {
      FailMpi("a receive from rank " + std::to_string(peer), rc);
      return false;
    }
    if (!done) {
      PollControl();
      return false;
    }
    int count = 0;
    MPI_Get_count(&status, MPI_BYTE, &count);
    const std::byte* slot = SlotAt(*link, link->next);
    Header header;
    std::memcpy(&header, slot, sizeof(header));
    // A kind, type or op past the tables would index them out of range when the tag is
    // compared or described: a malformed message like a wrong length.
    if (count < static_cast<int>(kHeaderBytes) || header.seq != link->next ||
        header.bytes != static_cast<uint64_t>(count) - kHeaderBytes || !IsCollective(header.kind) ||
        header.dtype >= kNumDataTypes || header.op >= kNumReduceOps) {
      Fail(Internal("mpi: rank " + std::to_string(rank_) + " got a malformed message from rank " +
                    std::to_string(peer) + " (" + std::to_string(count) + " bytes, sequence " +
                    std::to_string(header.seq) + " where " + std::to_string(link->next) +
                    " was due)"));
      return false;
    }
    link->head = Message{slot + kHeaderBytes, header.bytes, header.tag()};
    link->head_ready = true;
  }
  *m = link->head;
  return true;
}

void MpiTransport::Release(int peer) {
  Link* link = recv_[static_cast<size_t>(peer)].get();
  CHORUS_CHECK(link != nullptr && link->head_ready);
  link->head_ready = false;
  // The slot of message `next` now receives message next + depth; MPI matches receives of one
  // source in the order they were posted, so the FIFO holds.
  PostRecv(peer, *link, link->next);
  ++link->next;
}

bool MpiTransport::Drained(int peer) {
  Link* link = send_[static_cast<size_t>(peer)].get();
  if (link == nullptr) return true;
  for (MPI_Request& request : link->requests) {
    if (request == MPI_REQUEST_NULL) continue;
    int done = 0;
    if (const int rc = MPI_Test(&request, &done, MPI_STATUS_IGNORE); rc != MPI_SUCCESS) {
      FailMpi("a send to rank " + std::to_string(peer), rc);
      return false;
    }
    if (!done) {
      PollControl();
      return false;
    }
  }
  return true;
}

}  // namespace chorus::internal
