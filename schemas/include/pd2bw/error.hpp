// The error hierarchy shared by every pd2bw library. Library code throws these and never exits;
// only main() catches them, prints "pd2bw: error: ..." (+ "hint: ...") and maps them to an exit code.
#pragma once

#include <stdexcept>
#include <string>

namespace pd2bw {

// Exit codes of the pd2bw executable.
enum class ExitCode : int { ok = 0, runtime = 1, usage = 2, infeasible = 3 };

// Base class: a message, an optional hint (what the user can do about it) and the exit code.
class Error : public std::runtime_error {
 public:
  Error(const std::string& message, std::string hint = {}, ExitCode code = ExitCode::runtime)
      : std::runtime_error(message), hint_(std::move(hint)), code_(code) {}
  const std::string& hint() const noexcept { return hint_; }
  ExitCode code() const noexcept { return code_; }

 private:
  std::string hint_;
  ExitCode code_;
};

// A bad flag, a missing file, an impossible combination of options. Exit 2.
class UsageError : public Error {
 public:
  explicit UsageError(const std::string& message, std::string hint = {})
      : Error(message, std::move(hint), ExitCode::usage) {}
};

// A file that is not valid JSON or does not follow its schema. The message starts with the JSON
// pointer of the offending field (e.g. "/layers/3/per_microbatch/1/fwd_ms: must be > 0"). Exit 2.
class SchemaError : public Error {
 public:
  explicit SchemaError(const std::string& message, std::string hint = {})
      : Error(message, std::move(hint), ExitCode::usage) {}
};

// No candidate plan fits the devices' memory. Exit 3.
class InfeasiblePlanError : public Error {
 public:
  explicit InfeasiblePlanError(const std::string& message, std::string hint = {})
      : Error(message, std::move(hint), ExitCode::infeasible) {}
};

}  // namespace pd2bw
