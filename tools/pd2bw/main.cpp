// Entry point of the pd2bw tool: parses the command line, dispatches to a subcommand, and turns
// errors into "pd2bw: error: ..." messages and exit codes (0 ok, 1 runtime, 2 usage/bad input,
// 3 no feasible plan).
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstdio>
#include <exception>

#include "cli.hpp"
#include "flag_checks.hpp"
#include "pd2bw/error.hpp"
#include "pd2bw/executor/backend.hpp"
#include "pd2bw/executor/process_group.hpp"
#include "pd2bw/schemas/common.hpp"

namespace pd2bw::cli {
namespace {
std::string g_command_line;
std::string g_error_context;
}

std::string command_line() { return g_command_line; }

void set_error_context(std::string context) { g_error_context = std::move(context); }

int report_error(const Error& e) {
  fmt::print(stderr, "pd2bw: error: {}{}\n", g_error_context, e.what());
  if (!e.hint().empty()) fmt::print(stderr, "hint: {}\n", e.hint());
  std::fflush(stderr);
  return static_cast<int>(e.code());
}

}  // namespace pd2bw::cli

namespace {

std::string version_text() {
  return fmt::format("pd2bw {} (git {})\nbackends: {}\ntransports: {}", pd2bw::schemas::pd2bw_version(),
                     pd2bw::schemas::pd2bw_git_sha(), fmt::join(pd2bw::executor::backend_names(), ", "),
                     fmt::join(pd2bw::executor::transport_names(), ", "));
}

}  // namespace

int main(int argc, char** argv) {
  std::string line = "pd2bw";
  for (int i = 1; i < argc; ++i) line += std::string(" ") + argv[i];
  pd2bw::cli::g_command_line = line;

  CLI::App app{"pd2bw: plan and run memory-efficient pipeline-parallel training (PipeDream-2BW)"};
  app.name("pd2bw");
  app.set_version_flag("--version", version_text());
  app.require_subcommand(1);
  pd2bw::cli::Runner run;
  pd2bw::cli::add_profile_command(app, run);
  pd2bw::cli::add_plan_command(app, run);
  pd2bw::cli::add_simulate_command(app, run);
  pd2bw::cli::add_train_command(app, run);
  pd2bw::cli::add_validate_command(app, run);
  pd2bw::cli::add_strict_number_checks(app);
  app.footer("Units: sizes accept B, KiB, MiB, GiB, TiB (binary) and KB, MB, GB, TB (decimal); "
             "bandwidths are GB/s (1e9 bytes/s); times are ms.\nExit codes: 0 ok, 1 runtime error, "
             "2 bad usage or input, 3 no feasible plan.");
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    fmt::print(stderr, "pd2bw: error: {}\nhint: run 'pd2bw --help' or 'pd2bw <command> --help'\n",
               e.what());
    return static_cast<int>(pd2bw::ExitCode::usage);
  }
  try {
    run();
    return 0;
  } catch (const pd2bw::cli::ReportedError& r) {
    return r.code;
  } catch (const pd2bw::Error& e) {
    return pd2bw::cli::report_error(e);
  } catch (const std::bad_alloc&) {
    return pd2bw::cli::report_error(pd2bw::Error("out of host memory"));
  } catch (const std::exception& e) {
    return pd2bw::cli::report_error(pd2bw::Error(fmt::format("internal error: {}", e.what()),
                                                 "please report this with the command line and input files"));
  }
}
