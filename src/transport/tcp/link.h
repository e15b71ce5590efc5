// The TCP transport's framed link to one peer (Link): the socket, the staging slots, the frames
// on their way out (Outgoing) with the queue of control frames behind them, the frame being read,
// and the peer's last census answer. The transport's members that move frames on a link are
// link.cpp's. Used by tcp_transport_internal.h.
//
// Thread safety: the rank thread and the progress thread share a Link through its atomics;
// each field says which lock guards it (send_mu, recv_mu, reply_call_mu) or which thread owns it.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "base/pages.h"
#include "chorus/status.h"
#include "transport/control.h"
#include "transport/tcp/frame.h"
#include "transport/tcp/socket.h"
#include "transport/tcp/wire.h"
#include "transport/transport.h"

namespace chorus::internal::tcp {

// A frame on its way out: header bytes, then payload bytes from a slot or from `owned`. It
// stays where it was made (`payload` may point into `owned`, whose short-string characters
// would move with it).
struct Outgoing {
  Outgoing() = default;
  Outgoing(const Outgoing&) = delete;
  Outgoing& operator=(const Outgoing&) = delete;
  uint8_t header[kFrameHeaderBytes];
  const std::byte* payload = nullptr;
  size_t payload_bytes = 0;
  size_t done = 0;  // bytes of header + payload (+ tag) written
  bool data = false;
  std::string owned;  // a control frame's payload
  uint8_t tag[tcp::kTagBytes];
  size_t tag_bytes = 0;  // kTagBytes when the link protects its frames (wire.h)
  size_t total() const { return kFrameHeaderBytes + payload_bytes + tag_bytes; }
};

struct PostedMessage {
  uint64_t bytes = 0;
  CallTag tag;
};

struct ControlFrame {
  FrameType type;
  uint64_t call_index;
  std::string payload;
};

enum class Flush { kDone, kBlocked, kError };

// One peer's connection and slots. The rank thread and the progress thread share it through
// the atomics; the send side is written by whoever holds send_mu.
struct Link {
  std::atomic<bool> wanted{false};  // the rank thread asked for the connection
  std::atomic<bool> ready{false};   // authenticated, slots allocated (progress thread sets)
  std::atomic<bool> dead{false};    // the connection is gone; `death` says why
  std::atomic<bool> paused{false};  // reading stopped: every receive slot is full
  std::string death;                // written before dead = true
  Address address;

  TouchedPages send_slots;
  TouchedPages recv_slots;

  // Send side.
  std::mutex send_mu;
  int fd = -1;                       // under send_mu once ready; -1 after close
  std::atomic<uint64_t> posted{0};   // rank thread
  std::atomic<uint64_t> written{0};  // frames fully handed to the kernel: the credits
  PostedMessage posted_messages[kMaxPipelineDepth];
  std::deque<ControlFrame> control_out;  // waiting for the current frame to end (under send_mu)
  std::optional<Outgoing> current;       // frame being written (under send_mu)
  uint64_t data_started = 0;             // data frames started (under send_mu)
  uint64_t send_sequence = 0;            // frames started (under send_mu)
  // A send found the peer gone (EPIPE, ECONNRESET): while the link lives on, what is queued or
  // posted is dropped, as the kernel drops what is sent to a peer that is gone, so no wait for
  // a credit outlasts the link. The link dies only once what the peer sent before it hung up
  // has been read. Set under send_mu; a census reads it without (the peer has exited).
  std::atomic<bool> hung_up{false};
  std::string send_error;                // why the last send failed (under send_mu)
  // Dead, or hung up: the peer has exited, though a hung-up link lives on until its last
  // messages are read. A census neither asks it nor counts it alive.
  bool gone() const {
    return dead.load(std::memory_order_acquire) || hung_up.load(std::memory_order_acquire);
  }
  uint32_t events = 0;                   // epoll interest; 0 = not registered (progress thread)

  // Receive side: whoever holds recv_mu reads the socket; the rank thread reads slots up to
  // `received`.
  std::mutex recv_mu;
  std::string broken;         // why the rank thread found the connection broken (under recv_mu)
  bool broken_frame = false;  // ... and it was a frame that failed its check (under recv_mu)
  std::atomic<bool> has_broken{false};
  std::atomic<uint64_t> received{0};
  std::atomic<uint64_t> released{0};
  FrameHeader arrived[kMaxPipelineDepth];
  uint8_t in_header[kFrameHeaderBytes];
  size_t in_header_bytes = 0;
  bool in_payload = false;
  FrameHeader in_frame;
  size_t in_payload_bytes = 0;
  std::string control_in;
  uint64_t recv_sequence = 0;
  uint8_t in_tag[tcp::kTagBytes];
  size_t in_tag_bytes = 0;

  // Frame protection (CommOptions::wire), one seal per direction: null under kAuthenticate.
  std::unique_ptr<tcp::WireSeal> send_seal;  // under send_mu
  std::unique_ptr<tcp::WireSeal> recv_seal;  // under recv_mu

  // The peer's answer to this rank's last census probe (kProbeReply), written by whichever
  // thread read it, before `answered` is set to the probed call + 1 and `replies` counts it (a
  // census takes only the answers that came after it asked: an older one, to a glance, may be
  // from before the peer stopped).
  std::atomic<uint64_t> answered{0};
  std::atomic<uint64_t> replies{0};
  // Whether the last answer is about `call_index` and came after the first `replies_before`.
  bool AnsweredAfter(uint64_t call_index, uint64_t replies_before) const {
    return replies.load(std::memory_order_acquire) > replies_before &&
           answered.load(std::memory_order_acquire) == call_index + 1;
  }
  std::atomic<uint64_t> reply_started{0};
  std::atomic<int64_t> reply_active{-1};
  std::atomic<int32_t> reply_waiting_for{-1};
  std::atomic<int64_t> reply_idle_ms{-1};
  std::atomic<bool> reply_failed{false};
  // The call the peer showed in that answer: whole, or not at all.
  std::mutex reply_call_mu;
  bool reply_has_call = false;  // under reply_call_mu
  CallTag reply_call;           // under reply_call_mu
};

// The payload of a kFail frame: the status code, then its message (cut to fit).
std::string FailPayload(const Status& s);

}  // namespace chorus::internal::tcp
