#pragma once
// Command-line flags from a table, shared by the laneq programs (laneq, laneq-mock-api):
// "--flag value" or "--flag=value"; unknown flags, missing or malformed values throw
// std::invalid_argument naming the flag, so every program reports them the same way.
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace laneq::flags {

[[noreturn]] inline void bad(std::string_view flag, std::string_view why) {
  std::string m(flag);
  m += ": ";
  m += why;
  throw std::invalid_argument(m);
}

inline std::int64_t integer(std::string_view flag, std::string_view v, std::int64_t min,
                            std::int64_t max) {
  std::int64_t n = 0;
  const auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
  if (v.empty() || ec != std::errc{} || p != v.data() + v.size())
    bad(flag, "expected an integer, got \"" + std::string(v) + "\"");
  if (n < min || n > max)
    bad(flag, "must be in " + std::to_string(min) + ".." + std::to_string(max));
  return n;
}

inline double number(std::string_view flag, std::string_view v, double min, double max) {
  const std::string s(v);
  char* end = nullptr;
  const double x = std::strtod(s.c_str(), &end);
  if (s.empty() || end != s.c_str() + s.size() || !std::isfinite(x))
    bad(flag, "expected a number, got \"" + s + "\"");
  if (x < min || x > max) bad(flag, "must be in [" + std::to_string(min) + ", " + std::to_string(max) + "]");
  return x;
}

template <class Options>
struct Flag {
  std::string_view name;   // "--rpm"
  bool takes_value;
  std::string_view help;   // "N  requests per minute (0 = none)"
  std::function<void(Options&, std::string_view flag, std::string_view value)> apply;
};

// Applies argv[first..argc) to `opts`. Arguments not starting with "--" go to `positional`
// (nullptr: they are an error too).
template <class Options>
void parse(const std::vector<Flag<Options>>& table, Options& opts, int argc,
           const char* const* argv, int first = 1, std::vector<std::string>* positional = nullptr) {
  for (int i = first; i < argc; ++i) {
    std::string_view arg = argv[i];
    if (arg == "-h") arg = "--help";
    if (arg.substr(0, 2) != "--" && positional) {
      positional->emplace_back(arg);
      continue;
    }
    std::string_view name = arg;
    std::optional<std::string_view> value;
    if (const auto eq = arg.find('='); arg.substr(0, 2) == "--" && eq != std::string_view::npos) {
      name = arg.substr(0, eq);
      value = arg.substr(eq + 1);
    }
    const Flag<Options>* flag = nullptr;
    for (const auto& f : table)
      if (f.name == name) flag = &f;
    if (!flag) bad(arg, "unknown flag");
    if (flag->takes_value && !value) {
      if (i + 1 >= argc) bad(name, "needs a value");
      // "--out --mock": a forgotten value, not a file named --mock (NAME=--x says it is one)
      if (std::string_view(argv[i + 1]).substr(0, 2) == "--")
        bad(name, std::string("needs a value, not the flag ") + argv[i + 1] + " (write " +
                      std::string(name) + "=VALUE for a value that starts with --)");
      value = argv[++i];
    } else if (!flag->takes_value && value) {
      bad(name, "takes no value");
    }
    flag->apply(opts, name, value.value_or(""));
  }
}

// "  --rpm N  requests per minute ..." lines, one per flag.
template <class Options>
std::string usage(const std::vector<Flag<Options>>& table) {
  std::string u;
  for (const auto& f : table) {
    u += "  ";
    u += f.name;
    u += ' ';
    u += f.help;
    u += '\n';
  }
  return u;
}

}  // namespace laneq::flags
