// The TCP transport's framed links (see link.h): credits, posting, the frames a link writes and
// reads, the control frames it carries, and a link's death.
#include "transport/tcp/link.h"

#include <poll.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <mutex>
#include <string>

#include "base/check.h"
#include "transport/call_tag.h"
#include "transport/tcp/tcp_transport_internal.h"

namespace chorus::internal::tcp {

std::string FailPayload(const Status& s) {
  std::string text = s.message().substr(0, tcp::kMaxControlBytes - 4);
  std::string payload(4, '\0');
  payload[3] = static_cast<char>(s.code());
  return payload + text;
}

bool TcpTransport::TryCredit(int peer) {
  if (!Usable(peer)) return false;
  Link& l = link(peer);
  return l.posted.load(std::memory_order_relaxed) - l.written.load(std::memory_order_acquire) <
         static_cast<uint64_t>(depth_);
}

void* TcpTransport::TryReserve(int peer) {
  if (!TryCredit(peer)) return nullptr;
  Link& l = link(peer);
  const uint64_t index = l.posted.load(std::memory_order_relaxed) % static_cast<uint64_t>(depth_);
  return l.send_slots.get() + index * slot_bytes_;
}

void TcpTransport::Post(int peer, const Message& m) {
  Link& l = link(peer);
  const uint64_t n = l.posted.load(std::memory_order_relaxed);
  CHORUS_CHECK(n - l.written.load(std::memory_order_acquire) < static_cast<uint64_t>(depth_));
  CHORUS_CHECK_LE(m.bytes, slot_bytes_);
  const uint64_t index = n % static_cast<uint64_t>(depth_);
  std::byte* slot = l.send_slots.get() + index * slot_bytes_;
  l.posted_messages[index] = {m.bytes, m.tag};
  // Written now if the socket takes it: the common case costs no thread hand-off. The
  // caller's own memory (copies_at_post) is sent from directly; what the socket does not take
  // now is copied into the reserved slot before Post returns. The frame is published under the
  // lock, so the progress thread cannot start it from the slot before that copy.
  const auto* caller = static_cast<const std::byte*>(m.data);
  Flush result;
  {
    std::lock_guard<std::mutex> lock(l.send_mu);
    l.posted.store(n + 1, std::memory_order_release);
    result = FlushLocked(l, caller == slot ? nullptr : caller);
    if (caller != slot) KeepRestInSlot(l, n, caller, slot);
  }
  if (result != Flush::kDone) Wake();
}

void TcpTransport::KeepRestInSlot(Link& l, uint64_t frame, const std::byte* caller,
                                  std::byte* slot) {
  const size_t bytes = l.posted_messages[frame % static_cast<uint64_t>(depth_)].bytes;
  if (l.data_started <= frame) {  // not started: frames ahead of it still wait
    if (bytes > 0) std::memcpy(slot, caller, bytes);
  } else if (l.current && l.current->payload == caller) {  // partly written
    const size_t done = std::min(
        bytes, l.current->done > kFrameHeaderBytes ? l.current->done - kFrameHeaderBytes : 0);
    if (done < bytes) std::memcpy(slot + done, caller + done, bytes - done);
    l.current->payload = slot;
  }
}

bool TcpTransport::TryPeek(int peer, Message* m, const CallTag* /*expect*/) {
  if (!Usable(peer)) return false;
  Link& l = link(peer);
  const uint64_t next = l.released.load(std::memory_order_relaxed);
  if (next == l.received.load(std::memory_order_acquire)) {
    ReadFromRank(peer);
    if (next == l.received.load(std::memory_order_acquire)) return false;
  }
  const uint64_t index = next % static_cast<uint64_t>(depth_);
  const FrameHeader& h = l.arrived[index];
  *m = Message{l.recv_slots.get() + index * slot_bytes_, h.length, h.tag};
  return true;
}

void TcpTransport::Release(int peer) {
  Link& l = link(peer);
  CHORUS_CHECK_LT(l.released.load(std::memory_order_relaxed),
                  l.received.load(std::memory_order_acquire));
  l.released.fetch_add(1, std::memory_order_seq_cst);
  if (l.paused.load(std::memory_order_seq_cst)) Wake();
}

bool TcpTransport::Drained(int peer) {
  Link& l = link(peer);
  return l.written.load(std::memory_order_acquire) == l.posted.load(std::memory_order_relaxed);
}

std::string TcpTransport::DescribeDeath(int peer) const {
  const Link& l = *links_[Index(peer)];
  if (!l.dead.load(std::memory_order_acquire)) return "";
  return "rank " + std::to_string(peer) + " (" + l.address.text + ") " + l.death;
}

void TcpTransport::StartControlFrame(Link& l) {
  ControlFrame& c = l.control_out.front();
  Outgoing& out = l.current.emplace();  // in place: `payload` will point into `owned`
  FrameHeader h;
  h.type = c.type;
  h.comm_id = comm_id_;
  h.sequence = l.send_sequence++;  // the frame's place on the wire, known only now
  h.tag.call_index = c.call_index;
  h.length = c.payload.size();
  tcp::EncodeFrameHeader(h, out.header);
  out.owned = std::move(c.payload);
  l.control_out.pop_front();
  out.payload = reinterpret_cast<const std::byte*>(out.owned.data());
  out.payload_bytes = out.owned.size();
  if (l.send_seal) {
    auto* text = reinterpret_cast<std::byte*>(out.owned.data());
    l.send_seal->Seal(h.sequence, out.header, text, text, out.payload_bytes, out.tag);
    out.tag_bytes = tcp::kTagBytes;
  }
}

void TcpTransport::StartDataFrame(Link& l, const std::byte* newest_from) {
  Outgoing& out = l.current.emplace();
  const uint64_t index = l.data_started % static_cast<uint64_t>(depth_);
  const PostedMessage& pm = l.posted_messages[index];
  const uint64_t sequence = l.send_sequence++;
  tcp::EncodeFrameHeader({FrameType::kData, comm_id_, sequence, pm.tag, pm.bytes}, out.header);
  const bool newest = l.data_started + 1 == l.posted.load(std::memory_order_relaxed);
  std::byte* slot = l.send_slots.get() + index * slot_bytes_;
  out.payload = newest && newest_from != nullptr ? newest_from : slot;
  out.payload_bytes = pm.bytes;
  out.data = true;
  if (l.send_seal) {
    // Sealed now, while the caller's memory (if that is the source) is still valid; an
    // encrypted payload goes out of the slot, which then holds the ciphertext.
    const bool encrypt = l.send_seal->cipher() != tcp::WireCipher::kPoly1305;
    l.send_seal->Seal(sequence, out.header, out.payload, encrypt ? slot : nullptr,
                      out.payload_bytes, out.tag);
    if (encrypt) out.payload = slot;
    out.tag_bytes = tcp::kTagBytes;
  }
  ++l.data_started;
}

void TcpTransport::DropOutputLocked(Link& l) {
  l.current.reset();
  l.control_out.clear();
  const uint64_t posted = l.posted.load(std::memory_order_acquire);
  if (l.data_started == posted) return;
  l.data_started = posted;
  l.written.store(posted, std::memory_order_release);
  doorbell().Ring();  // the credits came back
}

Flush TcpTransport::FlushLocked(Link& l, const std::byte* newest_from) {
  if (l.hung_up.load(std::memory_order_relaxed)) {
    if (l.fd < 0) return Flush::kDone;  // dead: nothing more is taken, and waits see the death
    DropOutputLocked(l);
    return Flush::kError;
  }
  while (l.fd >= 0) {
    if (!l.current) {
      if (!l.control_out.empty()) {
        StartControlFrame(l);
      } else if (l.data_started < l.posted.load(std::memory_order_acquire)) {
        StartDataFrame(l, newest_from);
      } else {
        return Flush::kDone;
      }
    }
    Outgoing& out = *l.current;
    iovec iov[3];
    int count = 0;
    if (out.done < kFrameHeaderBytes) {
      iov[count++] = {out.header + out.done, kFrameHeaderBytes - out.done};
    }
    const size_t payload_done = std::min(
        out.payload_bytes, out.done > kFrameHeaderBytes ? out.done - kFrameHeaderBytes : 0);
    if (payload_done < out.payload_bytes) {
      iov[count++] = {const_cast<std::byte*>(out.payload + payload_done),
                      out.payload_bytes - payload_done};
    }
    const size_t tag_done = out.done > kFrameHeaderBytes + out.payload_bytes
                                ? out.done - kFrameHeaderBytes - out.payload_bytes
                                : 0;
    if (tag_done < out.tag_bytes) iov[count++] = {out.tag + tag_done, out.tag_bytes - tag_done};
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = static_cast<size_t>(count);
    const ssize_t n = sendmsg(l.fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) return Flush::kBlocked;
      if (errno == EINTR) continue;
      const bool gone = errno == EPIPE || errno == ECONNRESET;
      l.send_error = "lost its connection (" + Errno("send") + ")";
      if (!gone) return Flush::kError;  // anything else: the link is killed at once
      l.hung_up.store(true, std::memory_order_release);
      DropOutputLocked(l);
      return Flush::kError;
    }
    out.done += static_cast<size_t>(n);
    if (out.done == out.total()) {
      const bool data = out.data;
      l.current.reset();
      if (data) {
        l.written.fetch_add(1, std::memory_order_acq_rel);
        doorbell().Ring();  // a credit came back
      }
    }
  }
  return Flush::kDone;
}

void TcpTransport::QueueControl(int peer, FrameType type, uint64_t call_index,
                                const std::string& payload) {
  Link& l = link(peer);
  std::lock_guard<std::mutex> lock(l.send_mu);
  l.control_out.push_back({type, call_index, payload});
}

void TcpTransport::Broadcast(FrameType type, uint64_t call_index, const std::string& payload,
                             int except) {
  for (int peer = 0; peer < size(); ++peer) {
    if (peer == rank_ || peer == except) continue;
    QueueControl(peer, type, call_index, payload);
  }
  Wake();
}

void TcpTransport::Interest(int peer, bool output) {
  Link& l = link(peer);
  if (l.fd < 0) return;
  const bool paused = l.paused.load(std::memory_order_relaxed);
  const uint32_t events = (paused ? 0u : EPOLLIN | EPOLLRDHUP) | (output ? EPOLLOUT : 0u);
  if (events == l.events) return;
  epoll_event ev{};
  ev.events = events;
  ev.data.u64 = kLinkBase + static_cast<uint64_t>(peer);
  // A paused link is taken out of the set: a hang-up would otherwise be reported again and
  // again while the rank has no slot to read into.
  const int op = events == 0 ? EPOLL_CTL_DEL : l.events == 0 ? EPOLL_CTL_ADD : EPOLL_CTL_MOD;
  epoll_ctl(epoll_.get(), op, l.fd, &ev);
  l.events = events;
}

void TcpTransport::RetireLink(int peer, const std::string& why, Clock::time_point until) {
  Link& l = link(peer);
  {
    std::lock_guard<std::mutex> lock(l.recv_mu);
    if (l.broken.empty()) l.broken = why;  // the rank thread reads no more from it
  }
  const auto left_ms = [&] {
    return std::chrono::ceil<std::chrono::milliseconds>(until - Clock::now()).count();
  };
  for (;;) {
    Flush result;
    int fd;
    {
      std::lock_guard<std::mutex> lock(l.send_mu);
      fd = l.fd;
      if (fd < 0) return KillLink(peer, why);
      result = FlushLocked(l);
    }
    if (result != Flush::kBlocked || left_ms() <= 0) break;
    // Blocked: the path may be full because nobody reads what the peer sends us; drain it.
    if (DrainedToTheEnd(fd)) break;  // closed by the peer: nothing more to write
    pollfd writable{.fd = fd, .events = POLLOUT, .revents = 0};
    poll(&writable, 1, static_cast<int>(std::min<int64_t>(left_ms(), 5)));
  }
  const int fd = l.fd;  // only this thread closes it (KillLink)
  shutdown(fd, SHUT_WR);
  while (!DrainedAndAcknowledged(fd) && left_ms() > 0) {
    pollfd readable{.fd = fd, .events = POLLIN, .revents = 0};
    poll(&readable, 1, static_cast<int>(std::min<int64_t>(left_ms(), 5)));
  }
  KillLink(peer, why);
}

void TcpTransport::KillLink(int peer, const std::string& why) {
  Link& l = link(peer);
  if (l.dead.load(std::memory_order_relaxed)) return;
  l.death = why;
  {
    std::scoped_lock lock(l.recv_mu, l.send_mu);
    if (l.fd >= 0) {
      if (l.events != 0) epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, l.fd, nullptr);
      l.events = 0;
      close(l.fd);
      l.fd = -1;
    }
  }
  l.dead.store(true, std::memory_order_release);
  doorbell().Ring();
}

TcpTransport::ReadOutcome TcpTransport::ReadLocked(int peer, std::string* why) {
  Link& l = link(peer);
  for (;;) {
    if (l.fd < 0) return ReadOutcome::kBlocked;
    if (!l.in_payload) {
      const ssize_t n = recv(l.fd, l.in_header + l.in_header_bytes,
                             kFrameHeaderBytes - l.in_header_bytes, MSG_DONTWAIT);
      if (n == 0) return ReadOutcome::kClosed;
      if (n < 0) {
        if (errno == EAGAIN || errno == EINTR) return ReadOutcome::kBlocked;
        *why = "lost its connection (" + Errno("recv") + ")";
        return ReadOutcome::kBroken;
      }
      l.in_header_bytes += static_cast<size_t>(n);
      if (l.in_header_bytes < kFrameHeaderBytes) continue;
      l.in_header_bytes = 0;
      const Status s = tcp::DecodeFrameHeader(l.in_header, {comm_id_, l.recv_sequence, slot_bytes_},
                                              &l.in_frame);
      if (!s.ok()) {
        *why = "sent a bad frame (" + s.message() + ")";
        return ReadOutcome::kBadFrame;
      }
      ++l.recv_sequence;
      l.in_payload = true;
      l.in_payload_bytes = 0;
      l.control_in.clear();
    }
    const FrameHeader& h = l.in_frame;
    std::byte* target;
    const uint64_t received = l.received.load(std::memory_order_relaxed);
    if (h.type == FrameType::kData) {
      if (received - l.released.load(std::memory_order_seq_cst) >= static_cast<uint64_t>(depth_)) {
        return ReadOutcome::kFull;
      }
      target = l.recv_slots.get() + (received % static_cast<uint64_t>(depth_)) * slot_bytes_;
    } else {
      l.control_in.resize(h.length);
      target = reinterpret_cast<std::byte*>(l.control_in.data());
    }
    while (l.in_payload_bytes < h.length) {
      const ssize_t n =
          recv(l.fd, target + l.in_payload_bytes, h.length - l.in_payload_bytes, MSG_DONTWAIT);
      if (n == 0) return ReadOutcome::kClosed;
      if (n < 0) {
        if (errno == EAGAIN || errno == EINTR) return ReadOutcome::kBlocked;
        *why = "lost its connection (" + Errno("recv") + ")";
        return ReadOutcome::kBroken;
      }
      l.in_payload_bytes += static_cast<size_t>(n);
    }
    if (l.recv_seal) {
      while (l.in_tag_bytes < tcp::kTagBytes) {
        const ssize_t n =
            recv(l.fd, l.in_tag + l.in_tag_bytes, tcp::kTagBytes - l.in_tag_bytes, MSG_DONTWAIT);
        if (n == 0) return ReadOutcome::kClosed;
        if (n < 0) {
          if (errno == EAGAIN || errno == EINTR) return ReadOutcome::kBlocked;
          *why = "lost its connection (" + Errno("recv") + ")";
          return ReadOutcome::kBroken;
        }
        l.in_tag_bytes += static_cast<size_t>(n);
      }
      l.in_tag_bytes = 0;
      // l.in_header still holds this frame's header bytes: the next header is read only now.
      if (!l.recv_seal->Open(h.sequence, l.in_header, target, h.length, l.in_tag)) {
        *why = "frame " + std::to_string(h.sequence) +
               " fails its integrity check (changed on the way, or not sent by that rank)";
        return ReadOutcome::kBadFrame;
      }
    }
    l.in_payload = false;
    if (h.type == FrameType::kData) {
      l.arrived[received % static_cast<uint64_t>(depth_)] = h;
      l.received.store(received + 1, std::memory_order_release);
      doorbell().Ring();
    } else {
      OnControl(peer, h, l.control_in);
    }
  }
}

void TcpTransport::Read(int peer) {
  Link& l = link(peer);
  std::string why;
  ReadOutcome outcome;
  {
    std::lock_guard<std::mutex> lock(l.recv_mu);
    outcome = ReadLocked(peer, &why);
    if (!l.broken.empty() && outcome == ReadOutcome::kBlocked) {
      why = l.broken;  // the rank thread met it first
      outcome = l.broken_frame ? ReadOutcome::kBadFrame : ReadOutcome::kBroken;
    }
  }
  switch (outcome) {
    case ReadOutcome::kBlocked:
      return;
    case ReadOutcome::kFull:
      // Every slot is full: stop reading until the rank releases one (TCP holds the rest).
      // Paused before the re-check, so a release in between is not missed (Release wakes this
      // thread when it sees paused).
      l.paused.store(true, std::memory_order_seq_cst);
      if (l.received.load(std::memory_order_relaxed) - l.released.load(std::memory_order_seq_cst) <
          static_cast<uint64_t>(depth_)) {
        l.paused.store(false, std::memory_order_relaxed);
        return Read(peer);
      }
      Interest(peer, (l.events & EPOLLOUT) != 0);
      return;
    case ReadOutcome::kClosed:
      return KillLink(peer, "closed its connection (exited?)");
    case ReadOutcome::kBroken:
      return KillLink(peer, why);
    case ReadOutcome::kBadFrame:
      // The group's failure goes out first, on this link too (through whatever sits on the
      // path), so that the sender learns why; then the link is closed.
      Fail(BadFrame(peer, why));
      return RetireLink(peer, why, Clock::now() + kRetireFor);
  }
}

Status TcpTransport::BadFrame(int peer, const std::string& why) const {
  const std::string what =
      "tcp: rank " + std::to_string(rank_) + " got from rank " + std::to_string(peer) + ": " + why;
  // A frame that fails its check was changed on the way: the link cannot be trusted, which is
  // not a bug in chorus.
  return why.find("integrity") != std::string::npos ? Unavailable(what) : Internal(what);
}

void TcpTransport::ReadFromRank(int peer) {
  // The rank reads for itself while it polls: no hand-off through the progress thread on the
  // path of a small message. Anything but data or "nothing yet" is left to the progress thread.
  Link& l = link(peer);
  std::unique_lock<std::mutex> lock(l.recv_mu, std::try_to_lock);
  if (!lock.owns_lock() || !l.broken.empty()) return;
  std::string why;
  switch (ReadLocked(peer, &why)) {
    case ReadOutcome::kBlocked:
    case ReadOutcome::kFull:
      return;
    case ReadOutcome::kClosed:
      l.broken = "closed its connection (exited?)";
      break;
    case ReadOutcome::kBroken:
      l.broken = why;
      break;
    case ReadOutcome::kBadFrame:
      l.broken = why;
      l.broken_frame = true;  // the progress thread sends the failure before it closes the link
      lock.unlock();
      Fail(BadFrame(peer, why));
      break;
  }
  l.has_broken.store(true, std::memory_order_release);
  Wake();
}

void TcpTransport::OnControl(int peer, const FrameHeader& h, const std::string& payload) {
  if (h.type == FrameType::kProbe) {
    // Answered by whichever thread reads it, so a rank busy outside chorus still answers.
    const PeerState me = OwnState();
    std::string reply = std::to_string(me.started) + " " + std::to_string(me.active) + " " +
                        std::to_string(me.waiting_for) + " " +
                        std::to_string(static_cast<int64_t>(me.idle_seconds * 1000)) +
                        (control_.failed() ? " 1" : " 0");
    if (me.has_call) {  // the call it is in, as Beacon::call's words
      uint64_t words[Beacon::kCallWords];
      PackTag(me.call, words);
      for (uint64_t w : words) reply += " " + std::to_string(w);
    }
    QueueControl(peer, FrameType::kProbeReply, h.tag.call_index, reply);
    Wake();
    return;
  }
  if (h.type == FrameType::kProbeReply) {
    Link& l = link(peer);
    unsigned long long started = 0;
    long long active = -1;
    int waiting_for = -1;
    long long idle_ms = -1;
    int failed = 0;
    unsigned long long words[Beacon::kCallWords] = {};
    const int fields =
        std::sscanf(payload.c_str(), "%llu %lld %d %lld %d %llu %llu %llu %llu", &started, &active,
                    &waiting_for, &idle_ms, &failed, &words[0], &words[1], &words[2], &words[3]);
    if (fields != 5 && fields != 5 + Beacon::kCallWords) {
      return;  // an authenticated peer of another version: no verdict from it
    }
    {
      std::lock_guard lock(l.reply_call_mu);
      uint64_t call[Beacon::kCallWords];
      std::copy(std::begin(words), std::end(words), call);
      l.reply_has_call = fields == 5 + Beacon::kCallWords && UnpackTag(call, &l.reply_call);
    }
    l.reply_started.store(started, std::memory_order_relaxed);
    l.reply_active.store(active, std::memory_order_relaxed);
    l.reply_waiting_for.store(waiting_for, std::memory_order_relaxed);
    l.reply_idle_ms.store(idle_ms, std::memory_order_relaxed);
    l.reply_failed.store(failed != 0, std::memory_order_relaxed);
    l.answered.store(h.tag.call_index + 1, std::memory_order_release);
    l.replies.fetch_add(1, std::memory_order_acq_rel);
    doorbell().Ring();
    return;
  }
  if (h.type == FrameType::kReject) {
    control_.Reject(peer, h.tag.call_index, payload);
    doorbell().Ring();
    return;
  }
  // kFail: record the first failure and pass it on, so it floods the connected ranks.
  std::lock_guard<std::mutex> lock(fail_mu_);  // see Fail
  if (control_.failed() || payload.size() < 4) return;
  const auto code = static_cast<StatusCode>(static_cast<uint8_t>(payload[3]));
  const Status status(code == StatusCode::kOk ? StatusCode::kAborted : code, payload.substr(4));
  control_.Fail(status);
  doorbell().Ring();
  for (int other = 0; other < size(); ++other) {
    if (other != rank_ && other != peer && link(other).ready.load(std::memory_order_relaxed)) {
      QueueControl(other, FrameType::kFail, 0, payload);
    }
  }
}

}  // namespace chorus::internal::tcp
