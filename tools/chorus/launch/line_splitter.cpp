// line_splitter.cpp: LineSplitter (line_splitter.h).
#include "launch/line_splitter.h"

namespace chorus::cli::launch {

void LineSplitter::Feed(std::string_view data, std::string& out) {
  while (!data.empty()) {
    size_t newline = data.find('\n');
    partial_.append(data.substr(0, newline));
    if (newline == std::string_view::npos) {
      if (partial_.size() >= kMaxLineBytes) EmitPartial(out);
      return;
    }
    EmitPartial(out);
    data.remove_prefix(newline + 1);
  }
}

void LineSplitter::Finish(std::string& out) {
  if (!partial_.empty()) EmitPartial(out);
}

void LineSplitter::EmitPartial(std::string& out) {
  out += prefix_;
  out += partial_;
  out += '\n';
  partial_.clear();
}

}  // namespace chorus::cli::launch
