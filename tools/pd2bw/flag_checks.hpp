// Strict values on the command line: every integer, unsigned and floating-point option of every
// subcommand is checked before CLI11 converts it, so `--seed -1`, `--steps 2^63`, `--lr inf` or
// `--clip nan` are refused with the flag's name instead of wrapping, saturating or passing NaN on; and
// no text option takes an empty value (which would silently mean "not given").
#pragma once

#include <CLI/CLI.hpp>

#include <string>

namespace pd2bw::cli {

// The message for `text` as a value of an option of CLI11 type `type` ("INT", "UINT", "FLOAT"), or ""
// when it is acceptable; on success `text` is rewritten as plain decimal (so "010" means ten, not the
// octal eight CLI11 would read). INT: an optional '-' and decimal digits within int64; UINT: decimal
// digits within uint64; FLOAT: a finite number (no nan, inf or overflow to infinity); TEXT: not empty.
// Other types pass.
std::string check_number_text(const std::string& type, std::string& text);

// Adds check_number_text in front of the validators of every valued option of `app` and of all its
// subcommands (call after every option is registered, before parsing).
void add_strict_number_checks(CLI::App& app);

}  // namespace pd2bw::cli
