// plan.cpp: the pure parts of `chorus launch` (plan.h): host lists, placement, exports, quoting
// and the argv of a rank started through the agent.
#include "launch/plan.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <functional>
#include <set>
#include <sstream>
#include <utility>

extern char** environ;  // NOLINT: ForwardedVariables reads the launcher's environment

namespace chorus::cli::launch {

Result<std::vector<HostSlots>> ParseHosts(std::string_view text) {
  std::vector<HostSlots> hosts;
  std::set<std::string, std::less<>> seen;
  while (true) {
    size_t comma = text.find(',');
    std::string_view entry = text.substr(0, comma);
    HostSlots host;
    size_t colon = entry.rfind(':');
    host.name = std::string(entry.substr(0, colon));
    if (colon != std::string_view::npos) {
      std::string count(entry.substr(colon + 1));
      char* end = nullptr;
      errno = 0;
      long slots = std::strtol(count.c_str(), &end, 10);
      if (count.empty() || *end != '\0' || errno != 0 || slots < 1 || slots > kMaxRanks) {
        return InvalidArgument("--hosts: \"" + std::string(entry) +
                               "\": the slot count must be an integer in [1, " +
                               std::to_string(kMaxRanks) + "]");
      }
      host.slots = static_cast<int>(slots);
    }
    // The name becomes an argument of the agent: one that looks like an option would be taken
    // for one.
    if (host.name.empty() || host.name[0] == '-' ||
        host.name.find_first_of(" \t\n\r\"'\\;&|<>()$`*?[]{}~#") != std::string::npos) {
      return InvalidArgument("--hosts: \"" + std::string(entry) +
                             "\" is not HOST or HOST:SLOTS with a plain host name");
    }
    if (!seen.insert(host.name).second) {
      return InvalidArgument("--hosts: " + host.name + " is listed twice");
    }
    hosts.push_back(std::move(host));
    if (comma == std::string_view::npos) break;
    text.remove_prefix(comma + 1);
  }
  return hosts;
}

std::vector<Placement> PlaceRanks(const std::vector<HostSlots>& hosts, int ranks) {
  std::vector<Placement> placement;
  if (hosts.empty()) {
    for (int r = 0; r < ranks; ++r) placement.push_back({-1, r, ranks});
    return placement;
  }
  for (size_t h = 0; h < hosts.size() && static_cast<int>(placement.size()) < ranks; ++h) {
    const int here = std::min(hosts[h].slots, ranks - static_cast<int>(placement.size()));
    for (int local = 0; local < here; ++local) {
      placement.push_back({static_cast<int>(h), local, here});
    }
  }
  return placement;
}

std::string ShellQuote(std::string_view word) {
  constexpr std::string_view kPlain =
      "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-+=.,/:@%";
  if (!word.empty() && word.find_first_not_of(kPlain) == std::string_view::npos) {
    return std::string(word);
  }
  std::string quoted = "'";
  for (char c : word) {
    if (c == '\'') {
      quoted += "'\\''";
    } else {
      quoted += c;
    }
  }
  return quoted + "'";
}

std::vector<std::string> SplitWords(const std::string& text) {
  std::istringstream in(text);
  std::vector<std::string> words;
  for (std::string w; in >> w;) words.push_back(w);
  return words;
}

bool IsVariableName(std::string_view name) {
  if (name.empty() || (std::isdigit(static_cast<unsigned char>(name[0])) != 0)) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_';
  });
}

bool IsRankVariable(std::string_view name) {
  return std::find(kRankVariables.begin(), kRankVariables.end(), name) != kRankVariables.end();
}

Result<std::vector<std::string>> ResolveExports(const std::vector<std::string>& exports) {
  std::vector<std::string> resolved;
  for (const std::string& entry : exports) {
    const size_t eq = entry.find('=');
    const std::string name = entry.substr(0, eq);
    if (!IsVariableName(name)) {
      return InvalidArgument("-x " + entry + ": want NAME or NAME=VALUE");
    }
    if (IsRankVariable(name)) {
      return InvalidArgument("-x " + name + ": the launcher sets it for every rank");
    }
    if (name == "CHORUS_SECRET") {
      return InvalidArgument(
          "-x CHORUS_SECRET: an argv would show it; set it in the "
          "launcher's environment, which hands it to the ranks privately");
    }
    if (eq != std::string::npos) {
      resolved.push_back(entry);
      continue;
    }
    const char* value = std::getenv(name.c_str());
    if (value == nullptr) return InvalidArgument("-x " + name + ": not set here");
    resolved.push_back(name + "=" + value);
  }
  return resolved;
}

std::optional<std::string> CheckFlags(const LaunchFlags& flags, int ranks) {
  if (ranks < 1 || ranks > kMaxRanks) {
    return "-n must be between 1 and " + std::to_string(kMaxRanks) + " (got " +
           std::to_string(ranks) + ")";
  }
  if (flags.timeout_ms < 0) return "--timeout-ms must be >= 0 (0: no deadline)";
  if (flags.grace_ms < 0) return "--grace-ms must be >= 0";
  if (flags.hosts.empty() && !flags.rsh.empty()) return "--rsh needs --hosts";
  return std::nullopt;
}

std::vector<std::string> ForwardedVariables() {
  std::vector<std::string> forwarded;
  for (char** entry = environ; *entry != nullptr; ++entry) {
    std::string_view kv(*entry);
    std::string_view name = kv.substr(0, kv.find('='));
    if (name.rfind("CHORUS_", 0) != 0 || IsRankVariable(name) || name == "CHORUS_SECRET") continue;
    forwarded.emplace_back(kv);
  }
  return forwarded;
}

RankCommand RemoteCommand(const std::vector<std::string>& agent, const std::string& host,
                          const std::vector<std::string>& env, const std::vector<std::string>& prog,
                          const std::string* secret_on_stdin) {
  std::vector<std::string> words;
  if (secret_on_stdin != nullptr) words = {"sh", "-c", kReadSecretScript, "chorus-rank"};
  words.emplace_back("env");
  words.insert(words.end(), env.begin(), env.end());
  words.insert(words.end(), prog.begin(), prog.end());
  RankCommand command;
  command.args = agent;
  command.args.push_back(host);
  for (const std::string& word : words) command.args.push_back(ShellQuote(word));
  if (secret_on_stdin != nullptr) command.stdin_line = *secret_on_stdin + "\n";
  return command;
}

}  // namespace chorus::cli::launch
