// Tests of the pure parts of `chorus launch` (tools/chorus/launch/plan.h and line_splitter.h),
// without starting a job: the --hosts list and its errors, where ranks land on the hosts' slots,
// the -x exports and the flag checks with their exact messages, shell quoting (exact strings,
// and once read back by a real sh), word splitting, the argv of a rank started through the
// agent, and how a rank's output is cut into prefixed lines. launch_test runs the whole launcher.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "launch/line_splitter.h"
#include "launch/plan.h"

namespace chorus::cli::launch {
namespace {

using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::IsEmpty;
using ::testing::Not;

// Sets (or unsets) one environment variable for the test's lifetime, then restores it.
class ScopedVar {
 public:
  ScopedVar(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value != nullptr) {
      ::setenv(name, value, 1);
    } else {
      ::unsetenv(name);
    }
  }
  ~ScopedVar() {
    if (old_) {
      ::setenv(name_.c_str(), old_->c_str(), 1);
    } else {
      ::unsetenv(name_.c_str());
    }
  }
  ScopedVar(const ScopedVar&) = delete;
  ScopedVar& operator=(const ScopedVar&) = delete;

 private:
  std::string name_;
  std::optional<std::string> old_;
};

// The message of a failed ParseHosts, or "ok".
std::string HostsError(std::string_view text) {
  Result<std::vector<HostSlots>> hosts = ParseHosts(text);
  if (hosts.ok()) return "ok";
  EXPECT_EQ(hosts.status().code(), StatusCode::kInvalidArgument);
  return hosts.status().message();
}

std::vector<std::pair<std::string, int>> Hosts(std::string_view text) {
  Result<std::vector<HostSlots>> hosts = ParseHosts(text);
  EXPECT_TRUE(hosts.ok()) << hosts.status();
  std::vector<std::pair<std::string, int>> out;
  if (hosts.ok()) {
    for (const HostSlots& host : *hosts) out.emplace_back(host.name, host.slots);
  }
  return out;
}

// ------------------------------------------------------------------ hosts

TEST(ParseHosts, NamesWithAndWithoutSlots) {
  EXPECT_THAT(Hosts("node1:2,node2,node3:4"), ElementsAre(std::pair<std::string, int>("node1", 2),
                                                          std::pair<std::string, int>("node2", 1),
                                                          std::pair<std::string, int>("node3", 4)));
  EXPECT_THAT(Hosts("a"), ElementsAre(std::pair<std::string, int>("a", 1)));
  EXPECT_THAT(Hosts("10.0.0.7:1024,host-b.example.org"),
              ElementsAre(std::pair<std::string, int>("10.0.0.7", 1024),
                          std::pair<std::string, int>("host-b.example.org", 1)));
}

TEST(ParseHosts, SlotCountMustBeAnIntegerInRange) {
  const std::string range = "\": the slot count must be an integer in [1, 1024]";
  EXPECT_EQ(HostsError("a:0"), "--hosts: \"a:0" + range);
  EXPECT_EQ(HostsError("a:1025"), "--hosts: \"a:1025" + range);
  EXPECT_EQ(HostsError("a:-1"), "--hosts: \"a:-1" + range);
  EXPECT_EQ(HostsError("a:"), "--hosts: \"a:" + range);
  EXPECT_EQ(HostsError("a:2x"), "--hosts: \"a:2x" + range);
  EXPECT_EQ(HostsError("a:99999999999999999999"), "--hosts: \"a:99999999999999999999" + range);
  // The entry quoted is the bad one, not the whole list.
  EXPECT_EQ(HostsError("a:1,b:x,c"), "--hosts: \"b:x" + range);
}

TEST(ParseHosts, NamesMustBePlain) {
  const std::string plain = "\" is not HOST or HOST:SLOTS with a plain host name";
  EXPECT_EQ(HostsError(""), "--hosts: \"" + plain);
  EXPECT_EQ(HostsError(":2"), "--hosts: \":2" + plain);
  EXPECT_EQ(HostsError("a,,b"), "--hosts: \"" + plain);
  EXPECT_EQ(HostsError("a,"), "--hosts: \"" + plain);
  // An option-like name would be taken for an option of the agent.
  EXPECT_EQ(HostsError("-oProxyCommand=x"), "--hosts: \"-oProxyCommand=x" + plain);
  for (const char* bad : {"a b", "a;b", "a$b", "a`b", "a'b", "a\"b", "a|b", "a&b", "a*", "a?",
                          "a[1]", "a{b}", "~a", "a#", "a\\b", "a<b", "a>b", "a(b)", "a\tb"}) {
    EXPECT_EQ(HostsError(bad), "--hosts: \"" + std::string(bad) + plain) << bad;
  }
}

TEST(ParseHosts, HostListedTwice) {
  EXPECT_EQ(HostsError("a:2,b,a:1"), "--hosts: a is listed twice");
  EXPECT_EQ(HostsError("a,a"), "--hosts: a is listed twice");
}

// ------------------------------------------------------------------ placement

struct Where {
  int host;
  int local_rank;
  int local_size;
  friend bool operator==(const Where&, const Where&) = default;
};

std::vector<Where> Place(const std::vector<HostSlots>& hosts, int ranks) {
  std::vector<Where> out;
  for (const Placement& p : PlaceRanks(hosts, ranks)) {
    out.push_back({p.host, p.local_rank, p.local_size});
  }
  return out;
}

TEST(PlaceRanks, WithoutHostsEveryRankIsLocal) {
  EXPECT_THAT(Place({}, 3), ElementsAre(Where{-1, 0, 3}, Where{-1, 1, 3}, Where{-1, 2, 3}));
  EXPECT_THAT(Place({}, 1), ElementsAre(Where{-1, 0, 1}));
}

TEST(PlaceRanks, FillsTheSlotsInOrder) {
  const std::vector<HostSlots> hosts = {{"a", 2}, {"b", 2}};
  EXPECT_THAT(Place(hosts, 4),
              ElementsAre(Where{0, 0, 2}, Where{0, 1, 2}, Where{1, 0, 2}, Where{1, 1, 2}));
  // Fewer ranks than slots: the last host used gets only what is left, and its local size says
  // so; later hosts get nothing.
  EXPECT_THAT(Place(hosts, 3), ElementsAre(Where{0, 0, 2}, Where{0, 1, 2}, Where{1, 0, 1}));
  EXPECT_THAT(Place(hosts, 1), ElementsAre(Where{0, 0, 1}));
  EXPECT_THAT(
      Place({{"a", 1}, {"b", 3}, {"c", 1}}, 5),
      ElementsAre(Where{0, 0, 1}, Where{1, 0, 3}, Where{1, 1, 3}, Where{1, 2, 3}, Where{2, 0, 1}));
}

TEST(PlaceRanks, NeverPlacesMoreThanTheSlots) {
  // RunLaunch refuses such a job first; PlaceRanks itself stops at the last slot.
  EXPECT_THAT(Place({{"a", 1}, {"b", 1}}, 5), ElementsAre(Where{0, 0, 1}, Where{1, 0, 1}));
}

// ------------------------------------------------------------------ words and variables

TEST(ShellQuote, PlainWordsStayBare) {
  EXPECT_EQ(ShellQuote("abc"), "abc");
  EXPECT_EQ(ShellQuote("CHORUS_RANK=3"), "CHORUS_RANK=3");
  EXPECT_EQ(ShellQuote("/shared/bin/train-v2.1"), "/shared/bin/train-v2.1");
  EXPECT_EQ(ShellQuote("--epochs=3,4:user@host%1+"), "--epochs=3,4:user@host%1+");
}

TEST(ShellQuote, AnythingElseIsSingleQuoted) {
  EXPECT_EQ(ShellQuote(""), "''");
  EXPECT_EQ(ShellQuote("a b"), "'a b'");
  EXPECT_EQ(ShellQuote("$HOME"), "'$HOME'");
  EXPECT_EQ(ShellQuote("~"), "'~'");
  EXPECT_EQ(ShellQuote("*.txt"), "'*.txt'");
  EXPECT_EQ(ShellQuote("a\"b"), "'a\"b'");
  EXPECT_EQ(ShellQuote("a\\b"), "'a\\b'");
  EXPECT_EQ(ShellQuote("line1\nline2"), "'line1\nline2'");
  // A single quote closes the quoting, is escaped, and reopens it.
  EXPECT_EQ(ShellQuote("it's"), "'it'\\''s'");
  EXPECT_EQ(ShellQuote("'"), "''\\'''");
}

TEST(ShellQuote, ShReadsTheWordsBack) {
  const std::vector<std::string> words = {
      "plain", "",  "a b", "it's",      "'",         "$HOME",      "`id`", "$(id)", "\"q\"", "a\\b",
      "*",     "~", "#x",  "tab\there", "new\nline", "semi;colon", "&&",   "|",     "<>"};
  std::string command = "printf '%s\\0'";
  for (const std::string& word : words) command += " " + ShellQuote(word);
  FILE* sh = ::popen(command.c_str(), "r");
  ASSERT_NE(sh, nullptr);
  std::string output;
  char buffer[4096];
  for (size_t n; (n = std::fread(buffer, 1, sizeof buffer, sh)) > 0;) output.append(buffer, n);
  ASSERT_EQ(::pclose(sh), 0);
  std::vector<std::string> read_back;
  for (size_t start = 0; start < output.size();) {
    size_t end = output.find('\0', start);
    ASSERT_NE(end, std::string::npos);
    read_back.push_back(output.substr(start, end - start));
    start = end + 1;
  }
  EXPECT_EQ(read_back, words);
}

TEST(SplitWords, SplitsAtWhitespace) {
  EXPECT_THAT(SplitWords("ssh -p 2222"), ElementsAre("ssh", "-p", "2222"));
  EXPECT_THAT(SplitWords("  ssh\t-x \n -q  "), ElementsAre("ssh", "-x", "-q"));
  EXPECT_THAT(SplitWords("ssh"), ElementsAre("ssh"));
  EXPECT_THAT(SplitWords(""), IsEmpty());
  EXPECT_THAT(SplitWords(" \t\n"), IsEmpty());
  // No quoting: quotes are part of the words.
  EXPECT_THAT(SplitWords("ssh -o 'A B'"), ElementsAre("ssh", "-o", "'A", "B'"));
}

TEST(Variables, Names) {
  EXPECT_TRUE(IsVariableName("A"));
  EXPECT_TRUE(IsVariableName("_x1"));
  EXPECT_TRUE(IsVariableName("OMP_NUM_THREADS"));
  EXPECT_FALSE(IsVariableName(""));
  EXPECT_FALSE(IsVariableName("1A"));
  EXPECT_FALSE(IsVariableName("A-B"));
  EXPECT_FALSE(IsVariableName("A=B"));
  EXPECT_FALSE(IsVariableName("A B"));
  for (const char* name : kRankVariables) EXPECT_TRUE(IsRankVariable(name)) << name;
  EXPECT_FALSE(IsRankVariable("CHORUS_SECRET"));
  EXPECT_FALSE(IsRankVariable("CHORUS_RANKS"));
  EXPECT_FALSE(IsRankVariable("chorus_rank"));
}

TEST(ResolveExports, ValuesGivenOrTakenFromTheLauncher) {
  ScopedVar foo("CHORUS_PLAN_TEST_FOO", "from here");
  Result<std::vector<std::string>> exports =
      ResolveExports({"A=1", "B=", "C=x=y", "CHORUS_PLAN_TEST_FOO", "CHORUS_TRANSPORT=tcp"});
  ASSERT_TRUE(exports.ok()) << exports.status();
  EXPECT_THAT(*exports, ElementsAre("A=1", "B=", "C=x=y", "CHORUS_PLAN_TEST_FOO=from here",
                                    "CHORUS_TRANSPORT=tcp"));
  Result<std::vector<std::string>> none = ResolveExports({});
  ASSERT_TRUE(none.ok());
  EXPECT_THAT(*none, IsEmpty());
}

TEST(ResolveExports, Errors) {
  ScopedVar unset("CHORUS_PLAN_TEST_UNSET", nullptr);
  auto error = [](const std::string& entry) {
    Result<std::vector<std::string>> exports = ResolveExports({"OK=1", entry});
    EXPECT_FALSE(exports.ok()) << entry;
    if (exports.ok()) return std::string("ok");
    EXPECT_EQ(exports.status().code(), StatusCode::kInvalidArgument);
    return exports.status().message();
  };
  EXPECT_EQ(error("1X=2"), "-x 1X=2: want NAME or NAME=VALUE");
  EXPECT_EQ(error("=x"), "-x =x: want NAME or NAME=VALUE");
  EXPECT_EQ(error(""), "-x : want NAME or NAME=VALUE");
  EXPECT_EQ(error("A-B=1"), "-x A-B=1: want NAME or NAME=VALUE");
  EXPECT_EQ(error("CHORUS_RANK=1"), "-x CHORUS_RANK: the launcher sets it for every rank");
  EXPECT_EQ(error("CHORUS_STORE"), "-x CHORUS_STORE: the launcher sets it for every rank");
  EXPECT_EQ(error("CHORUS_SECRET=x"),
            "-x CHORUS_SECRET: an argv would show it; set it in the launcher's environment, "
            "which hands it to the ranks privately");
  EXPECT_EQ(error("CHORUS_PLAN_TEST_UNSET"), "-x CHORUS_PLAN_TEST_UNSET: not set here");
}

// ------------------------------------------------------------------ the command

TEST(CheckFlags, Messages) {
  LaunchFlags flags;
  EXPECT_EQ(CheckFlags(flags, 1), std::nullopt);
  EXPECT_EQ(CheckFlags(flags, kMaxRanks), std::nullopt);
  EXPECT_EQ(CheckFlags(flags, 0), "-n must be between 1 and 1024 (got 0)");
  EXPECT_EQ(CheckFlags(flags, 1025), "-n must be between 1 and 1024 (got 1025)");
  EXPECT_EQ(CheckFlags(flags, -3), "-n must be between 1 and 1024 (got -3)");
  flags.timeout_ms = -1;
  EXPECT_EQ(CheckFlags(flags, 2), "--timeout-ms must be >= 0 (0: no deadline)");
  // The rank count is checked first.
  EXPECT_EQ(CheckFlags(flags, 0), "-n must be between 1 and 1024 (got 0)");
  flags.timeout_ms = 0;
  flags.grace_ms = -1;
  EXPECT_EQ(CheckFlags(flags, 2), "--grace-ms must be >= 0");
  flags.grace_ms = 0;
  flags.rsh = "ssh -p 2222";
  EXPECT_EQ(CheckFlags(flags, 2), "--rsh needs --hosts");
  flags.hosts = "a:2";
  EXPECT_EQ(CheckFlags(flags, 2), std::nullopt);
}

TEST(ForwardedVariables, ChorusVariablesButTheRanksAndTheSecret) {
  ScopedVar transport("CHORUS_PLAN_TEST_FORWARDED", "x y");
  ScopedVar rank("CHORUS_RANK", "5");
  ScopedVar secret("CHORUS_SECRET", "hush");
  ScopedVar other("PLAN_TEST_NOT_CHORUS", "1");
  const std::vector<std::string> forwarded = ForwardedVariables();
  EXPECT_THAT(forwarded, Contains("CHORUS_PLAN_TEST_FORWARDED=x y"));
  EXPECT_THAT(forwarded, Not(Contains("CHORUS_RANK=5")));
  EXPECT_THAT(forwarded, Not(Contains("CHORUS_SECRET=hush")));
  EXPECT_THAT(forwarded, Not(Contains("PLAN_TEST_NOT_CHORUS=1")));
  for (const std::string& kv : forwarded) EXPECT_EQ(kv.rfind("CHORUS_", 0), 0u) << kv;
}

TEST(RemoteCommand, SecretOnStdin) {
  const std::string secret = "s3cret";
  RankCommand command = RemoteCommand({"ssh", "-p", "2222"}, "node1", {"CHORUS_RANK=0", "X=a b"},
                                      {"/shared/train", "it's", "--epochs", "3"}, &secret);
  EXPECT_THAT(command.args, ElementsAre("ssh", "-p", "2222", "node1", "sh", "-c",
                                        std::string("'") + kReadSecretScript + "'", "chorus-rank",
                                        "env", "CHORUS_RANK=0", "'X=a b'", "/shared/train",
                                        "'it'\\''s'", "--epochs", "3"));
  EXPECT_EQ(command.stdin_line, "s3cret\n");
  EXPECT_THAT(command.env, IsEmpty());
  EXPECT_EQ(command.cpu, -1);
}

TEST(RemoteCommand, NoSecretToPass) {
  RankCommand command = RemoteCommand({"ssh"}, "b", {"CHORUS_RANK=1"}, {"prog"}, nullptr);
  EXPECT_THAT(command.args, ElementsAre("ssh", "b", "env", "CHORUS_RANK=1", "prog"));
  EXPECT_EQ(command.stdin_line, "");
  EXPECT_THAT(command.env, IsEmpty());
}

// ------------------------------------------------------------------ output lines

// Feeds `chunks` one after another, then ends the stream; returns every piece of output in
// order: what each Feed produced, then what Finish produced.
std::vector<std::string> Split(const std::string& prefix, const std::vector<std::string>& chunks) {
  LineSplitter lines(prefix);
  std::vector<std::string> out;
  for (const std::string& chunk : chunks) {
    std::string piece;
    lines.Feed(chunk, piece);
    out.push_back(piece);
  }
  std::string tail;
  lines.Finish(tail);
  out.push_back(tail);
  return out;
}

TEST(LineSplitter, WholeLinesBehindThePrefix) {
  EXPECT_THAT(Split("[0] ", {"a\nb\n"}), ElementsAre("[0] a\n[0] b\n", ""));
  EXPECT_THAT(Split("[12] ", {"one\n", "two\n"}), ElementsAre("[12] one\n", "[12] two\n", ""));
  EXPECT_THAT(Split("", {"a\nb\n"}), ElementsAre("a\nb\n", ""));
  // An empty line is a line too.
  EXPECT_THAT(Split("[0] ", {"\n\nx\n"}), ElementsAre("[0] \n[0] \n[0] x\n", ""));
  // Only '\n' ends a line.
  EXPECT_THAT(Split("[0] ", {"a\r\nb\rc\n"}), ElementsAre("[0] a\r\n[0] b\rc\n", ""));
  EXPECT_THAT(Split("[0] ", {""}), ElementsAre("", ""));
  EXPECT_THAT(Split("[0] ", {}), ElementsAre(""));
}

TEST(LineSplitter, PartialLinesWaitForTheirEnd) {
  EXPECT_THAT(Split("[1] ", {"ab", "c", "d\ne", "f\n"}),
              ElementsAre("", "", "[1] abcd\n", "[1] ef\n", ""));
  EXPECT_THAT(Split("[1] ", {"x\npart", "ial\nlast"}),
              ElementsAre("[1] x\n", "[1] partial\n", "[1] last\n"));
}

TEST(LineSplitter, FinishEndsAnUnterminatedLine) {
  EXPECT_THAT(Split("[0] ", {"no newline"}), ElementsAre("", "[0] no newline\n"));
  LineSplitter lines("[0] ");
  std::string out;
  lines.Finish(out);
  EXPECT_EQ(out, "");
  lines.Feed("x", out);
  lines.Finish(out);
  lines.Finish(out);  // nothing left the second time
  EXPECT_EQ(out, "[0] x\n");
}

TEST(LineSplitter, LongLinesComeOutInPieces) {
  const std::string x(kMaxLineBytes - 1, 'x');
  // One byte short of the limit waits; reaching it emits the piece as a line of its own.
  EXPECT_THAT(Split("[0] ", {x, "y", "z\n"}), ElementsAre("", "[0] " + x + "y\n", "[0] z\n", ""));
  // The cut happens at the end of the chunk that reaches the limit, not at the limit itself.
  const std::string big(2 * kMaxLineBytes + 5, 'b');
  EXPECT_THAT(Split("[0] ", {big}), ElementsAre("[0] " + big + "\n", ""));
  EXPECT_THAT(Split("[0] ", {x, "yy"}), ElementsAre("", "[0] " + x + "yy\n", ""));
  // A line past the limit that ends in the same chunk is one line; the rest waits.
  const std::string long_line(kMaxLineBytes + 10, 'l');
  EXPECT_THAT(Split("[0] ", {long_line + "\nab"}),
              ElementsAre("[0] " + long_line + "\n", "[0] ab\n"));
}

}  // namespace
}  // namespace chorus::cli::launch
