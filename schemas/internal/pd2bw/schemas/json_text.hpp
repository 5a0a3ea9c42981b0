// Strict parsing of JSON text, shared by every reader of pd2bw's files: nlohmann would silently keep the
// last of two equal keys in an object; this rejects them and names where.
// Internal header (schemas/internal): it exposes nlohmann::json, so only the sources of pd2bw_schemas and
// pd2bw_executor see it, through the pd2bw_schemas_internal target they link privately.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace pd2bw::schemas {

// Parses `text` as JSON. Throws SchemaError "(root): not valid JSON: ... (byte N)" on a syntax error and
// "<pointer>: duplicate key" when an object repeats a key.
nlohmann::json parse_json_text(std::string_view text);

// "<parent>/<escaped key>" per RFC 6901 ("~" -> "~0", "/" -> "~1"), and "<parent>/<index>".
std::string child_pointer(std::string_view parent, std::string_view key);
std::string child_pointer(std::string_view parent, std::size_t index);

}  // namespace pd2bw::schemas
