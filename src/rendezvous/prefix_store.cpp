// PrefixStore: gives each communicator its own namespace ("chorus/comm3/" + key) in a shared
// store.
//
// It only rewrites keys and forwards; all waiting, locking and error wording stay in the base
// store. Errors therefore name the full key ("store tcp://...: waited 30 s for key
// chorus/comm3/join/2"), which is what an operator will find when inspecting the base store,
// and address() is the base's, since that is where the data lives.
#include <utility>

#include "rendezvous/store_internal.h"

namespace chorus {
namespace {

class PrefixStore final : public Store {
 public:
  PrefixStore(std::shared_ptr<Store> base, std::string prefix)
      : base_(std::move(base)), prefix_(std::move(prefix)) {}

  Status Set(const std::string& key, const std::string& value) override {
    CHORUS_RETURN_IF_ERROR(CheckNotEmpty("set", key));
    return base_->Set(prefix_ + key, value);
  }
  Result<std::string> Get(const std::string& key, std::chrono::milliseconds timeout) override {
    CHORUS_RETURN_IF_ERROR(CheckNotEmpty("get", key));
    return base_->Get(prefix_ + key, timeout);
  }
  Result<int64_t> Add(const std::string& key, int64_t delta) override {
    CHORUS_RETURN_IF_ERROR(CheckNotEmpty("add", key));
    return base_->Add(prefix_ + key, delta);
  }
  Status Wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override {
    std::vector<std::string> full;
    full.reserve(keys.size());
    for (const std::string& key : keys) {
      CHORUS_RETURN_IF_ERROR(CheckNotEmpty("wait", key));
      full.push_back(prefix_ + key);
    }
    return base_->Wait(full, timeout);
  }
  Result<bool> Delete(const std::string& key) override {
    CHORUS_RETURN_IF_ERROR(CheckNotEmpty("delete", key));
    return base_->Delete(prefix_ + key);
  }
  std::string address() const override { return base_->address(); }

 private:
  // The prefix would turn "" into a valid key; reject it as every other store does. The length
  // limit applies to the full key and is left to the base.
  Status CheckNotEmpty(std::string_view op, const std::string& key) const {
    if (!key.empty()) return Status::Ok();
    return internal::InStore(address(), internal::CheckKey(op, key));
  }

  const std::shared_ptr<Store> base_;
  const std::string prefix_;
};

}  // namespace

std::shared_ptr<Store> MakePrefixStore(std::shared_ptr<Store> base, std::string prefix) {
  return std::make_shared<PrefixStore>(std::move(base), std::move(prefix));
}

}  // namespace chorus
