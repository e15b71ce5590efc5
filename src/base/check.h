// Internal invariants (the second tier of checks; user arguments are validated once, at the
// API edge, by core/validate). A failed check is a bug in chorus: it prints both values and
// where, then aborts, rather than corrupt data or hang.
//
//   CHORUS_CHECK(slot != nullptr);
//   CHORUS_CHECK_LE(m.bytes, slot_bytes_);
#pragma once

#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>

namespace chorus::internal {

[[noreturn]] inline void CheckFailed(const char* file, int line, const std::string& what) {
  std::fprintf(stderr, "chorus: internal check failed at %s:%d: %s\n", file, line, what.c_str());
  std::abort();
}

template <typename A, typename B>
std::string DescribeOperands(const char* expr, const A& a, const B& b) {
  std::ostringstream os;
  os << expr << " (" << a << " vs " << b << ")";
  return os.str();
}

}  // namespace chorus::internal

#define CHORUS_CHECK(cond) \
  ((cond) ? static_cast<void>(0) : ::chorus::internal::CheckFailed(__FILE__, __LINE__, #cond))

#define CHORUS_CHECK_OP_(a, b, op)               \
  (((a)op(b)) ? static_cast<void>(0)             \
              : ::chorus::internal::CheckFailed( \
                    __FILE__, __LINE__,          \
                    ::chorus::internal::DescribeOperands(#a " " #op " " #b, (a), (b))))

#define CHORUS_CHECK_EQ(a, b) CHORUS_CHECK_OP_(a, b, ==)
#define CHORUS_CHECK_LE(a, b) CHORUS_CHECK_OP_(a, b, <=)
#define CHORUS_CHECK_LT(a, b) CHORUS_CHECK_OP_(a, b, <)
