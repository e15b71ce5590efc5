// StoreServer's requests (stage 3 of tcp_protocol.h): Set, Get, Add, Wait, Delete and Check
// against the key-value table, and the connections parked until the keys they wait for are set
// (see tcp_store_server.h).
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "rendezvous/store_internal.h"
#include "rendezvous/tcp_protocol.h"
#include "rendezvous/tcp_store_server.h"

namespace chorus::internal::tcp_store {
namespace {

namespace proto = internal::tcp_store;

}  // namespace

// Stage 3. Returns false when the request is malformed (the caller closes the connection).
// Parsing is proto::ParseRequest, which the fuzzer drives directly.
bool StoreServer::HandleRequest(Connection& c, std::string_view body) {
  std::optional<proto::Request> req = proto::ParseRequest(body);
  if (!req) return false;
  switch (req->op) {
    case Op::kSet: {
      const std::string key(req->key);
      values_.insert_or_assign(key, std::string(req->value));
      Reply(c, ReplyStatus::kOk, {});
      KeyChanged(key);
      return true;
    }
    case Op::kGet: {
      const std::string key(req->key);
      if (auto it = values_.find(key); it != values_.end()) {
        Reply(c, ReplyStatus::kOk, it->second);
      } else if (!req->wait) {
        Reply(c, ReplyStatus::kMissing, {});
      } else {
        c.parked = Parked{Op::kGet, {key}, {}};
        WaitOn(c, key);
      }
      return true;
    }
    case Op::kAdd: {
      const std::string key(req->key);
      auto it = values_.find(key);
      auto sum = internal::ApplyAdd(key, it == values_.end() ? nullptr : &it->second, req->delta);
      if (!sum.ok()) {
        Reply(c, ReplyStatus::kError, sum.status().message());
        return true;
      }
      values_.insert_or_assign(key, std::to_string(*sum));
      std::string payload;
      proto::PutU64(&payload, static_cast<uint64_t>(*sum));
      Reply(c, ReplyStatus::kOk, payload);
      KeyChanged(key);
      return true;
    }
    case Op::kWait:
    case Op::kCheck: {
      std::vector<std::string> keys(req->keys.begin(), req->keys.end());
      if (req->op == Op::kCheck) {
        std::string payload;
        std::vector<uint32_t> missing;
        for (size_t i = 0; i < keys.size(); ++i) {
          if (!values_.contains(keys[i])) missing.push_back(static_cast<uint32_t>(i));
        }
        proto::PutU32(&payload, static_cast<uint32_t>(missing.size()));
        for (const uint32_t i : missing) proto::PutU32(&payload, i);
        Reply(c, ReplyStatus::kOk, payload);
      } else if (const std::string* first = FirstMissing(keys); first == nullptr) {
        Reply(c, ReplyStatus::kOk, {});
      } else {
        const std::string key = *first;
        c.parked = Parked{Op::kWait, std::move(keys), {}};
        WaitOn(c, key);
      }
      return true;
    }
    case Op::kDelete: {
      const char existed = values_.erase(std::string(req->key)) > 0 ? 1 : 0;
      Reply(c, ReplyStatus::kOk, std::string_view(&existed, 1));
      return true;
    }
  }
  return false;
}

void StoreServer::Reply(Connection& c, ReplyStatus status, std::string_view payload) {
  proto::PutU32(&c.out, static_cast<uint32_t>(1 + payload.size()));
  c.out.push_back(static_cast<char>(status));
  c.out.append(payload);
  Flush(c);
}

void StoreServer::DrainRunnable() {
  while (!runnable_.empty()) {
    const uint64_t id = runnable_.front();
    runnable_.pop_front();
    auto it = conns_.find(id);
    if (it != conns_.end() && !it->second->dead) Process(*it->second);
  }
}

const std::string* StoreServer::FirstMissing(const std::vector<std::string>& keys) const {
  for (const std::string& key : keys) {
    if (!values_.contains(key)) return &key;
  }
  return nullptr;
}

void StoreServer::WaitOn(Connection& c, const std::string& key) {
  c.parked->waiting_on = key;
  waiters_[key].push_back(c.id);
  UpdateInterest(c);
}

// `key` was just set: answer or re-register every request parked on it.
void StoreServer::KeyChanged(const std::string& key) {
  auto w = waiters_.find(key);
  if (w == waiters_.end()) return;
  const std::vector<uint64_t> ids = std::move(w->second);
  waiters_.erase(w);
  for (const uint64_t id : ids) {
    auto it = conns_.find(id);
    if (it == conns_.end() || it->second->dead || !it->second->parked) continue;
    Connection& c = *it->second;
    if (c.parked->op == Op::kGet) {
      Reply(c, ReplyStatus::kOk, values_.at(key));
    } else if (const std::string* missing = FirstMissing(c.parked->keys); missing != nullptr) {
      WaitOn(c, *missing);
      continue;
    } else {
      Reply(c, ReplyStatus::kOk, {});
    }
    c.parked.reset();
    runnable_.push_back(id);  // it may have more requests buffered
  }
}

}  // namespace chorus::internal::tcp_store
