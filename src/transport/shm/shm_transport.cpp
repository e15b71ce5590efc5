// Shared-memory transport (see shm_transport.h).
#include "transport/shm/shm_transport.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <thread>

#include "core/check.h"

namespace chorus::internal {
namespace {

constexpr uint64_t kMagic = 0x6368'6f72'7573'0001;  // "chorus", layout version 1
constexpr size_t kPage = 4096;

size_t RoundUp(size_t n, size_t to) { return (n + to - 1) / to * to; }

std::string Errno(const char* what) { return std::string(what) + ": " + std::strerror(errno); }

// Written by rank 0 before the name is published; checked by every rank that attaches.
struct Prelude {
  alignas(64) uint64_t magic;
  int32_t size;
  int32_t depth;
  uint64_t slot_bytes;
  uint64_t total_bytes;
  std::atomic<int32_t> attached;
};

struct Layout {
  size_t control, mailboxes, staging, total;

  Layout(int p, int depth, size_t slot_bytes) {
    const auto pairs = static_cast<size_t>(p) * static_cast<size_t>(p);
    control = RoundUp(sizeof(Prelude), 64);
    mailboxes = control + RoundUp(Control::Bytes(p), 64);
    staging = RoundUp(mailboxes + pairs * sizeof(Mailbox), kPage);
    total = staging + pairs * static_cast<size_t>(depth) * RoundUp(slot_bytes, 64);
  }
};

}  // namespace

// A mapped POSIX shared-memory object; unmapped on destruction. The name is unlinked
// explicitly, as soon as every rank has it mapped.
class ShmSegment {
 public:
  static Result<std::unique_ptr<ShmSegment>> Create(const std::string& name, size_t bytes) {
    const int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
    if (fd < 0) return Unavailable(Errno(("Create: cannot create shared memory " + name).c_str()));
    if (ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
      const Status err = Unavailable(Errno(("Create: cannot size shared memory " + name).c_str()));
      close(fd);
      shm_unlink(name.c_str());
      return err;
    }
    return Map(fd, name, bytes, /*owner=*/true);
  }

  static Result<std::unique_ptr<ShmSegment>> Open(const std::string& name) {
    const int fd = shm_open(name.c_str(), O_RDWR, 0);
    if (fd < 0) return Unavailable(Errno(("Create: cannot open shared memory " + name).c_str()));
    struct stat st {};
    if (fstat(fd, &st) != 0 || st.st_size < static_cast<off_t>(sizeof(Prelude))) {
      close(fd);
      return Unavailable("Create: shared memory " + name + " is not a chorus segment (too small)");
    }
    return Map(fd, name, static_cast<size_t>(st.st_size), /*owner=*/false);
  }

  ~ShmSegment() {
    if (owner_unlinks_) Unlink();
    munmap(data_, bytes_);
  }
  ShmSegment(const ShmSegment&) = delete;
  ShmSegment& operator=(const ShmSegment&) = delete;

  std::byte* data() const { return static_cast<std::byte*>(data_); }
  size_t bytes() const { return bytes_; }
  const std::string& name() const { return name_; }
  // Idempotent; ENOENT (someone else unlinked it) is fine.
  void Unlink() {
    shm_unlink(name_.c_str());
    owner_unlinks_ = false;
  }
  // Once every rank has attached, the name is gone and there is nothing left to clean up.
  void Unlinked() { owner_unlinks_ = false; }

 private:
  ShmSegment(void* data, size_t bytes, std::string name, bool owner)
      : data_(data), bytes_(bytes), name_(std::move(name)), owner_unlinks_(owner) {}

  static Result<std::unique_ptr<ShmSegment>> Map(int fd, const std::string& name, size_t bytes,
                                                 bool owner) {
    void* data = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    const int saved = errno;
    close(fd);
    if (data == MAP_FAILED) {
      errno = saved;
      if (owner) shm_unlink(name.c_str());
      return Unavailable(Errno(("Create: cannot map shared memory " + name).c_str()));
    }
    return std::unique_ptr<ShmSegment>(new ShmSegment(data, bytes, name, owner));
  }

  void* data_;
  size_t bytes_;
  std::string name_;
  bool owner_unlinks_;  // rank 0 unlinks if setup fails before everyone attached
};

namespace {

// "/chorus-<uid>-<pid of rank 0>-<random>": the pid lets a test (or an operator) tell whose a
// leftover would be.
std::string RandomName() {
  uint64_t bits = 0;
  std::ifstream("/dev/urandom", std::ios::binary)
      .read(reinterpret_cast<char*>(&bits), sizeof(bits));
  bits ^= static_cast<uint64_t>(Clock::now().time_since_epoch().count());
  char name[64];
  std::snprintf(name, sizeof(name), "/chorus-%d-%d-%016llx", static_cast<int>(getuid()),
                static_cast<int>(getpid()), static_cast<unsigned long long>(bits));
  return name;
}

// Touches `bytes` at `p` so the first collective does not pay the page faults.
void Prefault(std::byte* p, size_t bytes, bool write) {
  for (size_t i = 0; i < bytes; i += kPage) {
    if (write) {
      p[i] = std::byte{0};
    } else {
      [[maybe_unused]] volatile std::byte sink = p[i];
    }
  }
}

}  // namespace

Result<std::unique_ptr<Transport>> ConnectShm(Store& store, const ConnectConfig& config) {
  const Layout layout(config.size, config.depth, config.slot_bytes);
  std::unique_ptr<ShmSegment> segment;
  if (config.rank == 0) {
    auto created = ShmSegment::Create(RandomName(), layout.total);
    if (!created.ok()) return created.status();
    segment = std::move(created).value();
    new (segment->data())
        Prelude{kMagic, config.size, config.depth, config.slot_bytes, layout.total, {0}};
    Control::Create(segment->data() + layout.control, config.size);
    for (size_t i = 0; i < static_cast<size_t>(config.size) * config.size; ++i) {
      new (segment->data() + layout.mailboxes + i * sizeof(Mailbox)) Mailbox();
    }
    CHORUS_RETURN_IF_ERROR(store.Set("shm/name", segment->name()));
  } else {
    auto name = store.Get("shm/name", Remaining(config.deadline));
    if (!name.ok()) return name.status();
    auto opened = ShmSegment::Open(*name);
    if (!opened.ok()) return opened.status();
    segment = std::move(opened).value();
    const auto* prelude = reinterpret_cast<const Prelude*>(segment->data());
    if (segment->bytes() != layout.total || prelude->magic != kMagic ||
        prelude->size != config.size || prelude->depth != config.depth ||
        prelude->slot_bytes != config.slot_bytes) {
      return FailedPrecondition("Create: shm segment " + *name +
                                " does not match this rank's options (size, segment_bytes and "
                                "pipeline_depth must agree on every rank)");
    }
  }
  std::byte* base = segment->data();
  auto* prelude = reinterpret_cast<Prelude*>(base);
  Control* control = Control::At(base + layout.control);
  const int me = config.rank;
  const int next = (me + 1) % config.size;
  const size_t link_bytes = static_cast<size_t>(config.depth) * RoundUp(config.slot_bytes, 64);
  auto link_at = [&](int src, int dst) {
    return base + layout.staging +
           (static_cast<size_t>(src) * static_cast<size_t>(config.size) +
            static_cast<size_t>(dst)) *
               link_bytes;
  };
  if (config.size > 1) Prefault(link_at(me, next), link_bytes, /*write=*/true);

  control->SetPid(me, getpid());
  if (prelude->attached.fetch_add(1, std::memory_order_acq_rel) + 1 == config.size) {
    segment->Unlink();  // everyone has it mapped: nothing can leak from here on
  }
  // Wait for the others to attach; their pids are then all published.
  while (prelude->attached.load(std::memory_order_acquire) < config.size) {
    if (Clock::now() >= config.deadline) {
      std::string missing;
      for (int r = 0; r < config.size; ++r) {
        if (control->pid(r) == 0) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
      }
      segment->Unlink();
      return DeadlineExceeded("Create: timed out waiting for rank(s) " + missing +
                              " to attach shared memory " + segment->name());
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  segment->Unlinked();
  if (config.size > 1) {
    const int prev = (me + config.size - 1) % config.size;
    Prefault(link_at(prev, me), link_bytes, /*write=*/false);
  }

  std::vector<int> pidfds(static_cast<size_t>(config.size), -1);
  for (int r = 0; r < config.size; ++r) {
    if (r == me) continue;
    const int fd = static_cast<int>(syscall(SYS_pidfd_open, control->pid(r), 0));
    if (fd < 0) {
      for (int open_fd : pidfds) {
        if (open_fd >= 0) close(open_fd);
      }
      const Status dead = Unavailable("Create: rank " + std::to_string(r) + " (pid " +
                                      std::to_string(control->pid(r)) + ") exited during setup");
      control->Fail(dead);
      return dead;
    }
    pidfds[static_cast<size_t>(r)] = fd;
  }
  return std::unique_ptr<Transport>(
      new ShmTransport(std::move(segment), config, std::move(pidfds)));
}

ShmTransport::ShmTransport(std::unique_ptr<ShmSegment> segment, const ConnectConfig& config,
                           std::vector<int> peer_pidfds)
    : ControlledTransport(
          *Control::At(segment->data() +
                       Layout(config.size, config.depth, config.slot_bytes).control),
          config.rank),
      segment_(std::move(segment)),
      base_(segment_->data()),
      boxes_(reinterpret_cast<Mailbox*>(
          base_ + Layout(config.size, config.depth, config.slot_bytes).mailboxes)),
      staging_(base_ + Layout(config.size, config.depth, config.slot_bytes).staging),
      size_(config.size),
      slot_bytes_(config.slot_bytes),
      depth_(config.depth),
      segment_bytes_(segment_->bytes()),
      pidfds_(std::move(peer_pidfds)),
      next_check_(static_cast<size_t>(config.size)) {}

ShmTransport::~ShmTransport() {
  for (int fd : pidfds_) {
    if (fd >= 0) close(fd);
  }
}

Mailbox& ShmTransport::box(int src, int dst) {
  return boxes_[static_cast<size_t>(src) * static_cast<size_t>(size_) + static_cast<size_t>(dst)];
}

std::byte* ShmTransport::slot(int src, int dst, uint64_t index) {
  const size_t slot_stride = RoundUp(slot_bytes_, 64);
  const size_t link =
      static_cast<size_t>(src) * static_cast<size_t>(size_) + static_cast<size_t>(dst);
  return staging_ + (link * static_cast<size_t>(depth_) +
                     static_cast<size_t>(index % static_cast<uint64_t>(depth_))) *
                        slot_stride;
}

bool ShmTransport::TryCredit(int peer) { return box(rank_, peer).HasCredit(depth_); }

void* ShmTransport::TryReserve(int peer) {
  Mailbox& b = box(rank_, peer);
  if (!b.HasCredit(depth_)) return nullptr;
  return slot(rank_, peer, b.next());
}

void ShmTransport::Post(int peer, const Message& m) {
  // Not zero-copy: every message must sit in this rank's own staging. Usually that is the slot
  // reserved for `peer`; a slot filled once for several peers (a broadcast, each post after
  // TryCredit(peer)) sits in the staging of whichever peer it was reserved for. Receivers only
  // ever read this rank's staging, so any slot in its row is safe to hand out.
  const size_t row =
      static_cast<size_t>(size_) * static_cast<size_t>(depth_) * RoundUp(slot_bytes_, 64);
  CHORUS_CHECK(static_cast<const std::byte*>(m.data) >= slot(rank_, 0, 0) &&
               static_cast<const std::byte*>(m.data) + m.bytes <= slot(rank_, 0, 0) + row);
  const auto offset = static_cast<uint64_t>(static_cast<const std::byte*>(m.data) - base_);
  box(rank_, peer).Post({offset, m.bytes, m.tag}, depth_);
  control_.bell(peer).Ring();
}

bool ShmTransport::TryPeek(int peer, Message* m) {
  WireMessage w;
  if (!box(peer, rank_).Peek(&w, depth_)) return false;
  if (w.where > segment_bytes_ || w.bytes > segment_bytes_ - w.where) {
    Fail(Internal("shm: rank " + std::to_string(peer) + " posted a message outside the segment"));
    return false;
  }
  *m = Message{base_ + w.where, w.bytes, w.tag};
  return true;
}

void ShmTransport::Release(int peer) {
  box(peer, rank_).Release();
  control_.bell(peer).Ring();
}

bool ShmTransport::Drained(int peer) { return box(rank_, peer).Drained(); }

bool ShmTransport::PeerAlive(int peer) {
  const int fd = pidfds_[static_cast<size_t>(peer)];
  if (fd < 0) return true;
  Clock::time_point& next = next_check_[static_cast<size_t>(peer)];
  if (next == Clock::time_point::max()) return false;  // known dead
  const Clock::time_point now = Clock::now();
  if (now < next) return true;
  pollfd p{fd, POLLIN, 0};
  const bool exited = poll(&p, 1, 0) > 0;  // a pidfd turns readable when its process exits
  next = exited ? Clock::time_point::max() : now + std::chrono::milliseconds(2);
  return !exited;
}

std::string ShmTransport::DescribeDeath(int peer) const {
  return "rank " + std::to_string(peer) + " (pid " + std::to_string(control_.pid(peer)) +
         ") exited";
}

}  // namespace chorus::internal
