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

#include "chorus/communicator.h"
#include "core/env.h"

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
  void SetUp() override {
    const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::path(::testing::TempDir()) /
           ("chorus_tuning_" + std::to_string(::getpid()) + "_" + info->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

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

  fs::path dir_;
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

}  // namespace
}  // namespace chorus::model
