// Private helper of pd2bw_schemas: strict, pointer-carrying reading of parsed JSON. Every failure is a
// SchemaError whose message starts with the JSON pointer (RFC 6901) of the offending value, so a user can
// find the field in a file of thousands of lines.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "pd2bw/schemas/json_text.hpp"

namespace pd2bw::schemas::detail {

using Json = nlohmann::json;           // what readers walk (keys sorted; order is irrelevant on read)
using OrderedJson = nlohmann::ordered_json;  // what writers build (keys in struct-field order)

// Lower bound a numeric field must respect.
enum class Min { any, non_negative, positive };

using schemas::child_pointer;
using schemas::parse_json_text;

// How a pointer is shown in messages: the root ("") reads "(root)".
std::string show_pointer(std::string_view pointer);

// Throws SchemaError("<pointer>: <what>", hint).
[[noreturn]] void fail(std::string_view pointer, std::string_view what, std::string hint = {});

// Typed conversions of one value found at `pointer`.
std::string as_string(const Json& value, std::string_view pointer);
bool as_bool(const Json& value, std::string_view pointer);
// Rejects floats (1.5, 1.0, 1e3), booleans and integers beyond int64.
int64_t as_integer(const Json& value, std::string_view pointer, Min min = Min::any);
// Accepts integers and floats; rejects non-finite values.
double as_number(const Json& value, std::string_view pointer, Min min = Min::any);
// Checks the bound of an already-typed value.
void check_min(int64_t value, std::string_view pointer, Min min);
void check_min(double value, std::string_view pointer, Min min);

// A view of one JSON object at `pointer`. The constructor rejects a non-object and any key outside
// `allowed` (listing the allowed ones in the hint); the getters reject missing keys and wrong types.
class ObjectReader {
 public:
  ObjectReader(const Json& value, std::string pointer, std::initializer_list<std::string_view> allowed);

  const std::string& pointer() const { return pointer_; }
  std::string at(std::string_view key) const { return child_pointer(pointer_, key); }
  bool has(std::string_view key) const;
  // The raw value of a required key (throws "<pointer>/<key>: missing").
  const Json& get(std::string_view key) const;

  std::string string(std::string_view key) const;
  bool boolean(std::string_view key) const;
  int64_t integer(std::string_view key, Min min = Min::any) const;
  double number(std::string_view key, Min min = Min::any) const;
  // A required object, returned as a reader of its own.
  ObjectReader object(std::string_view key, std::initializer_list<std::string_view> allowed) const;
  // A required array; `read_one(element, pointer)` converts each element.
  template <class F>
  auto list(std::string_view key, F read_one) const {
    const Json& arr = get(key);
    const std::string base = at(key);
    if (!arr.is_array()) fail(base, "expected an array, got " + std::string(arr.type_name()));
    std::vector<decltype(read_one(arr, std::string{}))> out;
    out.reserve(arr.size());
    for (std::size_t i = 0; i < arr.size(); ++i) out.push_back(read_one(arr[i], child_pointer(base, i)));
    return out;
  }

 private:
  const Json& value_;
  std::string pointer_;
};

}  // namespace pd2bw::schemas::detail
