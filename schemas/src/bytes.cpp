// Byte sizes as people write them ("16GiB", "1.5 GB", "4096") and as pd2bw prints them ("15.2 GiB").
#include <cctype>
#include <cmath>
#include <limits>
#include <string>

#include <fmt/format.h>

#include "pd2bw/error.hpp"
#include "pd2bw/schemas/common.hpp"

namespace pd2bw::schemas {
namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

// Multiplier of a suffix such as "", "B", "k", "KB", "KiB", "gib" (case-insensitive); 0 if unknown.
uint64_t suffix_multiplier(std::string_view suffix) {
  std::string s;
  for (char c : suffix) s.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
  if (!s.empty() && s.back() == 'b') s.pop_back();  // "B" is optional
  if (s.empty()) return 1;
  const std::string_view letters = "kmgtp";
  const auto power = letters.find(s.front());
  if (power == std::string_view::npos) return 0;
  const bool binary = s.size() == 2 && s[1] == 'i';
  if (s.size() != 1 && !binary) return 0;
  uint64_t m = 1;
  for (std::size_t i = 0; i <= power; ++i) m *= binary ? 1024 : 1000;
  return m;
}

[[noreturn]] void bad_size(std::string_view text, std::string_view what, std::string_view why) {
  throw UsageError(fmt::format("{}: cannot read \"{}\" as a size in bytes ({})", what, text, why),
                   "write a non-negative size such as 16GiB, 1.5GB, 512MiB or 4096 (bytes)");
}

}  // namespace

int64_t parse_bytes(std::string_view text, std::string_view what) {
  const std::string_view s = trim(text);
  std::size_t i = 0;
  std::size_t digits = 0;
  bool seen_dot = false;
  for (; i < s.size() && (std::isdigit(static_cast<unsigned char>(s[i])) || (s[i] == '.' && !seen_dot)); ++i) {
    if (s[i] == '.') {
      seen_dot = true;
    } else {
      ++digits;
    }
  }
  if (digits == 0) bad_size(text, what, "no number");
  const std::string number(s.substr(0, i));
  const uint64_t mult = suffix_multiplier(trim(s.substr(i)));
  if (mult == 0) bad_size(text, what, fmt::format("unknown unit \"{}\"", trim(s.substr(i))));
  constexpr auto kMax = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
  if (!seen_dot) {
    // Whole numbers stay exact in integer arithmetic (a double would round above 2^53).
    uint64_t v = 0;
    for (char c : number) {
      if (v > (kMax - static_cast<uint64_t>(c - '0')) / 10) bad_size(text, what, "too large");
      v = v * 10 + static_cast<uint64_t>(c - '0');
    }
    if (v != 0 && mult > kMax / v) bad_size(text, what, "too large");
    return static_cast<int64_t>(v * mult);
  }
  const double v = std::stod(number) * static_cast<double>(mult);
  if (!(v < 9.2e18)) bad_size(text, what, "too large");
  return std::llround(v);
}

std::string format_bytes(int64_t bytes) {
  const bool negative = bytes < 0;
  const uint64_t mag = negative ? 0 - static_cast<uint64_t>(bytes) : static_cast<uint64_t>(bytes);
  const std::string sign = negative ? "-" : "";
  if (mag < 1024) return fmt::format("{}{} B", sign, mag);
  static constexpr const char* kUnits[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  std::size_t unit = 0;
  double scale = 1024.0;
  // Move up while the value would print as 1024 or more of the current unit.
  while (unit + 1 < std::size(kUnits) && std::round(static_cast<double>(mag) / scale * 10) >= 1024 * 10) {
    ++unit;
    scale *= 1024.0;
  }
  const double v = static_cast<double>(mag) / scale;
  if (mag % static_cast<uint64_t>(scale) == 0) return fmt::format("{}{:.0f} {}", sign, v, kUnits[unit]);
  return fmt::format("{}{:.1f} {}", sign, v, kUnits[unit]);
}

std::string format_estimated_bytes(long double bytes) {
  return bytes >= static_cast<long double>(INT64_MAX) ? fmt::format("{:.3g} bytes", static_cast<double>(bytes))
                                                      : format_bytes(static_cast<int64_t>(bytes));
}

}  // namespace pd2bw::schemas
