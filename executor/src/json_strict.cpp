// Strict JSON reading for executor-owned files: the schemas library's strict parse, typed getters and
// unknown-key rejection, with messages that carry the file label and the JSON pointer.
#include "json_strict.hpp"

#include <limits>
#include <vector>

#include <fmt/format.h>

#include "pd2bw/error.hpp"
#include "pd2bw/schemas/json_text.hpp"

namespace pd2bw::executor::detail {
namespace {

std::string describe(const Json& v) {
  return v.is_number() ? "number " + v.dump() : std::string(v.type_name());
}

}  // namespace

// The syntax and duplicate-key checks are the schemas library's; this adds the file's label.
Json parse_json_strict(std::string_view text, const std::string& label) {
  try {
    return schemas::parse_json_text(text);
  } catch (const SchemaError& e) {
    throw SchemaError(fmt::format("{}: {}", label, e.what()),
                      e.hint().empty() ? "the file is truncated or corrupt; restore it or regenerate it" : e.hint());
  }
}

std::string json_child(std::string_view parent, std::string_view key) { return schemas::child_pointer(parent, key); }

std::string json_child(std::string_view parent, std::size_t index) { return schemas::child_pointer(parent, index); }

void json_fail(const std::string& label, std::string_view pointer, std::string_view what, std::string hint) {
  throw SchemaError(fmt::format("{}: {}: {}", label, pointer.empty() ? "(root)" : pointer, what),
                    std::move(hint));
}

std::string json_string(const Json& v, const std::string& label, std::string_view pointer) {
  if (!v.is_string()) json_fail(label, pointer, "expected a string, got " + describe(v));
  return v.get<std::string>();
}

int64_t json_int(const Json& v, const std::string& label, std::string_view pointer, int64_t min_value) {
  const bool too_big = v.is_number_unsigned() &&
                       v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
  if (!v.is_number_integer() || too_big) {
    json_fail(label, pointer, "expected a whole number in int64 range, got " + describe(v));
  }
  const auto x = v.get<int64_t>();
  if (x < min_value) json_fail(label, pointer, fmt::format("must be >= {}, got {}", min_value, x));
  return x;
}

uint64_t json_uint64(const Json& v, const std::string& label, std::string_view pointer) {
  if (v.is_number_unsigned()) return v.get<uint64_t>();
  if (v.is_number_integer() && v.get<int64_t>() >= 0) return static_cast<uint64_t>(v.get<int64_t>());
  json_fail(label, pointer, "expected a whole number in [0, 2^64), got " + describe(v));
}

JsonObject::JsonObject(const Json& value, const std::string& label, std::string pointer,
                       std::initializer_list<std::string_view> allowed)
    : value_(value), label_(label), pointer_(std::move(pointer)) {
  if (!value_.is_object()) json_fail(label_, pointer_, "expected an object, got " + describe(value_));
  for (const auto& item : value_.items()) {
    bool known = false;
    for (std::string_view k : allowed) known = known || k == item.key();
    if (!known) {
      json_fail(label_, at(item.key()), "unknown key",
                fmt::format("the keys allowed here are: {}", fmt::join(allowed, ", ")));
    }
  }
}

const Json& JsonObject::get(std::string_view key) const {
  const auto it = value_.find(key);
  if (it == value_.end()) json_fail(label_, at(key), "missing", "add the key");
  return *it;
}

const Json& JsonObject::array(std::string_view key) const {
  const Json& v = get(key);
  if (!v.is_array()) json_fail(label_, at(key), "expected an array, got " + describe(v));
  return v;
}

}  // namespace pd2bw::executor::detail
