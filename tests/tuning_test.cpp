// Tests for the tuning file (model/tuning.h): round trips, every kind of malformed line (with
// its line number in the error), partial files, the path's environment variables and the
// fall-back to the built-in defaults.
//
// Each test works in its own fresh directory under the test temp dir and restores the
// environment variables it touches.
#include "model/tuning.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "chorus/communicator.h"
#include "core/env.h"
#include "support/temp_dir.h"

namespace chorus::model {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

// Sets or unsets an environment variable for one scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value == nullptr) {
      ::unsetenv(name);
    } else {
      ::setenv(name, value, 1);
    }
  }
  ~ScopedEnv() {
    if (old_) {
      ::setenv(name_, old_->c_str(), 1);
    } else {
      ::unsetenv(name_);
    }
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  std::optional<std::string> old_;
};

class TuningTest : public ::testing::Test {
 protected:
  std::string Write(const std::string& name, const std::string& text) {
    const fs::path path = dir_ / name;
    std::ofstream(path) << text;
    return path.string();
  }
  // The error of loading `text`, or "" when it loads.
  std::string LoadError(const std::string& text) {
    Result<Tuning> t = LoadTuning(Write("t.conf", text));
    return t.ok() ? "" : t.status().message();
  }

  const chorus::testing::TempDir tmp_{"chorus-tuning-test"};
  const fs::path dir_ = tmp_.path();
};

void ExpectSameRates(const MachineParams& a, const MachineParams& b) {
  EXPECT_DOUBLE_EQ(a.alpha_s, b.alpha_s);
  EXPECT_DOUBLE_EQ(a.beta_s_per_byte, b.beta_s_per_byte);
  EXPECT_DOUBLE_EQ(a.gamma_s_per_byte, b.gamma_s_per_byte);
}

TEST_F(TuningTest, ParsesUnitsExactly) {
  Result<Tuning> t = LoadTuning(Write("t.conf",
                                      "# a comment\n"
                                      "\n"
                                      "   # indented comment\n"
                                      "thread alpha_us=0.5 beta_gbps=8 gamma_gbps=16\n"
                                      "shm\tgamma_gbps=2  alpha_us=0 beta_gbps=0.25\r\n"
                                      "tcp alpha_us=25 beta_gbps=1 gamma_gbps=4\n"));
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_DOUBLE_EQ(t->thread.alpha_s, 0.5e-6);
  EXPECT_DOUBLE_EQ(t->thread.beta_s_per_byte, 1.0 / 8e9);
  EXPECT_DOUBLE_EQ(t->thread.gamma_s_per_byte, 1.0 / 16e9);
  EXPECT_EQ(t->shm.alpha_s, 0);
  EXPECT_DOUBLE_EQ(t->shm.beta_s_per_byte, 4e-9);
  EXPECT_DOUBLE_EQ(t->shm.gamma_s_per_byte, 0.5e-9);
  EXPECT_DOUBLE_EQ(t->tcp.alpha_s, 25e-6);
  EXPECT_EQ(t->source, (dir_ / "t.conf").string());
  // MPI ranks use the tcp line, and kAuto the shm one.
  EXPECT_EQ(&t->For(TransportKind::kMpi), &t->tcp);
  EXPECT_EQ(&t->For(TransportKind::kAuto), &t->shm);
  EXPECT_EQ(&t->For(TransportKind::kThread), &t->thread);
}

TEST_F(TuningTest, RoundTrip) {
  Tuning original = DefaultTuning();
  original.thread = {
      .alpha_s = 1.234567e-6, .beta_s_per_byte = 1 / 9.87e9, .gamma_s_per_byte = 1e-10};
  original.shm = {.alpha_s = 0, .beta_s_per_byte = 1 / 3.3e9, .gamma_s_per_byte = 1 / 17.25e9};
  original.tcp = {.alpha_s = 47.9e-6, .beta_s_per_byte = 1 / 1.5e9, .gamma_s_per_byte = 1 / 9e9};
  const std::string path = (dir_ / "sub" / "dir" / "tuning.conf").string();  // dirs created
  ASSERT_TRUE(SaveTuning(path, original, "host test\nsecond line").ok());
  Result<Tuning> loaded = LoadTuning(path);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  ExpectSameRates(loaded->thread, original.thread);
  ExpectSameRates(loaded->shm, original.shm);
  ExpectSameRates(loaded->tcp, original.tcp);
  EXPECT_EQ(loaded->source, path);
  // The file's text is stable: saving what was loaded writes the same bytes.
  EXPECT_EQ(FormatTuning(*loaded, "host test\nsecond line"),
            FormatTuning(original, "host test\nsecond line"));
  std::ifstream in(path);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_THAT(text, HasSubstr("# host test\n# second line\n"));
  EXPECT_THAT(text, HasSubstr("\nshm alpha_us=0 beta_gbps=3.3 gamma_gbps=17.25\n"));
  EXPECT_FALSE(fs::exists(path + ".tmp"));
}

TEST_F(TuningTest, DefaultsRoundTrip) {
  const std::string path = (dir_ / "d.conf").string();
  ASSERT_TRUE(SaveTuning(path, DefaultTuning()).ok());
  Result<Tuning> loaded = LoadTuning(path);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  const Tuning defaults = DefaultTuning();
  EXPECT_EQ(defaults.source, "built-in defaults");
  ExpectSameRates(loaded->thread, defaults.thread);
  ExpectSameRates(loaded->shm, defaults.shm);
  ExpectSameRates(loaded->tcp, defaults.tcp);
}

// A transport without a line keeps its default; an empty file is all defaults.
TEST_F(TuningTest, PartialFileKeepsDefaults) {
  Result<Tuning> t = LoadTuning(Write("p.conf", "shm alpha_us=3 beta_gbps=2 gamma_gbps=1\n"));
  ASSERT_TRUE(t.ok()) << t.status();
  const Tuning defaults = DefaultTuning();
  ExpectSameRates(t->thread, defaults.thread);
  ExpectSameRates(t->tcp, defaults.tcp);
  EXPECT_DOUBLE_EQ(t->shm.alpha_s, 3e-6);
  Result<Tuning> empty = LoadTuning(Write("e.conf", ""));
  ASSERT_TRUE(empty.ok()) << empty.status();
  ExpectSameRates(empty->shm, defaults.shm);
}

TEST_F(TuningTest, MalformedLinesNameFileLineAndProblem) {
  const std::string good = "thread alpha_us=1 beta_gbps=2 gamma_gbps=3\n";
  const std::string file = (dir_ / "t.conf").string();
  struct Case {
    std::string line;
    std::string error;
  };
  const Case cases[] = {
      {"gpu alpha_us=1 beta_gbps=2 gamma_gbps=3",
       "unknown transport \"gpu\" (expected thread, shm or tcp)"},
      {"mpi alpha_us=1 beta_gbps=2 gamma_gbps=3", "unknown transport \"mpi\""},
      {"shm", "shm: missing alpha_us"},
      {"shm alpha_us=1 beta_gbps=2", "shm: missing gamma_gbps"},
      {"shm alpha_us=1 beta_gbps=2 gamma_gbps=3 delta=4", "shm: unknown key \"delta\""},
      {"shm alpha_us=1 alpha_us=2 beta_gbps=2 gamma_gbps=3", "shm: alpha_us given twice"},
      {"shm alpha_us 1 beta_gbps=2 gamma_gbps=3", "shm: expected key=value, got \"alpha_us\""},
      {"shm alpha_us=1 beta_gbps=fast gamma_gbps=3",
       "shm: beta_gbps: \"fast\" is not a positive number"},
      {"shm alpha_us=1 beta_gbps=0 gamma_gbps=3", "shm: beta_gbps: \"0\" is not a positive number"},
      {"shm alpha_us=1 beta_gbps=2 gamma_gbps=-3", "shm: gamma_gbps: \"-3\" is not a positive"},
      {"shm alpha_us=-1 beta_gbps=2 gamma_gbps=3", "shm: alpha_us: \"-1\" is not a number >= 0"},
      {"shm alpha_us=1x beta_gbps=2 gamma_gbps=3", "shm: alpha_us: \"1x\" is not"},
      {"shm alpha_us= beta_gbps=2 gamma_gbps=3", "shm: alpha_us: \"\" is not"},
      {"shm alpha_us=inf beta_gbps=2 gamma_gbps=3", "shm: alpha_us: \"inf\" is not"},
      {"shm alpha_us=nan beta_gbps=2 gamma_gbps=3", "shm: alpha_us: \"nan\" is not"},
      {"shm alpha_us=1 beta_gbps=1e999 gamma_gbps=3", "shm: beta_gbps: \"1e999\" is not"},
      {"thread alpha_us=1 beta_gbps=2 gamma_gbps=3", "thread given twice (first on line 3)"},
      {"THREAD alpha_us=1 beta_gbps=2 gamma_gbps=3", "unknown transport \"THREAD\""},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.line);
    // The bad line is line 4: a comment, a blank line and a good line come first.
    const std::string error = LoadError("# header\n\n" + good + c.line + "\n" + good);
    EXPECT_THAT(error, ::testing::StartsWith(file + ":4: " + c.error));
  }
}

TEST_F(TuningTest, UnreadableFileIsAnError) {
  Result<Tuning> missing = LoadTuning((dir_ / "absent.conf").string());
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(missing.status().message(), HasSubstr("absent.conf"));
  // A directory opens but cannot be read as a file.
  Result<Tuning> directory = LoadTuning(dir_.string());
  EXPECT_FALSE(directory.ok());
}

TEST_F(TuningTest, SaveReportsUnwritablePath) {
  const std::string blocker = Write("file", "x");
  const Status s = SaveTuning(blocker + "/tuning.conf", DefaultTuning());
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr(blocker));
}

TEST_F(TuningTest, PathFromEnvironment) {
  using internal::TuningPathFromEnvironment;
  const std::string d = dir_.string();
  {
    ScopedEnv file("CHORUS_TUNING_FILE", (d + "/explicit.conf").c_str());
    ScopedEnv xdg("XDG_CONFIG_HOME", (d + "/xdg").c_str());
    ScopedEnv home("HOME", (d + "/home").c_str());
    EXPECT_EQ(TuningPathFromEnvironment(), d + "/explicit.conf");
  }
  {
    ScopedEnv file("CHORUS_TUNING_FILE", "");  // empty counts as unset
    ScopedEnv xdg("XDG_CONFIG_HOME", (d + "/xdg").c_str());
    ScopedEnv home("HOME", (d + "/home").c_str());
    EXPECT_EQ(TuningPathFromEnvironment(), d + "/xdg/chorus/tuning.conf");
  }
  {
    ScopedEnv file("CHORUS_TUNING_FILE", nullptr);
    ScopedEnv xdg("XDG_CONFIG_HOME", nullptr);
    ScopedEnv home("HOME", (d + "/home").c_str());
    EXPECT_EQ(TuningPathFromEnvironment(), d + "/home/.config/chorus/tuning.conf");
  }
  {
    ScopedEnv file("CHORUS_TUNING_FILE", nullptr);
    ScopedEnv xdg("XDG_CONFIG_HOME", nullptr);
    ScopedEnv home("HOME", nullptr);
    EXPECT_EQ(TuningPathFromEnvironment(), "");
    auto options = LocalOptionsFromEnvironment();
    ASSERT_TRUE(options.ok()) << options.status();
    EXPECT_EQ(options->tuning_file, "");
    Result<Tuning> t = TuningFromFile(options->tuning_file);
    ASSERT_TRUE(t.ok());
    EXPECT_EQ(t->source, "built-in defaults");
  }
}

// What LocalOptionsFromEnvironment picks, and what TuningFromFile makes of it.
TEST_F(TuningTest, EnvironmentChoosesTheFile) {
  const std::string d = dir_.string();
  ScopedEnv xdg("XDG_CONFIG_HOME", (d + "/xdg").c_str());
  ScopedEnv home("HOME", (d + "/home").c_str());
  auto chosen_file = [] {
    auto options = LocalOptionsFromEnvironment();
    return options.ok() ? options->tuning_file : "error: " + options.status().message();
  };
  {
    // No file anywhere: the defaults.
    ScopedEnv file("CHORUS_TUNING_FILE", nullptr);
    EXPECT_EQ(chosen_file(), "");
  }
  // A file in the XDG place is used...
  fs::create_directories(d + "/xdg/chorus");
  Write("xdg/chorus/tuning.conf", "tcp alpha_us=99 beta_gbps=1 gamma_gbps=1\n");
  {
    ScopedEnv file("CHORUS_TUNING_FILE", nullptr);
    EXPECT_EQ(chosen_file(), d + "/xdg/chorus/tuning.conf");
    Result<Tuning> t = TuningFromFile(chosen_file());
    ASSERT_TRUE(t.ok()) << t.status();
    EXPECT_DOUBLE_EQ(t->tcp.alpha_s, 99e-6);
  }
  // ...unless CHORUS_TUNING_FILE names another one,
  const std::string chosen = Write("chosen.conf", "tcp alpha_us=7 beta_gbps=1 gamma_gbps=1\n");
  {
    ScopedEnv file("CHORUS_TUNING_FILE", chosen.c_str());
    EXPECT_EQ(chosen_file(), chosen);
    Result<Tuning> t = TuningFromFile(chosen);
    ASSERT_TRUE(t.ok()) << t.status();
    EXPECT_EQ(t->source, chosen);
    EXPECT_DOUBLE_EQ(t->tcp.alpha_s, 7e-6);
  }
  // which must exist: a typo is an error naming the variable, not a quiet fall-back.
  {
    ScopedEnv file("CHORUS_TUNING_FILE", (d + "/none.conf").c_str());
    EXPECT_THAT(chosen_file(),
                HasSubstr("CHORUS_TUNING_FILE=\"" + d + "/none.conf\": no such file"));
  }
  // A file named in the options must exist too,
  Result<Tuning> missing = TuningFromFile(d + "/none.conf");
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(missing.status().message(),
              HasSubstr("options.tuning_file (" + d + "/none.conf): no such file"));
  // and a malformed file is an error, never a silent fall-back.
  const std::string bad = Write("bad.conf", "# ok\ntcp alpha_us=7\n");
  Result<Tuning> t = TuningFromFile(bad);
  ASSERT_FALSE(t.ok());
  EXPECT_THAT(t.status().message(), HasSubstr(bad + ":2: tcp: missing beta_gbps"));
}

// ---------------------------------------------------------------- fitting (chorus tune)
// Synthetic timings, so the fit's answer is known exactly and no test depends on a clock.

// T(n) = alpha + n/2 * beta at the sizes chorus tune measures.
std::vector<FitSample> Line(double alpha_us, double beta_gbps) {
  std::vector<FitSample> samples;
  for (double bytes : {64.0, 1024.0, 8192.0, 65536.0, 262144.0, 1048576.0, 4194304.0}) {
    samples.push_back({bytes, alpha_us * 1e-6 + bytes / 2 / (beta_gbps * 1e9)});
  }
  return samples;
}

TEST(FitAlphaBeta, RecoversAnExactLine) {
  Result<AlphaBeta> fit = FitAlphaBeta(Line(0.5, 10));
  ASSERT_TRUE(fit.ok()) << fit.status();
  EXPECT_NEAR(fit->alpha_s, 0.5e-6, 1e-12);
  EXPECT_NEAR(fit->beta_s_per_byte, 1e-10, 1e-16);
}

TEST(FitAlphaBeta, ANegativeInterceptIsRefittedThroughZero) {
  // Times that fall below the line at the small sizes would give alpha < 0.
  std::vector<FitSample> samples = Line(0, 5);
  samples[0].seconds /= 4;
  samples[1].seconds /= 2;
  Result<AlphaBeta> fit = FitAlphaBeta(samples);
  ASSERT_TRUE(fit.ok()) << fit.status();
  EXPECT_EQ(fit->alpha_s, 0.0);
  EXPECT_GT(fit->beta_s_per_byte, 0.0);
}

TEST(FitAlphaBeta, TimesThatDoNotGrowWithTheSizeAreRefusedNamingThem) {
  // Every call one scheduler tick, as a 2-rank thread call took beside a busy loop.
  std::vector<FitSample> flat;
  for (const FitSample& s : Line(0.5, 10)) flat.push_back({s.bytes, 4000e-6 - s.bytes * 1e-12});
  Result<AlphaBeta> fit = FitAlphaBeta(flat);
  ASSERT_FALSE(fit.ok());
  EXPECT_EQ(fit.status().code(), StatusCode::kUnavailable);
  EXPECT_THAT(fit.status().message(), HasSubstr("do not grow with the size"));
  EXPECT_THAT(fit.status().message(), HasSubstr("(64 B: 3999.999936 us; 1024 B: "));
  EXPECT_THAT(fit.status().message(), HasSubstr("run again on a quieter machine"));
  // No timings at all, or none positive, is refused the same way.
  EXPECT_FALSE(FitAlphaBeta({}).ok());
  EXPECT_FALSE(FitAlphaBeta({{64, 0}, {1024, -1}}).ok());
}

TEST(FitAlphaBeta, LowestPerSizeKeepsTheQuietestRound) {
  std::vector<FitSample> rounds = Line(0.5, 10);
  for (const FitSample& s : Line(0.5, 10)) rounds.push_back({s.bytes, s.seconds + 4000e-6});
  rounds.insert(rounds.begin(), {65536, 1.0});  // a first, slow sample of a later size
  const std::vector<FitSample> lowest = LowestPerSize(rounds);
  ASSERT_EQ(lowest.size(), 7u);
  EXPECT_EQ(lowest[0].bytes, 65536);  // in the order the sizes first appear
  EXPECT_EQ(lowest[0].seconds, Line(0.5, 10)[3].seconds);
  Result<AlphaBeta> fit = FitAlphaBeta(lowest);
  ASSERT_TRUE(fit.ok()) << fit.status();
  EXPECT_NEAR(fit->alpha_s, 0.5e-6, 1e-12);
}

TEST(RecordedSamples, ParseTransportsInOrderAndGamma) {
  Result<RecordedSamples> r = ParseSamples(
      "# timings\nshm 64 1.5\n\nthread 64 0.5\nshm 1024 2\ngamma_gbps 9.5\n", "t.txt");
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->per_transport.size(), 2u);
  EXPECT_EQ(r->per_transport[0].first, TransportKind::kShm);
  ASSERT_EQ(r->per_transport[0].second.size(), 2u);
  EXPECT_EQ(r->per_transport[0].second[1].bytes, 1024);
  EXPECT_DOUBLE_EQ(r->per_transport[0].second[1].seconds, 2e-6);
  EXPECT_EQ(r->per_transport[1].first, TransportKind::kThread);
  EXPECT_EQ(r->gamma_gbps, 9.5);
}

TEST(RecordedSamples, FormatAndParseRoundTrip) {
  const std::vector<FitSample> samples = Line(0.38, 25);
  Result<RecordedSamples> r =
      ParseSamples(FormatSamples(TransportKind::kTcp, samples), "formatted");
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->per_transport.size(), 1u);
  EXPECT_EQ(r->per_transport[0].first, TransportKind::kTcp);
  ASSERT_EQ(r->per_transport[0].second.size(), samples.size());
  for (size_t i = 0; i < samples.size(); ++i) {
    EXPECT_EQ(r->per_transport[0].second[i].bytes, samples[i].bytes);
    EXPECT_NEAR(r->per_transport[0].second[i].seconds, samples[i].seconds, samples[i].seconds * 1e-9);
  }
  EXPECT_EQ(r->gamma_gbps, 0.0);
}

TEST(RecordedSamples, MalformedLinesNameSourceLineAndProblem) {
  const std::pair<const char*, const char*> cases[] = {
      {"thread 64 1\nfast 64 1\n", "t.txt:2: unknown transport \"fast\""},
      {"thread 64\n", "t.txt:1: expected TRANSPORT BYTES MEDIAN_US"},
      {"thread 64 1 2\n", "t.txt:1: expected TRANSPORT BYTES MEDIAN_US"},
      {"thread 6.5 1\n", "t.txt:1: bytes: \"6.5\" is not a positive whole number"},
      {"thread 0 1\n", "t.txt:1: bytes: \"0\" is not a positive whole number"},
      {"thread 64 -1\n", "t.txt:1: median_us: \"-1\" is not a positive number"},
      {"thread 64 x\n", "t.txt:1: median_us: \"x\" is not a positive number"},
      {"thread 64 1\ngamma_gbps 0\n", "t.txt:2: expected gamma_gbps RATE, a positive number"},
      {"thread 64 1\ngamma_gbps 1\ngamma_gbps 2\n", "t.txt:3: gamma_gbps given twice"},
      {"# nothing\n", "t.txt: no timings"},
  };
  for (const auto& [text, expected] : cases) {
    Result<RecordedSamples> r = ParseSamples(text, "t.txt");
    ASSERT_FALSE(r.ok()) << text;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << text;
    EXPECT_THAT(r.status().message(), HasSubstr(expected)) << text;
  }
}

}  // namespace
}  // namespace chorus::model
