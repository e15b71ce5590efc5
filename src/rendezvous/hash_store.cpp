// HashStore: the in-process store, for ranks that are threads of one process and for tests.
//
// One map under one mutex. Writers notify a single condition variable and every waiter
// re-checks its own keys; waits are few and short-lived during rendezvous, so per-key wake-up
// lists would buy nothing. Waits use the steady clock, so a wall-clock jump neither shortens
// nor stretches them.
#include <condition_variable>
#include <mutex>
#include <unordered_map>

#include "rendezvous/store_internal.h"

namespace chorus {
namespace {

using internal::InStore;

constexpr char kAddress[] = "hash://";

class HashStore final : public Store {
 public:
  Status Set(const std::string& key, const std::string& value) override {
    CHORUS_RETURN_IF_ERROR(InStore(kAddress, internal::CheckKey("set", key)));
    CHORUS_RETURN_IF_ERROR(InStore(kAddress, internal::CheckValue(key, value)));
    {
      std::lock_guard lock(mu_);
      values_[key] = value;
    }
    changed_.notify_all();
    return Status::Ok();
  }

  Result<std::string> Get(const std::string& key, std::chrono::milliseconds timeout) override {
    CHORUS_RETURN_IF_ERROR(InStore(kAddress, internal::CheckKey("get", key)));
    CHORUS_RETURN_IF_ERROR(InStore(kAddress, internal::CheckTimeout("get", timeout)));
    const auto deadline = internal::DeadlineAfter(timeout);
    std::unique_lock lock(mu_);
    auto it = values_.end();
    const bool found = changed_.wait_until(lock, deadline, [&] {
      it = values_.find(key);
      return it != values_.end();
    });
    if (!found) return internal::WaitTimedOut(kAddress, timeout, {key});
    return it->second;
  }

  Result<int64_t> Add(const std::string& key, int64_t delta) override {
    CHORUS_RETURN_IF_ERROR(InStore(kAddress, internal::CheckKey("add", key)));
    int64_t sum = 0;
    {
      std::lock_guard lock(mu_);
      auto it = values_.find(key);
      auto added = internal::ApplyAdd(key, it == values_.end() ? nullptr : &it->second, delta);
      if (!added.ok()) return InStore(kAddress, added.status());
      sum = *added;
      values_[key] = std::to_string(sum);
    }
    changed_.notify_all();
    return sum;
  }

  Status Wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override {
    CHORUS_RETURN_IF_ERROR(InStore(kAddress, internal::CheckKeys("wait", keys)));
    CHORUS_RETURN_IF_ERROR(InStore(kAddress, internal::CheckTimeout("wait", timeout)));
    const auto deadline = internal::DeadlineAfter(timeout);
    std::unique_lock lock(mu_);
    const bool all = changed_.wait_until(lock, deadline, [&] {
      for (const std::string& key : keys) {
        if (!values_.contains(key)) return false;
      }
      return true;
    });
    if (all) return Status::Ok();
    std::vector<std::string> missing;
    for (const std::string& key : keys) {
      if (!values_.contains(key)) missing.push_back(key);
    }
    return internal::WaitTimedOut(kAddress, timeout, missing);
  }

  Result<bool> Delete(const std::string& key) override {
    CHORUS_RETURN_IF_ERROR(InStore(kAddress, internal::CheckKey("delete", key)));
    std::lock_guard lock(mu_);
    return values_.erase(key) > 0;
  }

  std::string address() const override { return kAddress; }

 private:
  std::mutex mu_;
  std::condition_variable changed_;
  std::unordered_map<std::string, std::string> values_;
};

}  // namespace

std::shared_ptr<Store> MakeHashStore() { return std::make_shared<HashStore>(); }

}  // namespace chorus
