// `pd2bw validate FILE...`: checks profile, cluster and plan files against their formats.
#include <fmt/format.h>

#include "cli.hpp"
#include "pd2bw/error.hpp"
#include "pd2bw/schemas/common.hpp"
#include "pd2bw/schemas/validate.hpp"

namespace pd2bw::cli {

void add_validate_command(CLI::App& app, Runner& run) {
  auto* cmd = app.add_subcommand(
      "validate", "Check pd2bw files (profile, cluster or plan; the kind is read from the file's "
                  "\"schema\" field) and say exactly what is wrong");
  auto files = std::make_shared<std::vector<std::string>>();
  cmd->add_option("files", *files, "JSON files to check")->required();
  cmd->callback([cmd, files, &run] {
    (void)cmd;
    run = [files] {
      for (const auto& path : *files) {
        const std::string text = schemas::read_text_file(path);
        try {
          const auto r = schemas::validate_document(text);
          fmt::print("{}: ok ({} {}): {}\n", path, r.schema, r.schema_version, r.summary);
        } catch (const SchemaError& e) {
          throw SchemaError(fmt::format("{}: {}", path, e.what()), e.hint());
        }
      }
    };
  });
}

}  // namespace pd2bw::cli
