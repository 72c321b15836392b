// Errors: one exception type carrying a precise, user-facing message (sluice::Error, public in
// sluice/types.h). Library code throws it for every bad input (file, flag, request) through
// fail(); front ends catch it at the top and print it, so nothing a user supplies crashes the
// process.
#pragma once

#include <fmt/format.h>

#include <string>

#include "sluice/types.h"

namespace sluice {

template <typename... Args>
[[noreturn]] inline void fail(fmt::format_string<Args...> f, Args&&... args) {
  throw Error(fmt::format(f, std::forward<Args>(args)...));
}

// Overflow-checked arithmetic for sizes read from untrusted files.
inline bool mul_overflows(uint64_t a, uint64_t b, uint64_t* out) {
  return __builtin_mul_overflow(a, b, out);
}
inline bool add_overflows(uint64_t a, uint64_t b, uint64_t* out) {
  return __builtin_add_overflow(a, b, out);
}

}  // namespace sluice
