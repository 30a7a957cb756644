// Errors shared by every layer of hios.
//
// Every user-facing failure is an hios::Error whose message is one line naming the culprit
// (a node, a JSON path, a rank). The CLI prints it on stderr and exits with code 2, so a
// message must make sense on its own, without a stack trace.
#pragma once

#include <cstdarg>
#include <stdexcept>
#include <string>

namespace hios {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

// printf-style formatting into a std::string (g++ 12 has no <format>).
std::string strprintf(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
// s with its control characters (NUL, ESC, newlines, DEL) as \xNN: what a message may print of
// a user's word, so an error stays one visible line and never drives the terminal.
std::string printable(const std::string& s);

[[noreturn]] void throw_error(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

}  // namespace hios

// HIOS_CHECK(cond, fmt, ...) throws hios::Error with the formatted message when cond is false.
// The condition is evaluated exactly once; do/while(0) makes it a single statement.
#define HIOS_CHECK(cond, ...)            \
  do {                                   \
    if (!(cond)) {                       \
      ::hios::throw_error(__VA_ARGS__);  \
    }                                    \
  } while (0)
