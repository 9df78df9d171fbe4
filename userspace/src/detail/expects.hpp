// EXPECTS(cond, ExceptionType, message): throws ExceptionType(errno, message + " [file:line]")
// when cond is false. The message is an expression built only on failure.
#pragma once

#include <cerrno>
#include <string>

#include "hostrt/error.hpp"

namespace hostrt::detail {

inline std::string where(const char* file, int line) {
  std::string f(file);
  const auto slash = f.rfind('/');
  return " [" + (slash == std::string::npos ? f : f.substr(slash + 1)) + ":" + std::to_string(line) + "]";
}

}  // namespace hostrt::detail

#define HOSTRT_EXPECTS(cond, Type, err, msg)                                                        \
  do {                                                                                              \
    if (!(cond)) throw Type((err), std::string(msg) + ::hostrt::detail::where(__FILE__, __LINE__)); \
  } while (0)

// The common case: an argument check.
#define EXPECTS(cond, msg) HOSTRT_EXPECTS(cond, ::hostrt::InvalidArgument, EINVAL, msg)
