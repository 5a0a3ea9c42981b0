// Strict numeric flags for every subcommand (flag_checks.hpp).
#include "flag_checks.hpp"

#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <string>

#include <fmt/format.h>

namespace pd2bw::cli {
namespace {

bool all_digits(std::string_view s) {
  if (s.empty()) return false;
  for (char c : s)
    if (c < '0' || c > '9') return false;
  return true;
}

template <typename I>
std::string check_integer(std::string& text, bool allow_sign) {
  const std::string_view digits = allow_sign && !text.empty() && text[0] == '-' ? std::string_view(text).substr(1)
                                                                                 : std::string_view(text);
  if (!all_digits(digits))
    return fmt::format("'{}' is not {}", text, allow_sign ? "an integer" : "a non-negative integer");
  I value{};
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size())
    return fmt::format("{} is out of range [{}, {}]", text, std::numeric_limits<I>::min(),
                       std::numeric_limits<I>::max());
  text = std::to_string(value);
  return {};
}

std::string check_real(std::string& text) {
  if (text.empty()) return "expected a number, got nothing";
  char* end = nullptr;
  const double value = std::strtod(text.c_str(), &end);
  if (end != text.c_str() + text.size()) return fmt::format("'{}' is not a number", text);
  if (!std::isfinite(value)) return fmt::format("{} is not a finite number", text);
  return {};
}

void add_to(CLI::App& app) {
  for (CLI::Option* opt : app.get_options()) {
    if (opt->get_expected_min() == 0) continue;  // a flag without a value
    const std::string full = opt->get_type_name();
    const std::string type = full.substr(0, full.find(':'));
    if (type != "INT" && type != "UINT" && type != "FLOAT" && type != "TEXT") continue;
    opt->transform(CLI::Validator([type](std::string& text) { return check_number_text(type, text); }, ""));
  }
  for (CLI::App* sub : app.get_subcommands({})) add_to(*sub);
}

}  // namespace

std::string check_number_text(const std::string& type, std::string& text) {
  if (type == "TEXT") return text.empty() ? "an empty value is not allowed (leave the option out instead)" : "";
  if (type == "INT") return check_integer<int64_t>(text, true);
  if (type == "UINT") return check_integer<uint64_t>(text, false);
  if (type == "FLOAT") return check_real(text);
  return {};
}

void add_strict_number_checks(CLI::App& app) { add_to(app); }

}  // namespace pd2bw::cli
