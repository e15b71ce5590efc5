// The tuning file: parsing, writing and where it lives (see tuning.h).
//
// Numbers are written with ten significant digits (std::to_chars) and read back with
// std::from_chars, so a file loaded and saved again has the same text, and the rates survive the
// trip to within a part in 1e10.
#include "model/tuning.h"

#include <algorithm>
#include <array>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <sstream>
#include <system_error>
#include <utility>

#include "base/errno_text.h"

namespace chorus::model {
namespace {

constexpr std::string_view kDefaultsName = "built-in defaults";
constexpr std::array<std::string_view, 3> kKeys = {"alpha_us", "beta_gbps", "gamma_gbps"};

// The file's units, from and to MachineParams.
struct FileValues {
  double alpha_us = 0;
  double beta_gbps = 0;
  double gamma_gbps = 0;
};

MachineParams ToParams(const FileValues& v) {
  return {.alpha_s = v.alpha_us * 1e-6,
          .beta_s_per_byte = 1.0 / (v.beta_gbps * 1e9),
          .gamma_s_per_byte = 1.0 / (v.gamma_gbps * 1e9)};
}

FileValues ToFileValues(const MachineParams& m) {
  return {.alpha_us = m.alpha_s * 1e6,
          .beta_gbps = 1.0 / (m.beta_s_per_byte * 1e9),
          .gamma_gbps = 1.0 / (m.gamma_s_per_byte * 1e9)};
}

// Ten significant digits: plenty for a measurement, and 0.43 stays "0.43" after the trip
// through seconds (0.43e-6 * 1e6 is 0.42999999999999994).
std::string Number(double value) {
  std::array<char, 64> buf{};
  const std::to_chars_result r =
      std::to_chars(buf.data(), buf.data() + buf.size(), value, std::chars_format::general, 10);
  return std::string(buf.data(), r.ptr);
}

std::optional<double> ParseNumber(std::string_view text) {
  double value = 0;
  const char* end = text.data() + text.size();
  const std::from_chars_result r = std::from_chars(text.data(), end, value);
  if (r.ec != std::errc() || r.ptr != end || !std::isfinite(value)) return std::nullopt;
  return value;
}

std::string_view Trim(std::string_view s) {
  const size_t first = s.find_first_not_of(" \t\r");
  if (first == std::string_view::npos) return {};
  const size_t last = s.find_last_not_of(" \t\r");
  return s.substr(first, last - first + 1);
}

std::optional<TransportKind> ParseTransport(std::string_view word) {
  if (word == "thread") return TransportKind::kThread;
  if (word == "shm") return TransportKind::kShm;
  if (word == "tcp") return TransportKind::kTcp;
  return std::nullopt;
}

// One transport line's "key=value" words (after the transport name) into rates, or the problem.
Result<FileValues> ParseValues(std::string_view rest) {
  std::array<std::optional<double>, kKeys.size()> values;
  while (!(rest = Trim(rest)).empty()) {
    const size_t space = rest.find_first_of(" \t");
    const std::string_view word = rest.substr(0, space);
    rest = space == std::string_view::npos ? std::string_view() : rest.substr(space);
    const size_t eq = word.find('=');
    if (eq == std::string_view::npos) {
      return InvalidArgument("expected key=value, got \"" + std::string(word) + "\"");
    }
    const std::string_view key = word.substr(0, eq);
    const std::string_view text = word.substr(eq + 1);
    size_t k = 0;
    while (k < kKeys.size() && kKeys[k] != key) ++k;
    if (k == kKeys.size()) {
      return InvalidArgument("unknown key \"" + std::string(key) +
                             "\" (expected alpha_us, beta_gbps and gamma_gbps)");
    }
    if (values[k]) return InvalidArgument(std::string(key) + " given twice");
    const std::optional<double> value = ParseNumber(text);
    // A latency may be 0; a rate of 0 would mean infinite time per byte.
    const bool ok = value && (k == 0 ? *value >= 0 : *value > 0);
    if (!ok) {
      return InvalidArgument(std::string(key) + ": \"" + std::string(text) + "\" is not a " +
                             (k == 0 ? "number >= 0" : "positive number"));
    }
    values[k] = value;
  }
  for (size_t k = 0; k < kKeys.size(); ++k) {
    if (!values[k]) return InvalidArgument("missing " + std::string(kKeys[k]));
  }
  return FileValues{*values[0], *values[1], *values[2]};
}

}  // namespace

const MachineParams& Tuning::For(TransportKind transport) const {
  switch (transport) {
    case TransportKind::kThread:
      return thread;
    case TransportKind::kShm:
    case TransportKind::kAuto:
      return shm;
    case TransportKind::kTcp:
    case TransportKind::kMpi:
      return tcp;
  }
  return shm;
}

MachineParams& Tuning::For(TransportKind transport) {
  return const_cast<MachineParams&>(static_cast<const Tuning&>(*this).For(transport));
}

Tuning DefaultTuning() {
  Tuning tuning;
  // The median of four `chorus tune` runs on the development machine (2-core AMD EPYC VM,
  // Debian 12, 2026-11-30), rounded: 2-rank ring all-gathers of 64 B .. 4 MiB; gamma is the
  // float32 sum kernel on 64 MiB operands (it reaches 54 GB/s when they fit in L2).
  constexpr double kGammaGbps = 12.5;
  tuning.thread = ToParams({.alpha_us = 0.38, .beta_gbps = 25, .gamma_gbps = kGammaGbps});
  tuning.shm = ToParams({.alpha_us = 0.43, .beta_gbps = 11, .gamma_gbps = kGammaGbps});
  tuning.tcp = ToParams({.alpha_us = 23, .beta_gbps = 3.5, .gamma_gbps = kGammaGbps});
  tuning.source = std::string(kDefaultsName);
  return tuning;
}

Result<Tuning> LoadTuning(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    return InvalidArgument("cannot read tuning file " + path + ": it is a directory");
  }
  std::ifstream in(path);
  if (!in)
    return InvalidArgument("cannot read tuning file " + path + ": " + internal::ErrnoText(errno));
  std::stringstream text;
  text << in.rdbuf();
  if (in.bad()) return InvalidArgument("cannot read tuning file " + path);
  return ParseTuning(text.str(), path);
}

Result<Tuning> ParseTuning(std::string_view text, const std::string& source) {
  Tuning tuning = DefaultTuning();
  tuning.source = source;
  std::array<int, 5> seen_on_line{};  // by TransportKind; 0 = not yet
  int number = 0;
  while (!text.empty()) {
    ++number;
    const size_t nl = text.find('\n');
    const std::string_view line = Trim(text.substr(0, nl));
    text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
    if (line.empty() || line.front() == '#') continue;
    auto fail = [&](const std::string& what) -> Status {
      return InvalidArgument(source + ":" + std::to_string(number) + ": " + what);
    };
    const size_t space = line.find_first_of(" \t");
    const std::string_view word = line.substr(0, space);
    const std::optional<TransportKind> transport = ParseTransport(word);
    if (!transport) {
      return fail("unknown transport \"" + std::string(word) + "\" (expected thread, shm or tcp)");
    }
    int& seen = seen_on_line[static_cast<size_t>(*transport)];
    if (seen != 0) {
      return fail(std::string(word) + " given twice (first on line " + std::to_string(seen) + ")");
    }
    seen = number;
    Result<FileValues> values =
        ParseValues(space == std::string_view::npos ? std::string_view() : line.substr(space));
    if (!values.ok()) return fail(std::string(word) + ": " + values.status().message());
    tuning.For(*transport) = ToParams(*values);
  }
  return tuning;
}

std::string FormatTuning(const Tuning& tuning, std::string_view comment) {
  std::ostringstream out;
  out << "# chorus tuning: per transport, alpha_us = microseconds per message, beta_gbps = GB/s\n"
         "# moved per rank, gamma_gbps = GB/s reduced per rank (GB = 1e9 bytes).\n";
  while (!comment.empty()) {
    const size_t nl = comment.find('\n');
    out << "# " << comment.substr(0, nl) << "\n";
    comment = nl == std::string_view::npos ? std::string_view() : comment.substr(nl + 1);
  }
  const std::pair<const char*, TransportKind> lines[] = {{"thread", TransportKind::kThread},
                                                         {"shm", TransportKind::kShm},
                                                         {"tcp", TransportKind::kTcp}};
  for (const auto& [name, kind] : lines) {
    const FileValues v = ToFileValues(tuning.For(kind));
    out << name << " alpha_us=" << Number(v.alpha_us) << " beta_gbps=" << Number(v.beta_gbps)
        << " gamma_gbps=" << Number(v.gamma_gbps) << "\n";
  }
  return out.str();
}

Status SaveTuning(const std::string& path, const Tuning& tuning, std::string_view comment) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path target(path);
  if (target.has_parent_path()) {
    fs::create_directories(target.parent_path(), ec);
    if (ec) {
      return Unavailable("cannot create directory " + target.parent_path().string() + ": " +
                         ec.message());
    }
  }
  // Write beside the target and rename, so a reader never sees half a file.
  const std::string temporary = path + ".tmp";
  {
    std::ofstream out(temporary, std::ios::trunc);
    if (!out) return Unavailable("cannot write " + temporary + ": " + internal::ErrnoText(errno));
    out << FormatTuning(tuning, comment);
    out.flush();
    if (!out) return Unavailable("cannot write " + temporary + ": " + internal::ErrnoText(errno));
  }
  fs::rename(temporary, target, ec);
  if (ec) {
    const std::string why = ec.message();
    fs::remove(temporary, ec);
    return Unavailable("cannot replace " + path + ": " + why);
  }
  return Status::Ok();
}

Result<Tuning> TuningFromFile(const std::string& path) {
  if (path.empty()) return DefaultTuning();
  std::error_code ec;
  if (!std::filesystem::exists(path, ec) && !ec) {
    return InvalidArgument("options.tuning_file (" + path +
                           "): no such file (chorus tune writes it; empty means the built-in "
                           "defaults)");
  }
  return LoadTuning(path);
}

std::vector<FitSample> LowestPerSize(const std::vector<FitSample>& samples) {
  std::vector<FitSample> lowest;
  for (const FitSample& s : samples) {
    auto same = std::find_if(lowest.begin(), lowest.end(),
                             [&](const FitSample& l) { return l.bytes == s.bytes; });
    if (same == lowest.end()) {
      lowest.push_back(s);
    } else {
      same->seconds = std::min(same->seconds, s.seconds);
    }
  }
  return lowest;
}

Result<AlphaBeta> FitAlphaBeta(const std::vector<FitSample>& samples) {
  // Weighted least squares of T = alpha + x * beta with x = n / 2 and weights 1 / T^2.
  double sw = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (const FitSample& s : samples) {
    if (!(s.seconds > 0)) continue;
    const double w = 1.0 / (s.seconds * s.seconds);
    const double x = s.bytes / 2;
    sw += w;
    sx += w * x;
    sy += w * s.seconds;
    sxx += w * x * x;
    sxy += w * x * s.seconds;
  }
  const double det = sw * sxx - sx * sx;
  AlphaBeta fit;
  bool ok = sxx > 0;
  if (ok) {
    if (det > 0) {
      fit.alpha_s = (sxx * sy - sx * sxy) / det;
      fit.beta_s_per_byte = (sw * sxy - sx * sy) / det;
    }
    if (!(det > 0) || fit.alpha_s < 0) {
      fit.alpha_s = 0;
      fit.beta_s_per_byte = sxy / sxx;
    }
    ok = fit.beta_s_per_byte > 0 && std::isfinite(fit.beta_s_per_byte);
  }
  if (ok) return fit;
  std::string times;
  for (const FitSample& s : samples) {
    if (!times.empty()) times += "; ";
    times += std::to_string(static_cast<long long>(s.bytes)) + " B: " + Number(s.seconds * 1e6) +
             " us";
  }
  if (times.empty()) times = "no timings";
  return Unavailable(
      "the all-gather times do not grow with the size, so they do not fit alpha + n/2 * beta (" +
      times + "): run again on a quieter machine, or raise --max-bytes");
}

Result<RecordedSamples> ParseSamples(std::string_view text, const std::string& source) {
  RecordedSamples recorded;
  int number = 0;
  while (!text.empty()) {
    ++number;
    const size_t nl = text.find('\n');
    std::string_view line = Trim(text.substr(0, nl));
    text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
    if (line.empty() || line.front() == '#') continue;
    auto fail = [&](const std::string& what) -> Status {
      return InvalidArgument(source + ":" + std::to_string(number) + ": " + what);
    };
    std::vector<std::string_view> words;
    while (!(line = Trim(line)).empty()) {
      const size_t space = line.find_first_of(" \t");
      words.push_back(line.substr(0, space));
      line = space == std::string_view::npos ? std::string_view() : line.substr(space);
    }
    if (words[0] == "gamma_gbps") {
      const std::optional<double> gamma = words.size() == 2 ? ParseNumber(words[1]) : std::nullopt;
      if (!gamma || !(*gamma > 0)) return fail("expected gamma_gbps RATE, a positive number");
      if (recorded.gamma_gbps > 0) return fail("gamma_gbps given twice");
      recorded.gamma_gbps = *gamma;
      continue;
    }
    const std::optional<TransportKind> transport = ParseTransport(words[0]);
    if (!transport) {
      return fail("unknown transport \"" + std::string(words[0]) +
                  "\" (expected thread, shm, tcp or gamma_gbps)");
    }
    if (words.size() != 3) return fail("expected TRANSPORT BYTES MEDIAN_US");
    const std::optional<double> bytes = ParseNumber(words[1]);
    const std::optional<double> us = ParseNumber(words[2]);
    if (!bytes || !(*bytes > 0) || *bytes != std::floor(*bytes)) {
      return fail("bytes: \"" + std::string(words[1]) + "\" is not a positive whole number");
    }
    if (!us || !(*us > 0)) {
      return fail("median_us: \"" + std::string(words[2]) + "\" is not a positive number");
    }
    auto it = std::find_if(recorded.per_transport.begin(), recorded.per_transport.end(),
                           [&](const auto& entry) { return entry.first == *transport; });
    if (it == recorded.per_transport.end()) {
      recorded.per_transport.emplace_back(*transport, std::vector<FitSample>{});
      it = std::prev(recorded.per_transport.end());
    }
    it->second.push_back({*bytes, *us * 1e-6});
  }
  if (recorded.per_transport.empty()) return InvalidArgument(source + ": no timings");
  return recorded;
}

std::string FormatSamples(TransportKind transport, const std::vector<FitSample>& samples) {
  std::string text;
  for (const FitSample& s : samples) {
    text += std::string(TransportKindName(transport)) + " " +
            std::to_string(static_cast<long long>(s.bytes)) + " " + Number(s.seconds * 1e6) +
            "\n";
  }
  return text;
}

}  // namespace chorus::model
