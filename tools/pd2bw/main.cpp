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
#include "pd2bw/executor/cpu_kernels.hpp"
#include "pd2bw/executor/process_group.hpp"
#include "pd2bw/schemas/common.hpp"

namespace pd2bw::cli {
namespace {
std::string g_command_line;
std::string g_error_context;
}

std::string command_line() { return g_command_line; }

void set_error_context(std::string context) { g_error_context = std::move(context); }

// A message as printed: inputs quoted in it are cut to a few hundred characters (a 10 MiB string in a
// file must not come back as a 10 MiB error line). Every run of more than 240 characters without a
// space keeps its first 160 and last 40; a message still over 4,000 characters keeps its first 3,000 and
// last 800. What is left out is counted in the text.
std::string bounded(std::string_view text) {
  constexpr size_t kRun = 240, kRunHead = 160, kRunTail = 40, kAll = 4000, kHead = 3000, kTail = 800;
  std::string out;
  size_t i = 0;
  while (i < text.size()) {
    size_t j = i;
    while (j < text.size() && text[j] != ' ' && text[j] != '\n') ++j;
    const std::string_view run = text.substr(i, j - i);
    if (run.size() > kRun)
      out += fmt::format("{}...[{} characters]...{}", run.substr(0, kRunHead), run.size() - kRunHead - kRunTail,
                         run.substr(run.size() - kRunTail));
    else
      out += run;
    if (j < text.size()) out += text[j];
    i = j + 1;
  }
  if (out.size() <= kAll) return out;
  return fmt::format("{} ...[{} characters]... {}", out.substr(0, kHead), out.size() - kHead - kTail,
                     out.substr(out.size() - kTail));
}

int report_error(const Error& e) {
  fmt::print(stderr, "pd2bw: error: {}{}\n", bounded(g_error_context), bounded(e.what()));
  if (!e.hint().empty()) fmt::print(stderr, "hint: {}\n", bounded(e.hint()));
  std::fflush(stderr);
  return static_cast<int>(e.code());
}

}  // namespace pd2bw::cli

namespace {

std::string version_text() {
  return fmt::format("pd2bw {} (git {})\nbackends: {}\ntransports: {}\ncpu kernels: {}",
                     pd2bw::schemas::pd2bw_version(), pd2bw::schemas::pd2bw_git_sha(),
                     fmt::join(pd2bw::executor::backend_names(), ", "),
                     fmt::join(pd2bw::executor::transport_names(), ", "), pd2bw::executor::cpu_kernels_description())
         + pd2bw::cli::plugin_lines();
}

}  // namespace

int main(int argc, char** argv) {
  std::string line = "pd2bw";
  for (int i = 1; i < argc; ++i) line += std::string(" ") + argv[i];
  pd2bw::cli::g_command_line = line;

  CLI::App app{"pd2bw: plan and run memory-efficient pipeline-parallel training (PipeDream-2BW)"};
  app.name("pd2bw");
  app.set_version_flag("--version", std::function<std::string()>(version_text));
  app.require_subcommand(1);
  pd2bw::cli::Runner run;
  pd2bw::cli::add_profile_command(app, run);
  pd2bw::cli::add_plan_command(app, run);
  pd2bw::cli::add_simulate_command(app, run);
  pd2bw::cli::add_train_command(app, run);
  pd2bw::cli::add_validate_command(app, run);
  pd2bw::cli::add_export_command(app, run);
  pd2bw::cli::add_plugins_command(app, run);
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
               pd2bw::cli::bounded(e.what()));
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
