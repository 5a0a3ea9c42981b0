// Private helper of pd2bw_executor: strict reading of the small JSON documents the executor owns (the
// safetensors header, the checkpoint manifest). Every failure is a SchemaError whose message reads
// "<label>: <JSON pointer>: <what>", so a user can find the file and the field.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace pd2bw::executor::detail {

using Json = nlohmann::json;
using OrderedJson = nlohmann::ordered_json;

// Parses `text`; a syntax error or a key repeated within one object throws SchemaError naming `label`.
Json parse_json_strict(std::string_view text, const std::string& label);

// "<parent>/<key>" with RFC 6901 escaping, and "<parent>/<index>".
std::string json_child(std::string_view parent, std::string_view key);
std::string json_child(std::string_view parent, std::size_t index);

// Throws SchemaError("<label>: <pointer or (root)>: <what>", hint).
[[noreturn]] void json_fail(const std::string& label, std::string_view pointer, std::string_view what,
                            std::string hint = {});

// Typed conversions of a value at `pointer`; throw via json_fail on a wrong type or range.
std::string json_string(const Json& v, const std::string& label, std::string_view pointer);
// A whole number >= min_value (floats, booleans and out-of-range integers are rejected).
int64_t json_int(const Json& v, const std::string& label, std::string_view pointer, int64_t min_value);
// A whole number in [0, 2^64).
uint64_t json_uint64(const Json& v, const std::string& label, std::string_view pointer);

// One JSON object: the constructor rejects a non-object and keys outside `allowed`; getters reject
// missing keys and wrong types. Holds references: `value` and `label` must outlive the reader.
class JsonObject {
 public:
  JsonObject(const Json& value, const std::string& label, std::string pointer,
             std::initializer_list<std::string_view> allowed);
  std::string at(std::string_view key) const { return json_child(pointer_, key); }
  const Json& get(std::string_view key) const;
  bool has(std::string_view key) const { return value_.contains(key); }
  std::string string(std::string_view key) const { return json_string(get(key), label_, at(key)); }
  int64_t integer(std::string_view key, int64_t min_value) const {
    return json_int(get(key), label_, at(key), min_value);
  }
  uint64_t uint64(std::string_view key) const { return json_uint64(get(key), label_, at(key)); }
  // A required array (elements unchecked).
  const Json& array(std::string_view key) const;

 private:
  const Json& value_;
  const std::string& label_;
  std::string pointer_;
};

}  // namespace pd2bw::executor::detail
