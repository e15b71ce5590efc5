// FileStore: a store in a directory that every rank sees ("file:///shared/job42"), for
// processes on one host or on hosts that share a filesystem.
//
// Layout: one file per key. The file name encodes the key so that any bytes, '/' and ".."
// included, stay inside the directory: ASCII letters, digits, '-' and '_' are kept and every
// other byte becomes %XX ("rank/2" -> "rank%2F2"). An encoded name longer than 200 bytes (file
// names stop at 255) becomes '~' plus a 128-bit hash of the key instead. '.', '~' and '%' are
// always encoded, so key files never clash with the temporary files (".tmp-*"), the lock file
// (".lock") or each other.
//
// File contents: the key's length (4 bytes, big-endian), the key, then the value. Storing the
// key lets readers verify that a hashed name really holds their key, and makes a directory
// listing explainable.
//
// Writes are atomic: the new contents go to a temporary file in the same directory, which is
// then renamed over the key's file, so a reader sees the old file or the new one, never half of
// one. Set, Add and Delete hold an exclusive flock() on ".lock" so that Add's read-modify-write
// is atomic across processes (and threads: each call opens its own descriptor, and flock locks
// belong to the open file, not the process). Get and Wait take no lock; they poll, sleeping
// 1 ms and doubling up to 10 ms, until the key files appear or the deadline passes.
//
// Temporary files left by a crashed writer are harmless and never read.
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <optional>
#include <thread>

#include "base/hash.h"
#include "rendezvous/store_internal.h"

namespace chorus {
namespace {

using internal::InStore;
using internal::StoreClock;
using internal::StoreDeadline;
using internal::UniqueFd;
using std::chrono::milliseconds;

constexpr size_t kMaxEncodedName = 200;
constexpr size_t kHeaderBytes = 4;
constexpr milliseconds kFirstSleep(1);
constexpr milliseconds kMaxSleep(10);

constexpr char kHex[] = "0123456789ABCDEF";

// FNV-1a with a caller-chosen basis; two passes with different bases and directions give 128
// bits, plenty to make an accidental clash among one job's keys implausible (and a clash would
// still be detected, because the file stores its key).
uint64_t KeyHash(uint64_t basis, const std::string& key, bool reverse) {
  if (!reverse) return internal::Fnv1a(key, basis);
  uint64_t h = basis;
  for (auto c = key.rbegin(); c != key.rend(); ++c)
    h = internal::FnvStep(h, static_cast<uint8_t>(*c));
  return h;
}

std::string FileName(const std::string& key) {
  std::string name;
  for (const char ch : key) {
    const auto c = static_cast<unsigned char>(ch);
    const bool keep = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                      c == '-' || c == '_';
    if (keep) {
      name += ch;
    } else {
      name += '%';
      name += kHex[c >> 4];
      name += kHex[c & 15];
    }
  }
  if (name.size() <= kMaxEncodedName) return name;
  std::string hashed = "~";
  for (const uint64_t h :
       {KeyHash(internal::kFnvBasis, key, false), KeyHash(0x84222325cbf29ce4ULL, key, true)}) {
    for (int shift = 60; shift >= 0; shift -= 4) hashed += kHex[(h >> shift) & 15];
  }
  return hashed;
}

Status WriteAll(int fd, const char* data, size_t size) {
  while (size > 0) {
    const ssize_t n = ::write(fd, data, size);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Unavailable(internal::ErrnoText(errno));
    data += n;
    size -= static_cast<size_t>(n);
  }
  return Status::Ok();
}

// Sleeps for the current step (never past `deadline`) and grows the next one.
void SleepStep(milliseconds* step, StoreDeadline deadline) {
  const auto left = deadline - StoreClock::now();
  if (left > StoreClock::duration::zero()) {
    std::this_thread::sleep_for(std::min<StoreClock::duration>(*step, left));
  }
  *step = std::min(*step * 2, kMaxSleep);
}

class FileStore final : public Store {
 public:
  explicit FileStore(std::string directory)
      : dir_(std::move(directory)), address_("file://" + dir_) {}

  Status Set(const std::string& key, const std::string& value) override {
    CHORUS_RETURN_IF_ERROR(InStore(address_, internal::CheckKey("set", key)));
    CHORUS_RETURN_IF_ERROR(InStore(address_, internal::CheckValue(key, value)));
    auto lock = LockDirectory("set");
    if (!lock.ok()) return lock.status();
    return WriteKey("set", key, value);
  }

  Result<std::string> Get(const std::string& key, milliseconds timeout) override {
    CHORUS_RETURN_IF_ERROR(InStore(address_, internal::CheckKey("get", key)));
    CHORUS_RETURN_IF_ERROR(InStore(address_, internal::CheckTimeout("get", timeout)));
    const StoreDeadline deadline = internal::DeadlineAfter(timeout);
    milliseconds step = kFirstSleep;
    while (true) {
      std::optional<std::string> value;
      CHORUS_RETURN_IF_ERROR(ReadKey("get", key, &value, /*with_value=*/true));
      if (value) return std::move(*value);
      if (StoreClock::now() >= deadline) return internal::WaitTimedOut(address_, timeout, {key});
      SleepStep(&step, deadline);
    }
  }

  Result<int64_t> Add(const std::string& key, int64_t delta) override {
    CHORUS_RETURN_IF_ERROR(InStore(address_, internal::CheckKey("add", key)));
    auto lock = LockDirectory("add");
    if (!lock.ok()) return lock.status();
    std::optional<std::string> current;
    CHORUS_RETURN_IF_ERROR(ReadKey("add", key, &current, /*with_value=*/true));
    auto sum = internal::ApplyAdd(key, current ? &*current : nullptr, delta);
    if (!sum.ok()) return InStore(address_, sum.status());
    CHORUS_RETURN_IF_ERROR(WriteKey("add", key, std::to_string(*sum)));
    return sum;
  }

  Status Wait(const std::vector<std::string>& keys, milliseconds timeout) override {
    CHORUS_RETURN_IF_ERROR(InStore(address_, internal::CheckKeys("wait", keys)));
    CHORUS_RETURN_IF_ERROR(InStore(address_, internal::CheckTimeout("wait", timeout)));
    const StoreDeadline deadline = internal::DeadlineAfter(timeout);
    // A key seen once counts as set: re-reading thousands of files on every round would turn a
    // large rendezvous into a filesystem benchmark.
    std::vector<std::string> missing = keys;
    milliseconds step = kFirstSleep;
    while (true) {
      std::vector<std::string> still;
      for (const std::string& key : missing) {
        std::optional<std::string> found;
        CHORUS_RETURN_IF_ERROR(ReadKey("wait", key, &found, /*with_value=*/false));
        if (!found) still.push_back(key);
      }
      missing = std::move(still);
      if (missing.empty()) return Status::Ok();
      if (StoreClock::now() >= deadline) return internal::WaitTimedOut(address_, timeout, missing);
      SleepStep(&step, deadline);
    }
  }

  Result<bool> Delete(const std::string& key) override {
    CHORUS_RETURN_IF_ERROR(InStore(address_, internal::CheckKey("delete", key)));
    auto lock = LockDirectory("delete");
    if (!lock.ok()) return lock.status();
    std::optional<std::string> found;
    CHORUS_RETURN_IF_ERROR(ReadKey("delete", key, &found, /*with_value=*/false));
    if (!found) return false;
    const std::string path = PathOf(key);
    if (::unlink(path.c_str()) != 0 && errno != ENOENT)
      return Fail("delete", "cannot remove", path);
    return true;
  }

  std::string address() const override { return address_; }

  // The lock file doubles as the check that the directory is usable at all.
  Status Probe() {
    auto lock = LockDirectory("open");
    return lock.ok() ? Status::Ok() : lock.status();
  }

 private:
  std::string PathOf(const std::string& key) const { return dir_ + "/" + FileName(key); }

  // Call right after the failing system call: it reads errno before anything can clobber it.
  Status Fail(std::string_view op, std::string_view what, const std::string& path) const {
    const int err = errno;
    return Unavailable("store " + address_ + ": " + std::string(op) + ": " + std::string(what) +
                       " " + path + ": " + internal::ErrnoText(err));
  }

  // Holds the directory's exclusive lock until the returned descriptor closes.
  Result<UniqueFd> LockDirectory(std::string_view op) const {
    const std::string path = dir_ + "/.lock";
    UniqueFd fd(::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600));
    if (!fd) return Fail(op, "cannot open", path);
    while (::flock(fd.get(), LOCK_EX) != 0) {
      if (errno != EINTR) return Fail(op, "cannot lock", path);
    }
    return fd;
  }

  // Sets *out to the key's value (or to "" when !with_value) if its file exists, else nullopt.
  Status ReadKey(std::string_view op, const std::string& key, std::optional<std::string>* out,
                 bool with_value) const {
    out->reset();
    const std::string path = PathOf(key);
    UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (!fd) {
      if (errno == ENOENT) return Status::Ok();
      return Fail(op, "cannot open", path);
    }
    // A key file is never modified in place (writers rename a new one over it), so the size
    // seen here is the size of the whole file.
    struct stat st {};
    if (::fstat(fd.get(), &st) != 0) return Fail(op, "cannot stat", path);
    const size_t size = static_cast<size_t>(st.st_size);
    const size_t want = with_value ? size : std::min(size, kHeaderBytes + key.size());
    std::string data(want, '\0');
    size_t got = 0;
    while (got < want) {
      const ssize_t n = ::read(fd.get(), data.data() + got, want - got);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return Fail(op, "cannot read", path);
      if (n == 0) break;
      got += static_cast<size_t>(n);
    }
    uint32_t key_size = 0;
    for (size_t i = 0; i < kHeaderBytes && i < got; ++i) {
      key_size = (key_size << 8) | static_cast<unsigned char>(data[i]);
    }
    if (got < want || got < kHeaderBytes || key_size != key.size() ||
        data.compare(kHeaderBytes, key.size(), key) != 0) {
      return Internal("store " + address_ + ": " + std::string(op) + ": " + path +
                      " does not hold key " + key + " (foreign or truncated file)");
    }
    *out = with_value ? data.substr(kHeaderBytes + key.size()) : std::string();
    return Status::Ok();
  }

  // Precondition: the directory lock is held (so Add's read-modify-write cannot interleave).
  Status WriteKey(std::string_view op, const std::string& key, const std::string& value) const {
    std::string tmp = dir_ + "/.tmp-XXXXXX";
    UniqueFd fd(::mkostemp(tmp.data(), O_CLOEXEC));
    if (!fd) return Fail(op, "cannot create a temporary file in", dir_);
    std::string header(kHeaderBytes, '\0');
    const auto key_size = static_cast<uint32_t>(key.size());
    for (size_t i = 0; i < kHeaderBytes; ++i) {
      header[i] = static_cast<char>((key_size >> (8 * (kHeaderBytes - 1 - i))) & 0xff);
    }
    header += key;
    Status written = WriteAll(fd.get(), header.data(), header.size());
    if (written.ok()) written = WriteAll(fd.get(), value.data(), value.size());
    if (written.ok() && ::close(fd.Release()) != 0)
      written = Unavailable(internal::ErrnoText(errno));
    if (written.ok() && ::rename(tmp.c_str(), PathOf(key).c_str()) != 0) {
      written = Unavailable(internal::ErrnoText(errno));
    }
    if (!written.ok()) {
      ::unlink(tmp.c_str());
      return Unavailable("store " + address_ + ": " + std::string(op) + ": cannot write key " +
                         key + ": " + written.message());
    }
    return Status::Ok();
  }

  const std::string dir_;
  const std::string address_;
};

}  // namespace

namespace internal {

Result<std::shared_ptr<Store>> OpenFileStore(const std::string& directory) {
  std::string dir = directory;
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec || !std::filesystem::is_directory(dir, ec)) {
    return InvalidArgument("store file://" + dir + ": cannot create directory " + dir +
                           (ec ? ": " + ec.message() : ": a file of that name exists"));
  }
  auto store = std::make_shared<FileStore>(dir);
  if (Status s = store->Probe(); !s.ok()) return InvalidArgument(s.message());
  return std::shared_ptr<Store>(std::move(store));
}

}  // namespace internal
}  // namespace chorus
