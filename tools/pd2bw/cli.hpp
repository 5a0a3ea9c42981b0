// Shared declarations of the pd2bw command-line tool: each subcommand registers itself on the app.
#pragma once

#include <CLI/CLI.hpp>

#include <cstddef>
#include <functional>
#include <string>
#include <string_view>

#include "pd2bw/error.hpp"

namespace pd2bw::cli {

// The command line as typed, for provenance.
std::string command_line();

// `text` with every input it quotes cut to a few hundred characters (long runs without a space, and the
// whole text past 4,000 characters, keep their ends and say how much was left out).
std::string bounded(std::string_view text);

// Prints "pd2bw: error: <context><message>" and its hint on stderr, bounded; returns the error's exit code.
int report_error(const Error& e);
// Text put before every error message from now on, e.g. "rank 2: " in a multi-process job.
void set_error_context(std::string context);
// Thrown after an error was already reported (report_error): main only returns `code`. A process of a
// multi-process job reports while MPI still runs, since the launcher may end the others as soon as one
// process exits.
struct ReportedError {
  int code = 1;
};

// Marks the next `bytes` of the process heap for transparent huge pages (Linux, glibc; elsewhere nothing),
// for commands whose working set is large and scattered: the planner's searches touch tens to hundreds of
// MB of tables and caches at random, and on 4 KiB pages a tenth of their time went to TLB misses. Only
// the main thread's heap; nothing is touched until used. Call before the command allocates.
void back_heap_with_huge_pages(size_t bytes);

// The built-in example profile (schemas/examples/gpt-3.8b.profile.json, embedded at build time).
std::string_view builtin_profile_json();

// Each subcommand adds itself to `app` and sets `run` to be called when it was selected.
using Runner = std::function<void()>;
void add_plan_command(CLI::App& app, Runner& run);
void add_validate_command(CLI::App& app, Runner& run);
void add_simulate_command(CLI::App& app, Runner& run);
void add_train_command(CLI::App& app, Runner& run);
void add_profile_command(CLI::App& app, Runner& run);
void add_export_command(CLI::App& app, Runner& run);
void add_plugins_command(CLI::App& app, Runner& run);
// The lines of `pd2bw --version` about the plugins: each one's file, or why it cannot be used, from cheap
// checks only (no library is loaded; `pd2bw plugins` loads them).
std::string plugin_lines();

}  // namespace pd2bw::cli
