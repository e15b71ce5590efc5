// Test helper: a fresh directory under the system's temporary directory (for file stores and
// the like), removed with everything in it when the object goes. Every test that needs a
// directory of its own uses this one.
#pragma once

#include <stdlib.h>

#include <filesystem>
#include <string>
#include <string_view>

namespace chorus::testing {

class TempDir {
 public:
  // The directory is `prefix` and six random characters, so that one left by a crashed test
  // says which test it was.
  explicit TempDir(std::string_view prefix = "chorus-test") {
    std::string pattern =
        (std::filesystem::temp_directory_path() / (std::string(prefix) + "-XXXXXX")).string();
    if (mkdtemp(pattern.data()) == nullptr) std::abort();
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  // A file store in this directory.
  std::string url() const { return "file://" + path_; }

 private:
  std::string path_;
};

}  // namespace chorus::testing
