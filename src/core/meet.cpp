// The meeting of a communicator's ranks in a store (see meet.h).
#include "core/meet.h"

#include <signal.h>
#include <sys/random.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <optional>
#include <sstream>

namespace chorus::internal {
namespace {

using WallClock = std::chrono::system_clock;

// A deadline that passed this long ago means its rank has given up, whatever the skew between
// the hosts' clocks.
constexpr int64_t kExpiryGraceMs = 2000;
// How often a waiting rank looks at the round's clash mark and the records that came.
constexpr std::chrono::milliseconds kPollEvery{100};
// How long a claimed seat may stay without its record (its holder died between the two).
constexpr std::chrono::milliseconds kRecordGrace{2000};

int64_t WallMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(WallClock::now().time_since_epoch())
      .count();
}

// A record whose rank has given up: past its deadline, withdrawn (expires_ms 0: its Create
// failed), or left by a process of this host that is gone.
bool Expired(const MemberRecord& r, const std::string& my_host) {
  if (r.expires_ms == 0 || WallMs() > r.expires_ms + kExpiryGraceMs) return true;
  return r.host == my_host && r.pid > 0 && kill(static_cast<pid_t>(r.pid), 0) != 0 &&
         errno == ESRCH;
}

std::string Key(int64_t round, const std::string& what) {
  return std::to_string(round) + "/" + what;
}
std::string Key(int64_t round, const char* what, int rank) {
  return Key(round, std::string(what) + "/" + std::to_string(rank));
}

// Whether `key` is set, without waiting for it.
Result<bool> Has(Store& store, const std::string& key) {
  const Status s = store.Wait({key}, std::chrono::milliseconds(1));
  if (s.ok()) return true;
  if (s.code() == StatusCode::kDeadlineExceeded) return false;
  return s;
}

std::string Who(const MemberRecord& r) {
  std::string text =
      "pid " + std::to_string(r.pid) + " on host " + r.host.substr(0, r.host.find('/'));
  if (!r.job.empty()) text += ", job " + r.job;
  return text + ", a " + std::to_string(r.size) + "-rank communicator";
}

std::string Seconds(std::chrono::milliseconds ms) {
  char text[32];
  std::snprintf(text, sizeof(text), "%g s", static_cast<double>(ms.count()) / 1000);
  return text;
}

class Meeter {
 public:
  Meeter(Store& store, const MeetRequest& r) : store_(store), r_(r) {}

  Result<Meeting> Run() {
    for (int64_t round = 1;; ++round) {
      if (Clock::now() >= r_.deadline) return Late({});
      auto clash = Has(store_, Key(round, "clash"));
      if (!clash.ok()) return clash.status();
      if (*clash) {
        auto why = store_.Get(Key(round, "clash"), Remaining(r_.deadline));
        if (why.ok()) earlier_clash_ = *why;
        continue;
      }
      auto done = Has(store_, Key(round, "done"));
      if (!done.ok()) return done.status();
      if (*done) continue;
      auto dead = Has(store_, Key(round, "withdrawn"));
      if (!dead.ok()) return dead.status();
      if (*dead) {
        // A disagreement marks the round clashed, then withdrawn: keep its reason if the first
        // look came before it.
        auto late = Has(store_, Key(round, "clash"));
        if (late.ok() && *late) {
          auto why = store_.Get(Key(round, "clash"), Remaining(r_.deadline));
          if (why.ok()) earlier_clash_ = *why;
        }
        continue;
      }
      auto seat = store_.Add(Key(round, "claims", r_.rank), 1);
      if (!seat.ok()) return seat.status();
      if (*seat == 1) {
        CHORUS_RETURN_IF_ERROR(store_.Set(Key(round, "join", r_.rank), r_.me.Encode()));
        std::optional<Meeting> met;
        if (Status s = Wait(round, &met); !s.ok()) {
          Withdraw(round);
          return s;
        }
        if (met) return std::move(*met);
        Withdraw(round);  // the round died under us: a member gave up; meet again in a later one
        continue;
      }
      auto taken = Taken(round);
      if (!taken.ok()) return taken.status();
      if (*taken) {
        // The seat is held by a live record in an open round: someone else is this rank.
        return Clash(round, held_by_);
      }
    }
  }

 private:
  // The seat is taken: true if that is a clash, false if the round is over (a meeting that
  // happened, or one that died) and the walk goes on.
  Result<bool> Taken(int64_t round) {
    auto holder = store_.Get(Key(round, "join", r_.rank), kRecordGrace);
    if (!holder.ok()) {
      if (holder.status().code() == StatusCode::kDeadlineExceeded) return false;  // died
      return holder.status();
    }
    if (!MemberRecord::Decode(*holder, &held_by_) || Expired(held_by_, r_.me.host)) return false;
    bool complete = true;
    for (int k = 0; k < r_.size; ++k) {
      auto present = Has(store_, Key(round, "join", k));
      if (!present.ok()) return present.status();
      if (!*present) {
        complete = false;
        continue;
      }
      auto text = store_.Get(Key(round, "join", k), Remaining(r_.deadline));
      if (!text.ok()) return text.status();
      MemberRecord other;
      if (!MemberRecord::Decode(*text, &other) || Expired(other, r_.me.host))
        return false;  // dead round
    }
    return !complete;
  }

  Status Clash(int64_t round, const MemberRecord& other) {
    const std::string what = "another process (" + Who(other) + ") is joining communicator \"" +
                             r_.name + "\" as rank " + std::to_string(r_.rank) + " on store " +
                             r_.store_address +
                             " right now: two jobs share this store and name, or two processes "
                             "were given rank " +
                             std::to_string(r_.rank) +
                             ". Give each job its own CHORUS_JOB_ID (CommOptions::job_id) or "
                             "communicator name";
    MarkClash(round,
              "rank " + std::to_string(r_.rank) + " (" + Who(r_.me) + ") met a clash: " + what);
    return FailedPrecondition("Create: " + what);
  }

  // This rank gives up its seat: the round is dead for everyone who looks at it later, and for
  // those waiting in it, who read its record when it came and look for this mark instead.
  void Withdraw(int64_t round) {
    MemberRecord gone = r_.me;
    gone.expires_ms = 0;
    store_.Set(Key(round, "join", r_.rank), gone.Encode()).IgnoreError();  // best effort
    store_.Set(Key(round, "withdrawn"), std::to_string(r_.rank)).IgnoreError();
  }

  void MarkClash(int64_t round, const std::string& why) {
    store_.Set(Key(round, "clash"), why).IgnoreError();  // best effort: this rank fails anyway
  }

  // Waits in `round`, where this rank holds its seat, until every rank has come (*met is set),
  // the round dies (*met stays empty) or something fails.
  Status Wait(int64_t round, std::optional<Meeting>* met) {
    std::vector<std::string> keys;
    for (int k = 0; k < r_.size; ++k) keys.push_back(Key(round, "join", k));
    std::vector<std::optional<MemberRecord>> seen(static_cast<size_t>(r_.size));
    for (;;) {
      const auto slice = std::min<std::chrono::milliseconds>(kPollEvery, Remaining(r_.deadline));
      const Status all = store_.Wait(keys, slice);
      if (!all.ok() && all.code() != StatusCode::kDeadlineExceeded) return all;
      // A round marked clashed fails every rank waiting in it, with the reason.
      const auto clashed = [&]() -> Result<bool> {
        auto clash = Has(store_, Key(round, "clash"));
        if (!clash.ok()) return clash.status();
        if (!*clash) return false;
        auto why = store_.Get(Key(round, "clash"), Remaining(r_.deadline));
        return FailedPrecondition("Create: the meeting of communicator \"" + r_.name +
                                  "\" on store " + r_.store_address +
                                  " failed: " + (why.ok() ? *why : std::string("a clash")));
      };
      if (auto clash = clashed(); !clash.ok() || *clash) return clash.status();
      bool dead = false;
      for (int k = 0; k < r_.size; ++k) {
        auto& record = seen[static_cast<size_t>(k)];
        if (!record) {
          auto present = Has(store_, keys[static_cast<size_t>(k)]);
          if (!present.ok()) return present.status();
          if (!*present) continue;
          auto text = store_.Get(keys[static_cast<size_t>(k)], Remaining(r_.deadline));
          if (!text.ok()) return text.status();
          MemberRecord decoded;
          if (!MemberRecord::Decode(*text, &decoded)) {
            return Disagree(round, "rank " + std::to_string(k) +
                                       " wrote a record this version of chorus cannot read");
          }
          record = std::move(decoded);
        }
        if (k == r_.rank) continue;
        if (record->size != r_.size) {
          return Disagree(round, "rank " + std::to_string(k) + " (" + Who(*record) +
                                     ") joined with size " + std::to_string(record->size) +
                                     " where rank " + std::to_string(r_.rank) + " has size " +
                                     std::to_string(r_.size) +
                                     ": two jobs share this store and name, or the ranks "
                                     "disagree on the size");
        }
        if (record->settings != r_.me.settings) {
          return Disagree(round, "the ranks disagree on their options: rank " + std::to_string(k) +
                                     " has " + record->settings + ", rank " +
                                     std::to_string(r_.rank) + " has " + r_.me.settings);
        }
        dead = dead || Expired(*record, r_.me.host);
      }
      // Every record has come and agrees: before meeting, see that no member gave up since its
      // record was read (records are read once; one that gave up marked the round). Looked at
      // only then, since a look for a key that is absent costs the TCP store a connection. A
      // member that found a disagreement marked the round clashed before it withdrew: its
      // reason, not a later round's deadline, is the answer.
      if (!dead && all.ok()) {
        auto withdrawn = Has(store_, Key(round, "withdrawn"));
        if (!withdrawn.ok()) return withdrawn.status();
        if (*withdrawn) {
          if (auto clash = clashed(); !clash.ok() || *clash) return clash.status();
          dead = true;
        }
      }
      if (dead) return Status::Ok();  // a member gave up: meet again in a later round
      if (all.ok()) {
        Meeting m{round, {}};
        for (auto& record : seen) m.members.push_back(std::move(*record));
        // A hint that lets later meetings skip this round (Taken would find it complete anyway):
        // failing to write it must not withdraw rank 0 from a round the others met in.
        if (r_.rank == 0) store_.Set(Key(round, "done"), "1").IgnoreError();
        *met = std::move(m);
        return Status::Ok();
      }
      if (Clock::now() >= r_.deadline) {
        std::vector<int> missing;
        for (int k = 0; k < r_.size; ++k) {
          if (!seen[static_cast<size_t>(k)]) missing.push_back(k);
        }
        return Late(missing);
      }
    }
  }

  Status Disagree(int64_t round, const std::string& what) {
    MarkClash(round, what);
    return FailedPrecondition("Create: " + what);
  }

  Status Late(const std::vector<int>& missing) {
    std::string list;
    for (int k : missing) list += (list.empty() ? "" : ", ") + std::to_string(k);
    std::string text = "Create: waited " + Seconds(r_.timeout) + " for " +
                       (missing.size() == 1 ? "rank " : "ranks ") + list + " to join store " +
                       r_.store_address;
    if (missing.empty())
      text = "Create: waited " + Seconds(r_.timeout) + " to join store " + r_.store_address;
    if (!earlier_clash_.empty()) {
      text += " (an earlier meeting of communicator \"" + r_.name +
              "\" there failed: " + earlier_clash_ + ")";
    }
    return DeadlineExceeded(text);
  }

  Store& store_;
  const MeetRequest& r_;
  MemberRecord held_by_;
  std::string earlier_clash_;
};

}  // namespace

std::string MemberRecord::Encode() const {
  std::ostringstream out;
  out << "token=" << token << "\nhost=" << host << "\npid=" << pid << "\nsize=" << size
      << "\njob=" << job << "\nexpires_ms=" << expires_ms << "\ncpus=" << cpus
      << "\nsettings=" << settings << "\ncaps=" << caps << "\n";
  return out.str();
}

bool MemberRecord::Decode(const std::string& text, MemberRecord* out) {
  auto number = [](const std::string& value, auto* to) {
    const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), *to);
    return ec == std::errc() && end == value.data() + value.size();
  };
  MemberRecord r;
  int fields = 0;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    const size_t eq = line.find('=');
    if (eq == std::string::npos) return false;
    const std::string key = line.substr(0, eq);
    const std::string value = line.substr(eq + 1);
    bool ok = true;
    if (key == "token") {
      r.token = value;
    } else if (key == "host") {
      r.host = value;
    } else if (key == "pid") {
      ok = number(value, &r.pid);
    } else if (key == "size") {
      ok = number(value, &r.size);
    } else if (key == "job") {
      r.job = value;
    } else if (key == "expires_ms") {
      ok = number(value, &r.expires_ms);
    } else if (key == "cpus") {
      ok = number(value, &r.cpus);
    } else if (key == "settings") {
      r.settings = value;
    } else if (key == "caps") {
      r.caps = value;
      continue;  // optional
    } else {
      continue;  // a field of a newer version: not ours to judge
    }
    if (!ok) return false;
    ++fields;
  }
  if (fields != 8) return false;
  *out = std::move(r);
  return true;
}

int MemberRecord::BoundCpu() const {
  const std::string words = " " + caps + " ";
  const size_t at = words.find(" cpu=");
  if (at == std::string::npos) return -1;
  int cpu = -1;
  const char* first = words.data() + at + 5;
  const auto [end, error] = std::from_chars(first, words.data() + words.size(), cpu);
  return error == std::errc() && end != first && *end == ' ' && cpu >= 0 ? cpu : -1;
}

int OwnCpu(const std::vector<MemberRecord>& members, int rank) {
  const MemberRecord& me = members[static_cast<size_t>(rank)];
  const int mine = me.BoundCpu();
  if (mine < 0) return -1;
  int sharing = 0;
  for (const MemberRecord& m : members) {
    if (m.host != me.host) continue;
    const int cpu = m.BoundCpu();
    if (cpu < 0) return -1;
    sharing += cpu == mine ? 1 : 0;
  }
  return sharing == 1 ? mine : -1;
}

int JobCores(const std::vector<MemberRecord>& members) {
  struct Host {
    const std::string* name;
    std::vector<int> bound;  // distinct CPUs its bound ranks are bound to
    int unbound_cpus;        // fewest CPUs an unbound rank may run on; 0: none unbound
  };
  std::vector<Host> hosts;
  for (const MemberRecord& m : members) {
    auto it =
        std::find_if(hosts.begin(), hosts.end(), [&](const Host& h) { return *h.name == m.host; });
    if (it == hosts.end()) it = hosts.insert(hosts.end(), Host{&m.host, {}, 0});
    const int cpu = m.BoundCpu();
    if (cpu >= 0) {
      if (std::find(it->bound.begin(), it->bound.end(), cpu) == it->bound.end()) {
        it->bound.push_back(cpu);
      }
    } else {
      it->unbound_cpus = it->unbound_cpus == 0 ? m.cpus : std::min(it->unbound_cpus, m.cpus);
    }
  }
  int cores = 0;
  for (const Host& h : hosts) {
    cores += std::max({1, static_cast<int>(h.bound.size()), h.unbound_cpus});
  }
  return cores;
}

std::string NewToken() {
  uint64_t bits[2] = {};
  if (getrandom(bits, sizeof(bits), 0) != sizeof(bits)) {
    bits[0] ^= static_cast<uint64_t>(Clock::now().time_since_epoch().count());
  }
  char text[40];
  std::snprintf(text, sizeof(text), "%016llx%016llx", static_cast<unsigned long long>(bits[0]),
                static_cast<unsigned long long>(bits[1]));
  return text;
}

Result<Meeting> Meet(Store& store, const MeetRequest& request) {
  return Meeter(store, request).Run();
}

}  // namespace chorus::internal
