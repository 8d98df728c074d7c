// TY_CHECK: a broken invariant is a bug; it prints file:line and the message, then aborts.
// Failures that can happen in production are Status values instead (see status.h).
//
//   TY_CHECK(n >= 0) << "size " << n << " is negative";
#pragma once

#include <sstream>

namespace trainyard::internal {

class CheckFailure {
 public:
  CheckFailure(const char* file, int line, const char* condition);
  [[noreturn]] ~CheckFailure();
  std::ostream& stream() { return stream_; }

 private:
  std::ostringstream stream_;
};

// Lets `TY_CHECK(c) << x` be a void expression in both branches of the ternary.
struct Voidify {
  void operator&(std::ostream&) {}
};

}  // namespace trainyard::internal

#define TY_CHECK(condition)                           \
  (__builtin_expect(static_cast<bool>(condition), 1)) \
      ? (void)0                                       \
      : ::trainyard::internal::Voidify() &            \
            ::trainyard::internal::CheckFailure(__FILE__, __LINE__, #condition).stream()

#define TY_CHECK_EQ(a, b) TY_CHECK((a) == (b)) << (a) << " vs " << (b) << " "
#define TY_CHECK_NE(a, b) TY_CHECK((a) != (b)) << (a) << " vs " << (b) << " "
#define TY_CHECK_LT(a, b) TY_CHECK((a) < (b)) << (a) << " vs " << (b) << " "
#define TY_CHECK_LE(a, b) TY_CHECK((a) <= (b)) << (a) << " vs " << (b) << " "
#define TY_CHECK_GT(a, b) TY_CHECK((a) > (b)) << (a) << " vs " << (b) << " "
#define TY_CHECK_GE(a, b) TY_CHECK((a) >= (b)) << (a) << " vs " << (b) << " "

#ifdef NDEBUG
#define TY_DCHECK(condition) \
  while (false) TY_CHECK(condition)
#else
#define TY_DCHECK(condition) TY_CHECK(condition)
#endif
