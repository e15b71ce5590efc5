// Thread transport (see thread_transport.h).
#include "transport/thread/thread_transport.h"

#include <cstring>
#include <string>
#include <thread>

namespace chorus::internal {

ThreadGroup::ThreadGroup(int size, size_t slot_bytes, int depth)
    : slot_bytes_(slot_bytes),
      depth_(depth),
      control_memory_(std::aligned_alloc(64, Control::Bytes(size))),
      control_(Control::Create(control_memory_.get(), size)),
      links_(static_cast<size_t>(size) * static_cast<size_t>(size)) {
  for (auto& link : links_) link.store(nullptr, std::memory_order_relaxed);
}

ThreadGroup::~ThreadGroup() {
  for (auto& link : links_) delete link.load(std::memory_order_relaxed);
}

ThreadGroup::Link& ThreadGroup::link(int src, int dst) {
  std::atomic<Link*>& cell =
      links_[static_cast<size_t>(src) * static_cast<size_t>(size()) + static_cast<size_t>(dst)];
  Link* link = cell.load(std::memory_order_acquire);
  if (link != nullptr) return *link;
  auto fresh = std::make_unique<Link>();
  if (cell.compare_exchange_strong(link, fresh.get(), std::memory_order_acq_rel)) {
    return *fresh.release();
  }
  return *link;  // the other side won the race
}

Result<std::unique_ptr<Transport>> ConnectThreads(Store& store, const ConnectConfig& config) {
  using Holder = std::shared_ptr<ThreadGroup>;
  if (config.rank == 0) {
    // The holder keeps the group alive until every rank has its own reference. If some rank
    // never comes, the holder is leaked on purpose: a late rank may still read its address.
    auto* holder =
        new Holder(std::make_shared<ThreadGroup>(config.size, config.slot_bytes, config.depth));
    CHORUS_RETURN_IF_ERROR(
        store.Set("thread/group", std::to_string(reinterpret_cast<uintptr_t>(holder))));
    Holder group = *holder;
    while (true) {
      auto joined = store.Add("thread/joined", 0);
      if (!joined.ok()) return joined.status();
      if (*joined == config.size - 1) break;
      if (Clock::now() >= config.deadline) {
        return DeadlineExceeded("Create: waited for " + std::to_string(config.size - 1 - *joined) +
                                " thread rank(s) to take the group from the store");
      }
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    delete holder;
    return std::unique_ptr<Transport>(new ThreadTransport(std::move(group), 0));
  }
  auto address = store.Get("thread/group", Remaining(config.deadline));
  if (!address.ok()) return address.status();
  Holder group = *reinterpret_cast<Holder*>(static_cast<uintptr_t>(std::stoull(*address)));
  auto joined = store.Add("thread/joined", 1);
  if (!joined.ok()) return joined.status();
  return std::unique_ptr<Transport>(new ThreadTransport(std::move(group), config.rank));
}

ThreadTransport::ThreadTransport(std::shared_ptr<ThreadGroup> group, int rank)
    : ControlledTransport(group->control(), rank), group_(std::move(group)) {}

bool ThreadTransport::TryCredit(int peer) {
  return group_->link(rank_, peer).box.HasCredit(group_->depth());
}

void* ThreadTransport::TryReserve(int peer) {
  ThreadGroup::Link& link = group_->link(rank_, peer);
  const int depth = group_->depth();
  if (!link.box.HasCredit(depth)) return nullptr;
  if (!link.slots) {
    // First use of this link: allocate once, reuse forever. Not zeroed: pages are touched by
    // the first messages that need them, so links that only carry small messages (the direct
    // algorithms use all p^2 of them) cost a page or two, not depth * slot_bytes.
    link.slots.reset(new std::byte[group_->slot_bytes() * static_cast<size_t>(depth)]);
  }
  return link.slots.get() + (link.box.next() % static_cast<uint64_t>(depth)) * group_->slot_bytes();
}

void ThreadTransport::Post(int peer, const Message& m) {
  Mailbox& box = group_->link(rank_, peer).box;
  const uint64_t ack = group_->link(peer, rank_).box.released();
  if (m.bytes <= Mailbox::kInlineBytes) {
    box.PostInline(m.data, m.bytes, m.tag, ack, group_->depth());
  } else {
    box.Post({reinterpret_cast<uintptr_t>(m.data), m.bytes, m.tag}, ack, group_->depth());
  }
  control_.bell(peer).Ring();
}

bool ThreadTransport::TryPeek(int peer, Message* m, const CallTag* expect) {
  WireMessage w;
  uint64_t ack = 0;
  const void* in_entry = nullptr;
  if (!group_->link(peer, rank_).box.Peek(&w, &ack, group_->depth(), &in_entry, expect)) {
    return false;
  }
  group_->link(rank_, peer).box.Acked(ack);
  const void* data = in_entry != nullptr ? in_entry : reinterpret_cast<const void*>(w.where);
  *m = Message{data, w.bytes, w.tag};
  return true;
}

void ThreadTransport::Release(int peer) {
  group_->link(peer, rank_).box.Release(group_->depth());
  control_.bell(peer).Ring();
}

bool ThreadTransport::Drained(int peer) { return group_->link(rank_, peer).box.Drained(); }

}  // namespace chorus::internal
