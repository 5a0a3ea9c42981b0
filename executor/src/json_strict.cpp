// Strict JSON reading for executor-owned files: duplicate-key detection during the parse, typed getters
// and unknown-key rejection, with messages that carry the file label and the JSON pointer.
#include "json_strict.hpp"

#include <limits>
#include <set>
#include <vector>

#include <fmt/format.h>

#include "pd2bw/error.hpp"

namespace pd2bw::executor::detail {
namespace {

std::string describe(const Json& v) {
  return v.is_number() ? "number " + v.dump() : std::string(v.type_name());
}

// nlohmann's messages start with "[json.exception.parse_error.101] "; users do not need the tag.
std::string strip_tag(const std::string& what) {
  const auto close = what.find("] ");
  return (!what.empty() && what.front() == '[' && close != std::string::npos) ? what.substr(close + 2) : what;
}

// Remembers, per open container, the keys seen so far and where we are, to name a duplicate key.
struct DuplicateFinder {
  struct Frame {
    bool is_object;
    std::set<std::string> keys;
    std::string key;
    std::size_t index = 0;
    bool started = false;
  };
  std::vector<Frame> frames;
  std::string duplicate;  // pointer of the first duplicate, empty if none

  void begin_element() {
    if (frames.empty() || frames.back().is_object) return;
    Frame& f = frames.back();
    f.index = f.started ? f.index + 1 : 0;
    f.started = true;
  }
  std::string parent_pointer() const {
    std::string p;
    for (std::size_t i = 0; i + 1 < frames.size(); ++i) {
      p = frames[i].is_object ? json_child(p, frames[i].key) : json_child(p, frames[i].index);
    }
    return p;
  }
  bool on_event(Json::parse_event_t event, const Json& parsed) {
    using E = Json::parse_event_t;
    if (event == E::object_start || event == E::array_start) {
      begin_element();
      frames.push_back(Frame{event == E::object_start, {}, {}, 0, false});
    } else if (event == E::object_end || event == E::array_end) {
      frames.pop_back();
    } else if (event == E::key) {
      const auto key = parsed.get<std::string>();
      if (!frames.back().keys.insert(key).second && duplicate.empty()) {
        duplicate = json_child(parent_pointer(), key);
      }
      frames.back().key = key;
    } else {
      begin_element();
    }
    return true;
  }
};

}  // namespace

Json parse_json_strict(std::string_view text, const std::string& label) {
  DuplicateFinder finder;
  Json::parser_callback_t cb = [&finder](int, Json::parse_event_t event, Json& parsed) {
    return finder.on_event(event, parsed);
  };
  Json out;
  try {
    out = Json::parse(text.begin(), text.end(), cb);
  } catch (const Json::exception& e) {
    json_fail(label, "", "not valid JSON: " + strip_tag(e.what()),
              "the file is truncated or corrupt; restore it or regenerate it");
  }
  if (!finder.duplicate.empty()) {
    json_fail(label, finder.duplicate, "duplicate key", "each key may appear once per object");
  }
  return out;
}

std::string json_child(std::string_view parent, std::string_view key) {
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

std::string json_child(std::string_view parent, std::size_t index) {
  return fmt::format("{}/{}", parent, index);
}

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
