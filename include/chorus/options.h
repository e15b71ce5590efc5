// chorus/options.h: aggregate options for communicators and for single calls.
//
// Options are plain aggregates with defaults; set what you need with designated initialisers:
//
//   chorus::CommOptions opts{.timeout = std::chrono::seconds(5)};
//   auto group = chorus::CreateLocalGroup(4, opts);
//   comm.AllReduce(send, recv, chorus::ReduceOp::kSum, {.timeout =
//   std::chrono::milliseconds(200)});
//
// Thread safety: values.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <optional>
#include <string>

#include "chorus/export.h"
#include "chorus/store.h"

namespace chorus {
CHORUS_API_BEGIN

// How ranks exchange data.
//   kThread  threads of one process (CreateLocalGroup)
//   kShm     processes on one host, through a shared-memory segment
//   kTcp     hosts, over authenticated TCP connections (any ranks, also on one host)
//   kMpi     an existing MPI's point-to-point (chorus/mpi.h, built with CHORUS_WITH_MPI)
//   kAuto    CreateLocalGroup: thread. Communicator::Create: thread when every rank is a thread
//            of this process, shm when every rank is on this host (same hostname and boot id),
//            otherwise TCP (hierarchical where several ranks share a host)
enum class TransportKind : uint8_t { kAuto, kThread, kShm, kTcp, kMpi };
std::string_view TransportKindName(TransportKind kind);

// How a rank waits for its peers.
//   kAuto          spin briefly when the ranks fit on the cores, then yield the core, then sleep
//                  on a futex until a peer's change wakes it (ARCHITECTURE.md section 6)
//   kSleep         sleep at once on every wait: no spin, no yield. Each wait costs a wake-up
//                  (a few microseconds) but never takes a core that other work could use.
//   kSleepChecked  kSleep, and a wait whose condition came true without its doorbell ringing
//                  fails the call with kInternal ("lost wake-up"). For chorus's own tests:
//                  a missing ring then fails at once instead of costing a slice under load.
// CHORUS_WAIT=auto|sleep|sleep-checked in the environment. MPI ranks always poll.
enum class WaitMode : uint8_t { kAuto, kSleep, kSleepChecked };
std::string_view WaitModeName(WaitMode mode);  // "auto", "sleep", "sleep-checked"

// The stores with which a rank writes a large message (256 KiB and more) that a peer on this host
// reads next: into a staging slot (shm ranks, hybrid ranks' peers on their host, thread ranks'
// copied messages), or its chunk of a direct all-reduce (thread ranks).
//   kAuto    time the copies and stream while ordinary stores cost more than twice what
//            non-temporal ones do: that happens when the reading core's cache is far (on this
//            project's VM, whose two vCPUs stop sharing a cache for seconds at a time, a 2-rank
//            1 MiB reduce-scatter on shm ranks took 240 us with ordinary stores, 47 streamed,
//            and 31 with ordinary stores while they share one)
//   kCached  ordinary stores always: the reader finds the message in a cache they share
//   kStream  non-temporal stores always: the message goes to memory, the reader's copies of
//            those lines are dropped without a round trip to its core
// CHORUS_SLOT_STORES=auto|cached|stream in the environment.
enum class SlotStores : uint8_t { kAuto, kCached, kStream };
std::string_view SlotStoresName(SlotStores stores);  // "auto", "cached", "stream"

// What protects the frames between TCP ranks once a connection has proved the job's secret.
//   kAuthenticate  nothing more: a party on the path can read and change payloads (headers are
//                  checked, not protected)
//   kIntegrity     every frame carries a MAC under a key of its own connection and direction
//                  (Poly1305, a one-time key per frame): a changed, replayed, reordered or
//                  dropped frame fails the call on both ends; payloads travel in the clear
//   kEncrypt       authenticated encryption of every frame (AES-256-GCM where the CPU has
//                  AES-NI, else ChaCha20-Poly1305): also hides the payloads
// Every rank must pass the same mode. CHORUS_WIRE=authenticate|integrity|encrypt. docs/security.md
// says what each mode protects against, and what it costs.
enum class WireMode : uint8_t { kAuthenticate, kIntegrity, kEncrypt };
std::string_view WireModeName(WireMode mode);  // "authenticate", "integrity", "encrypt"

struct CommOptions {
  // Every wait inside a collective ends by this deadline; the call then returns
  // kDeadlineExceeded and the communicator stays failed.
  std::chrono::milliseconds timeout = std::chrono::seconds(30);
  // Large buffers move in segments of at most this many bytes, so neighbours work on different
  // segments at the same time. Also the size of each staging slot, allocated once.
  size_t segment_bytes = size_t{1} << 20;
  // Staging slots per link: how many segments a sender may run ahead of its receiver.
  int pipeline_depth = 4;
  TransportKind transport = TransportKind::kAuto;
  // The algorithm every call of a collective that has one of this name uses ("ring" for the
  // all-reduces, say; a broadcast, which has none, still selects), unless
  // CallOptions::algorithm says otherwise; empty lets the selection table choose per call
  // (`chorus bench --list-algos` prints it). A name no collective has is refused at Create.
  std::string algorithm;
  WaitMode wait = WaitMode::kAuto;
  SlotStores slot_stores = SlotStores::kAuto;
  // The machine parameters the selection's cost model uses: a file `chorus tune` wrote, or
  // empty for the built-in defaults. A named file must exist and parse. Under Create every rank
  // uses rank 0's, so that all pick the same algorithms. LocalOptionsFromEnvironment fills it
  // in from CHORUS_TUNING_FILE, else $XDG_CONFIG_HOME/chorus/tuning.conf or
  // ~/.config/chorus/tuning.conf when that exists.
  std::string tuning_file;
  WireMode wire = WireMode::kAuthenticate;
  // Where shm ranks keep the segment they share: empty for /dev/shm (shm_open), else a
  // directory, best another tmpfs ("/run/user/1000", a mounted hugetlbfs). Create first checks
  // that the segment fits there and fails naming the place, its free space and what is needed.
  // CHORUS_SHM_DIR in the environment.
  std::string shm_dir;

  // Communicator::Create only (CreateLocalGroup ignores them); CommOptionsFromEnvironment fills
  // them in from a launcher's variables.
  int rank = -1;
  int size = 0;
  // Where the ranks meet: a Store object, or the URL of one ("tcp://host:port",
  // "file:///path"). A given `store` wins over `store_url`.
  std::shared_ptr<Store> store;
  std::string store_url;
  // Rank 0 serves `store_url` itself (a TcpStoreServer on its port), as torchrun's MASTER_PORT.
  bool host_store = false;
  // Communicators of one job that meet through the same store need distinct names. No '/',
  // and for Create no '#' or '~' either: those name the communicators Split and Shrink make.
  std::string name = "world";
  // The job the ranks belong to: ranks of different jobs never meet, even on one store with one
  // name. Empty: jobs are told apart by their timing only, and two that start together on one
  // store and name fail fast with a message saying so. CommOptionsFromEnvironment takes it from
  // the launcher (CHORUS_JOB_ID, torchrun's run id, Slurm's job and step, Open MPI's job id).
  std::string job_id;
  // The job's shared secret: every TCP connection (to the store and between ranks) proves it
  // knows it before any data moves. Required by the TCP store and transport; the environment
  // gives it as CHORUS_SECRET or CHORUS_SECRET_FILE, and `chorus launch` makes one up.
  std::string secret;
  // Where TCP ranks listen: an IPv4 address or an interface name ("eth0"). Empty: loopback when
  // every rank is on this host, else this host's first non-loopback IPv4 interface that is up.
  // CHORUS_SOCKET_IFNAME in the environment.
  std::string listen;
  // Ranks with the same host id share a host: shared memory between them, TCP to the others.
  // Empty: the hostname and the kernel's boot id. CHORUS_HOST_ID in the environment.
  std::string host_id;
};

struct CallOptions {
  // Overrides CommOptions::timeout for this call.
  std::optional<std::chrono::milliseconds> timeout;
  // Overrides CommOptions::segment_bytes for this call; must not exceed it.
  std::optional<size_t> segment_bytes;
  // Runs this algorithm ("ring", "oneshot", "direct", ...) instead of the selected one; the
  // call's collective must have it.
  std::string algorithm;
};

// Options of one point-to-point call (Communicator::Send and Recv).
struct MessageOptions {
  // Overrides CommOptions::timeout for this call.
  std::optional<std::chrono::milliseconds> timeout;
  // The message's tag. A Recv takes the next message from its peer, whatever its tag; the tags
  // must then be the same, as the counts and types must (there is no matching by tag).
  uint32_t tag = 0;
};

CHORUS_API_END
}  // namespace chorus
