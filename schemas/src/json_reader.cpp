// Strict JSON reading for the pd2bw formats: syntax and duplicate-key detection, typed getters that
// name the JSON pointer of every problem, and unknown-key rejection.
#include "json_reader.hpp"

#include <cmath>
#include <limits>
#include <set>

#include <fmt/format.h>

#include "pd2bw/error.hpp"

namespace pd2bw::schemas::detail {
namespace {

const char* const kSchemaHint = "see schemas/README.md for every field, its type and its unit";

// Tracks where the parser is (for duplicate-key messages) while nlohmann builds the DOM.
class PathTracker {
 public:
  bool on_event(Json::parse_event_t event, const Json& parsed) {
    using E = Json::parse_event_t;
    switch (event) {
      case E::object_start:
      case E::array_start:
        begin_element();
        frames_.push_back(Frame{event == E::object_start, {}, {}, -1});
        break;
      case E::object_end:
      case E::array_end:
        frames_.pop_back();
        break;
      case E::key: on_key(parsed.get<std::string>()); break;
      case E::value: begin_element(); break;
    }
    return true;
  }

 private:
  struct Frame {
    bool is_object;
    std::set<std::string> keys;
    std::string key;  // current key (objects)
    int64_t index;    // current element (arrays)
  };

  void begin_element() {
    if (!frames_.empty() && !frames_.back().is_object) ++frames_.back().index;
  }
  void on_key(const std::string& key) {
    Frame& top = frames_.back();
    if (!top.keys.insert(key).second) {
      fail(child_pointer(parent_pointer(), key), "duplicate key",
           "each key may appear once per object; remove one of the copies");
    }
    top.key = key;
  }
  // Pointer of the innermost open container.
  std::string parent_pointer() const {
    std::string p;
    for (std::size_t i = 0; i + 1 < frames_.size(); ++i) {
      const Frame& f = frames_[i];
      p = f.is_object ? child_pointer(p, f.key) : child_pointer(p, static_cast<std::size_t>(f.index));
    }
    return p;
  }

  std::vector<Frame> frames_;
};

// nlohmann prefixes its messages with "[json.exception.<kind>.<id>] "; users do not need that.
std::string strip_exception_tag(const std::string& what) {
  if (!what.empty() && what.front() == '[') {
    const auto close = what.find("] ");
    if (close != std::string::npos) return what.substr(close + 2);
  }
  return what;
}

std::string describe(const Json& value) {
  if (value.is_number()) return "number " + value.dump();
  return value.type_name();
}

}  // namespace

}  // namespace pd2bw::schemas::detail

namespace pd2bw::schemas {

nlohmann::json parse_json_text(std::string_view text) {
  detail::PathTracker tracker;
  detail::Json::parser_callback_t cb = [&tracker](int /*depth*/, detail::Json::parse_event_t event, detail::Json& parsed) {
    return tracker.on_event(event, parsed);
  };
  const char* const hint = "fix the JSON syntax near the reported position (a truncated file, a trailing "
                           "comma or an unquoted key are common causes)";
  try {
    return detail::Json::parse(text.data(), text.data() + text.size(), cb);
  } catch (const detail::Json::parse_error& e) {
    detail::fail("", fmt::format("not valid JSON: {} (byte {})", detail::strip_exception_tag(e.what()), e.byte), hint);
  } catch (const detail::Json::exception& e) {
    detail::fail("", fmt::format("not valid JSON: {}", detail::strip_exception_tag(e.what())), hint);
  }
}

std::string child_pointer(std::string_view parent, std::string_view key) {
  std::string out(parent);
  out.push_back('/');
  for (char c : key) {
    if (c == '~') {
      out += "~0";
    } else if (c == '/') {
      out += "~1";
    } else {
      out.push_back(c);
    }
  }
  return out;
}

std::string child_pointer(std::string_view parent, std::size_t index) {
  return fmt::format("{}/{}", parent, index);
}

}  // namespace pd2bw::schemas

namespace pd2bw::schemas::detail {

std::string show_pointer(std::string_view pointer) {
  return pointer.empty() ? std::string("(root)") : std::string(pointer);
}

void fail(std::string_view pointer, std::string_view what, std::string hint) {
  throw SchemaError(fmt::format("{}: {}", show_pointer(pointer), what), std::move(hint));
}

std::string as_string(const Json& value, std::string_view pointer) {
  if (!value.is_string()) fail(pointer, "expected a string, got " + describe(value), kSchemaHint);
  return value.get<std::string>();
}

bool as_bool(const Json& value, std::string_view pointer) {
  if (!value.is_boolean()) {
    fail(pointer, "expected true or false, got " + describe(value), "write true or false (no quotes)");
  }
  return value.get<bool>();
}

int64_t as_integer(const Json& value, std::string_view pointer, Min min) {
  if (value.is_number_unsigned()) {
    if (value.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      fail(pointer, "integer " + value.dump() + " is out of range", "values must fit in a signed 64-bit integer");
    }
  } else if (!value.is_number_integer()) {
    fail(pointer, "expected an integer, got " + describe(value),
         "write a whole number without a decimal point or exponent (e.g. 4096)");
  }
  const auto v = value.get<int64_t>();
  check_min(v, pointer, min);
  return v;
}

double as_number(const Json& value, std::string_view pointer, Min min) {
  if (!value.is_number()) fail(pointer, "expected a number, got " + describe(value), kSchemaHint);
  const auto v = value.get<double>();
  if (!std::isfinite(v)) fail(pointer, "must be a finite number", "write a finite decimal number");
  check_min(v, pointer, min);
  return v;
}

void check_min(int64_t value, std::string_view pointer, Min min) {
  if (min == Min::positive && value <= 0) fail(pointer, fmt::format("must be > 0, got {}", value), kSchemaHint);
  if (min == Min::non_negative && value < 0) {
    fail(pointer, fmt::format("must be >= 0, got {}", value), kSchemaHint);
  }
}

void check_min(double value, std::string_view pointer, Min min) {
  if (!std::isfinite(value)) fail(pointer, "must be a finite number", "write a finite decimal number");
  if (min == Min::positive && !(value > 0)) fail(pointer, fmt::format("must be > 0, got {}", value), kSchemaHint);
  if (min == Min::non_negative && !(value >= 0)) {
    fail(pointer, fmt::format("must be >= 0, got {}", value), kSchemaHint);
  }
}

ObjectReader::ObjectReader(const Json& value, std::string pointer,
                           std::initializer_list<std::string_view> allowed)
    : value_(value), pointer_(std::move(pointer)) {
  if (!value_.is_object()) fail(pointer_, "expected an object, got " + describe(value_), kSchemaHint);
  for (const auto& item : value_.items()) {
    bool known = false;
    for (std::string_view k : allowed) known = known || (k == item.key());
    if (!known) {
      fail(at(item.key()), "unknown key",
           fmt::format("check the spelling; the keys allowed here are: {}", fmt::join(allowed, ", ")));
    }
  }
}

bool ObjectReader::has(std::string_view key) const {
  return value_.contains(key);
}

const Json& ObjectReader::get(std::string_view key) const {
  const auto it = value_.find(key);
  if (it == value_.end()) fail(at(key), "missing", std::string("add the key; ") + kSchemaHint);
  return *it;
}

std::string ObjectReader::string(std::string_view key) const {
  return as_string(get(key), at(key));
}

bool ObjectReader::boolean(std::string_view key) const {
  return as_bool(get(key), at(key));
}

int64_t ObjectReader::integer(std::string_view key, Min min) const {
  return as_integer(get(key), at(key), min);
}

double ObjectReader::number(std::string_view key, Min min) const {
  return as_number(get(key), at(key), min);
}

ObjectReader ObjectReader::object(std::string_view key, std::initializer_list<std::string_view> allowed) const {
  return ObjectReader(get(key), at(key), allowed);
}

}  // namespace pd2bw::schemas::detail
