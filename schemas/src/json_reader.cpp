// Strict JSON reading for the pd2bw formats: syntax and duplicate-key detection, typed getters that
// name the JSON pointer of every problem, and unknown-key rejection.
#include "json_reader.hpp"

#include <cmath>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "pd2bw/error.hpp"

namespace pd2bw::schemas::detail {
namespace {

const char* const kSchemaHint = "see schemas/README.md for every field, its type and its unit";

// Builds the DOM from nlohmann's SAX events and rejects duplicate keys, in time linear in the text.
// (nlohmann's own callback parser scans the parent's members after every object ends: quadratic in the
// length of an array of objects, 30 s for a 20k-stage plan under ASan.) Each open container is the
// last element of its parent, so the pointers on the stack stay valid while it is filled.
class DomBuilder final : public nlohmann::json_sax<Json> {
 public:
  explicit DomBuilder(std::string_view hint) : hint_(hint) {}
  Json take() { return std::move(root_); }

  bool null() override { return add(Json(nullptr)); }
  bool boolean(bool v) override { return add(Json(v)); }
  bool number_integer(number_integer_t v) override { return add(Json(v)); }
  bool number_unsigned(number_unsigned_t v) override { return add(Json(v)); }
  bool number_float(number_float_t v, const string_t& /*text*/) override { return add(Json(v)); }
  bool string(string_t& v) override { return add(Json(std::move(v))); }
  bool binary(binary_t& v) override {
    Json j = Json::binary({});
    j.get_binary() = std::move(v);
    return add(std::move(j));
  }
  bool start_object(std::size_t /*elements*/) override { return open(Json::object()); }
  bool start_array(std::size_t /*elements*/) override { return open(Json::array()); }
  bool end_object() override { return close(); }
  bool end_array() override { return close(); }
  bool key(string_t& k) override {
    Frame& top = frames_.back();
    if (top.node->contains(k))
      fail(child_pointer(pointer_of(frames_.size() - 1), k), "duplicate key",
           "each key may appear once per object; remove one of the copies");
    top.key = std::move(k);
    return true;
  }
  bool parse_error(std::size_t position, const std::string& /*last_token*/,
                   const nlohmann::detail::exception& e) override {
    const bool syntax = dynamic_cast<const Json::parse_error*>(&e) != nullptr;
    fail("", syntax ? fmt::format("not valid JSON: {} (byte {})", strip_tag(e.what()), position)
                    : fmt::format("not valid JSON: {}", strip_tag(e.what())),
         std::string(hint_));
  }

 private:
  struct Frame {
    Json* node;
    std::string key;    // current key (objects)
    int64_t index = 0;  // elements so far (arrays)
  };

  static std::string strip_tag(const std::string& what);
  // Places `v` in the innermost container (or as the root); returns where it landed.
  Json* place(Json&& v) {
    if (frames_.empty()) {
      root_ = std::move(v);
      return &root_;
    }
    Frame& top = frames_.back();
    if (top.node->is_array()) {
      ++top.index;
      top.node->get_ref<Json::array_t&>().push_back(std::move(v));
      return &top.node->get_ref<Json::array_t&>().back();
    }
    return &(top.node->get_ref<Json::object_t&>()[top.key] = std::move(v));
  }
  bool add(Json&& v) {
    place(std::move(v));
    return true;
  }
  bool open(Json&& container) {
    frames_.push_back(Frame{place(std::move(container)), {}, 0});
    return true;
  }
  bool close() {
    frames_.pop_back();
    return true;
  }
  // The pointer of the container frames_[depth] (only built for a message).
  std::string pointer_of(std::size_t depth) const {
    std::string p;
    for (std::size_t i = 0; i < depth; ++i) {
      const Frame& f = frames_[i];
      p = f.node->is_object() ? child_pointer(p, f.key) : child_pointer(p, static_cast<std::size_t>(f.index - 1));
    }
    return p;
  }

  std::string_view hint_;
  Json root_;
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

std::string DomBuilder::strip_tag(const std::string& what) { return strip_exception_tag(what); }

std::string describe(const Json& value) {
  if (value.is_number()) return "number " + value.dump();
  return value.type_name();
}

}  // namespace

}  // namespace pd2bw::schemas::detail

namespace pd2bw::schemas {

nlohmann::json parse_json_text(std::string_view text) {
  const char* const hint = "fix the JSON syntax near the reported position (a truncated file, a trailing "
                           "comma or an unquoted key are common causes)";
  detail::DomBuilder builder(hint);
  try {
    detail::Json::sax_parse(text.data(), text.data() + text.size(), &builder);
  } catch (const detail::Json::exception& e) {
    detail::fail("", fmt::format("not valid JSON: {}", detail::strip_exception_tag(e.what())), hint);
  }
  return builder.take();
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
