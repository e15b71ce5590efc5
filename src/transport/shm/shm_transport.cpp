// Shared-memory transport (see shm_transport.h).
#include "transport/shm/shm_transport.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <thread>

#include "base/check.h"
#include "base/errno_text.h"
#include "base/pages.h"

namespace chorus::internal {
namespace {

constexpr uint64_t kSegmentMagic = 0x6368'6f72'7573'0003;  // "chorus", layout version 3

// Written by rank 0 before the name is published; checked by every rank that attaches.
struct Prelude {
  alignas(64) uint64_t magic;
  int32_t size;
  int32_t depth;
  uint64_t slot_bytes;
  uint64_t total_bytes;
  std::atomic<int32_t> attached;
};

struct SegmentLayout {
  size_t control, mailboxes, staging, total;

  SegmentLayout(int p, int depth, size_t slot_bytes) {
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
  // Creates the segment `name` ("/chorus-..."): with shm_open in /dev/shm when `dir` is empty,
  // else as the file dir + name. First checks that `bytes` fit in that filesystem.
  static Result<std::unique_ptr<ShmSegment>> Create(const std::string& dir, const std::string& name,
                                                    size_t bytes, const std::string& sizing) {
    const std::string where = dir.empty() ? "/dev/shm" : dir;
    struct statvfs fs {};
    if (statvfs(where.c_str(), &fs) != 0) {
      return Unavailable(Errno(("Create: cannot use " + where + " for shared memory").c_str()));
    }
    auto no_room = [&](uint64_t free_bytes) {
      const uint64_t total_bytes = static_cast<uint64_t>(fs.f_blocks) * fs.f_frsize;
      return Unavailable(
          "Create: the shared memory for this communicator needs " + Mib(bytes) + " (" + sizing +
          ") but " + where + " has " + Mib(free_bytes) + " free of " + Mib(total_bytes) +
          ". Give " + where + " more room (docker run --shm-size=1g; mount -o remount,size=1G " +
          where +
          "), lower CommOptions::pipeline_depth or segment_bytes, or put the segment on "
          "another tmpfs with CommOptions::shm_dir (CHORUS_SHM_DIR)");
    };
    const uint64_t free_bytes = static_cast<uint64_t>(fs.f_bavail) * fs.f_frsize;
    if (bytes > free_bytes) return no_room(free_bytes);
    const std::string path = dir.empty() ? name : dir + name;
    const int fd = dir.empty() ? shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600)
                               : open(path.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
    if (fd < 0) return Unavailable(Errno(("Create: cannot create shared memory " + path).c_str()));
    if (ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
      const Status err = Unavailable(Errno(("Create: cannot size shared memory " + path).c_str()));
      close(fd);
      Remove(path, dir.empty());
      return err;
    }
    // Reserve the pages now: on a tmpfs that fills up later (another job, a check that raced)
    // touching a page of a sparse segment would be a SIGBUS instead of this error.
    if (const int err = posix_fallocate(fd, 0, static_cast<off_t>(bytes)); err == ENOSPC) {
      close(fd);
      Remove(path, dir.empty());
      if (statvfs(where.c_str(), &fs) != 0) fs.f_bavail = 0;
      return no_room(static_cast<uint64_t>(fs.f_bavail) * fs.f_frsize);
    }
    return Map(fd, path, dir.empty(), bytes, /*owner=*/true);
  }

  // Opens what rank 0 created: `path` is a /dev/shm name ("/chorus-...") or a file's path.
  static Result<std::unique_ptr<ShmSegment>> Open(const std::string& path, bool in_dev_shm) {
    const int fd =
        in_dev_shm ? shm_open(path.c_str(), O_RDWR, 0) : open(path.c_str(), O_RDWR | O_CLOEXEC);
    if (fd < 0) return Unavailable(Errno(("Create: cannot open shared memory " + path).c_str()));
    struct stat st {};
    if (fstat(fd, &st) != 0 || st.st_size < static_cast<off_t>(sizeof(Prelude))) {
      close(fd);
      return Unavailable("Create: shared memory " + path + " is not a chorus segment (too small)");
    }
    return Map(fd, path, in_dev_shm, static_cast<size_t>(st.st_size), /*owner=*/false);
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
  bool in_dev_shm() const { return in_dev_shm_; }
  // Idempotent; ENOENT (someone else unlinked it) is fine.
  void Unlink() {
    Remove(name_, in_dev_shm_);
    owner_unlinks_ = false;
  }
  // Once every rank has attached, the name is gone and there is nothing left to clean up.
  void Unlinked() { owner_unlinks_ = false; }

 private:
  ShmSegment(void* data, size_t bytes, std::string name, bool in_dev_shm, bool owner)
      : data_(data),
        bytes_(bytes),
        name_(std::move(name)),
        in_dev_shm_(in_dev_shm),
        owner_unlinks_(owner) {}

  static std::string Mib(uint64_t bytes) {
    char text[32];
    std::snprintf(text, sizeof(text), "%.1f MiB", static_cast<double>(bytes) / (1 << 20));
    return text;
  }

  static void Remove(const std::string& path, bool in_dev_shm) {
    if (in_dev_shm) {
      shm_unlink(path.c_str());
    } else {
      unlink(path.c_str());
    }
  }

  static Result<std::unique_ptr<ShmSegment>> Map(int fd, const std::string& path, bool in_dev_shm,
                                                 size_t bytes, bool owner) {
    void* data = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    const int saved = errno;
    close(fd);
    if (data == MAP_FAILED) {
      errno = saved;
      if (owner) Remove(path, in_dev_shm);
      return Unavailable(Errno(("Create: cannot map shared memory " + path).c_str()));
    }
    return std::unique_ptr<ShmSegment>(new ShmSegment(data, bytes, path, in_dev_shm, owner));
  }

  void* data_;
  size_t bytes_;
  std::string name_;
  bool in_dev_shm_;
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

// Maps the pages of `bytes` at `p` into this process so the first collective does not pay the
// page faults. One madvise(MADV_POPULATE_*) call (Linux 5.14) maps them all, about ten times
// faster than touching one byte per page, each touch a fault (8 MiB: 5 ms against 48 here); a
// kernel without it (EINVAL) gets the touches. The range widens to whole pages, all inside the
// segment's mapping (madvise changes no byte).
void Prefault(std::byte* p, size_t bytes, bool write) {
  if (bytes == 0) return;
#if defined(MADV_POPULATE_WRITE) && defined(MADV_POPULATE_READ)
  const auto first = reinterpret_cast<uintptr_t>(p) & ~uintptr_t{kPage - 1};
  const uintptr_t end =
      (reinterpret_cast<uintptr_t>(p) + bytes + kPage - 1) & ~uintptr_t{kPage - 1};
  if (madvise(reinterpret_cast<void*>(first), end - first,
              write ? MADV_POPULATE_WRITE : MADV_POPULATE_READ) == 0) {
    return;
  }
#endif
  for (size_t i = 0; i < bytes; i += kPage) {
    if (write) {
      p[i] = std::byte{0};  // only this rank writes its own link, and not yet
    } else {
      [[maybe_unused]] volatile std::byte sink = p[i];
    }
  }
}

}  // namespace

Result<std::unique_ptr<Transport>> ConnectShm(Store& store, const ConnectConfig& config,
                                              const std::string& shm_dir) {
  const SegmentLayout layout(config.size, config.depth, config.slot_bytes);
  std::unique_ptr<ShmSegment> segment;
  if (config.rank == 0) {
    const std::string sizing = std::to_string(config.size) + " x " + std::to_string(config.size) +
                               " pairs of ranks x pipeline_depth " + std::to_string(config.depth) +
                               " x segment_bytes " + std::to_string(config.slot_bytes);
    auto created = ShmSegment::Create(shm_dir, RandomName(), layout.total, sizing);
    if (!created.ok()) {
      // The others wait for the segment's name: tell them why there is none.
      store.Set("shm/name", "error:" + created.status().message()).IgnoreError();
      return created.status();
    }
    segment = std::move(created).value();
    new (segment->data())
        Prelude{kSegmentMagic, config.size, config.depth, config.slot_bytes, layout.total, {0}};
    Control::Create(segment->data() + layout.control, config.size);
    for (size_t i = 0; i < static_cast<size_t>(config.size) * config.size; ++i) {
      new (segment->data() + layout.mailboxes + i * sizeof(Mailbox)) Mailbox();
    }
    CHORUS_RETURN_IF_ERROR(
        store.Set("shm/name", (segment->in_dev_shm() ? "shm:" : "file:") + segment->name()));
  } else {
    auto published = store.Get("shm/name", Remaining(config.deadline));
    if (!published.ok()) return published.status();
    if (published->rfind("error:", 0) == 0) {
      return Unavailable("Create: rank 0 could not make the shared memory: " +
                         published->substr(6));
    }
    const bool in_dev_shm = published->rfind("shm:", 0) == 0;
    const std::string name = published->substr(published->find(':') + 1);
    auto opened = ShmSegment::Open(name, in_dev_shm);
    if (!opened.ok()) return opened.status();
    segment = std::move(opened).value();
    const auto* prelude = reinterpret_cast<const Prelude*>(segment->data());
    if (segment->bytes() != layout.total || prelude->magic != kSegmentMagic ||
        prelude->size != config.size || prelude->depth != config.depth ||
        prelude->slot_bytes != config.slot_bytes) {
      return FailedPrecondition("Create: shm segment " + name +
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
                       SegmentLayout(config.size, config.depth, config.slot_bytes).control),
          config.rank),
      segment_(std::move(segment)),
      base_(segment_->data()),
      boxes_(reinterpret_cast<Mailbox*>(
          base_ + SegmentLayout(config.size, config.depth, config.slot_bytes).mailboxes)),
      staging_(base_ + SegmentLayout(config.size, config.depth, config.slot_bytes).staging),
      size_(config.size),
      slot_bytes_(config.slot_bytes),
      depth_(config.depth),
      segment_bytes_(segment_->bytes()),
      pidfds_(std::move(peer_pidfds)),
      next_check_(static_cast<size_t>(config.size)) {}

ShmTransport::~ShmTransport() {
  // Peers still waiting on this rank learn that it left on purpose (and are woken to see it):
  // what it posted stays readable, and nothing more will come.
  control_.Depart(rank_);
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
  if (m.bytes <= Mailbox::kInlineBytes) {  // inside the entry, from wherever it is
    box(rank_, peer).PostInline(m.data, m.bytes, m.tag, box(peer, rank_).released(), depth_);
    control_.bell(peer).Ring();
    return;
  }
  // Not zero-copy: every message must sit in this rank's own staging. Usually that is the slot
  // reserved for `peer`; a slot filled once for several peers (a broadcast, each post after
  // TryCredit(peer)) sits in the staging of whichever peer it was reserved for. Receivers only
  // ever read this rank's staging, so any slot in its row is safe to hand out.
  const size_t row =
      static_cast<size_t>(size_) * static_cast<size_t>(depth_) * RoundUp(slot_bytes_, 64);
  CHORUS_CHECK(static_cast<const std::byte*>(m.data) >= slot(rank_, 0, 0) &&
               static_cast<const std::byte*>(m.data) + m.bytes <= slot(rank_, 0, 0) + row);
  const auto offset = static_cast<uint64_t>(static_cast<const std::byte*>(m.data) - base_);
  box(rank_, peer).Post({offset, m.bytes, m.tag}, box(peer, rank_).released(), depth_);
  control_.bell(peer).Ring();
}

bool ShmTransport::TryPeek(int peer, Message* m, const CallTag* expect) {
  WireMessage w;
  uint64_t ack = 0;
  const void* in_entry = nullptr;
  if (!box(peer, rank_).Peek(&w, &ack, depth_, &in_entry, expect)) return false;
  box(rank_, peer).Acked(ack);
  if (in_entry != nullptr) {  // the entry lies in this rank's mapping of the segment
    *m = Message{in_entry, w.bytes, w.tag};
    return true;
  }
  if (w.where > segment_bytes_ || w.bytes > segment_bytes_ - w.where) {
    Fail(Internal("shm: rank " + std::to_string(peer) + " posted a message outside the segment"));
    return false;
  }
  *m = Message{base_ + w.where, w.bytes, w.tag};
  return true;
}

void ShmTransport::Release(int peer) {
  box(peer, rank_).Release(depth_);
  control_.bell(peer).Ring();
}

bool ShmTransport::Drained(int peer) { return box(rank_, peer).Drained(); }

bool ShmTransport::PeerAlive(int peer) {
  if (control_.Departed(peer)) return false;
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
  const std::string who =
      "rank " + std::to_string(peer) + " (pid " + std::to_string(control_.pid(peer)) + ")";
  // A rank that closed its communicator left normally: it is not reported as dead.
  if (control_.Departed(peer)) return who + " closed its communicator";
  return who + " exited";
}

}  // namespace chorus::internal
