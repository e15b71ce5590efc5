// The one place for how long a test lets a prompt answer take.
//
// A test's verdict must not depend on the machine's speed or load: CI runs two tests at a time
// on two cores, beside compiles, under TSan. So no test asserts that something is fast. What a
// test may assert about time is a property with a margin no busy machine comes near:
//   - a deadline fires, and not before its time (elapsed >= the deadline; < kPrompt above it);
//   - an answer is prompt rather than the wrong path's wait: the wrong path (a deadline, a retry
//     loop, a peer's timeout) is set to at least kWrongPathWait, far above kPrompt, so that a
//     call that returns within kPrompt cannot have taken it.
// Raise kPrompt if a machine ever needs it; never loosen an assertion about a value, a code, a
// message or an order of events.
#pragma once

#include <chrono>

namespace chorus::testing {

// How long a prompt answer may take on a loaded 2-core machine under TSan.
inline constexpr std::chrono::seconds kPrompt{10};
inline constexpr double kPromptSeconds = 10.0;
// The shortest wait a wrong path may take in a test that asserts promptness: 2 x kPrompt.
inline constexpr std::chrono::seconds kWrongPathWait{20};

static_assert(kWrongPathWait >= 2 * kPrompt);
static_assert(kPromptSeconds == static_cast<double>(kPrompt.count()));

}  // namespace chorus::testing
