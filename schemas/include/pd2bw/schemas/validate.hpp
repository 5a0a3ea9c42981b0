// Recognises which of the three formats a JSON text is and checks it fully.
#pragma once

#include <string>
#include <string_view>

namespace pd2bw::schemas {

struct ValidationReport {
  std::string schema;          // "pd2bw.profile", "pd2bw.cluster" or "pd2bw.plan"
  std::string schema_version;  // as written in the file
  std::string summary;         // one line for humans, e.g. "gpt-3.8b, 34 layers, microbatch 1,2,4,8"
};

// Throws SchemaError (with a JSON pointer) when the text is not a valid pd2bw file of any kind.
ValidationReport validate_document(std::string_view json_text);

}  // namespace pd2bw::schemas
