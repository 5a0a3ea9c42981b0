// safetensors writing (deterministic, crash-safe) and strict reading; see safetensors.hpp for the format.
#include "pd2bw/executor/safetensors.hpp"

#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>
#include <set>
#include <string_view>

#include <fmt/format.h>

#include "file_bytes.hpp"
#include "json_strict.hpp"
#include "pd2bw/error.hpp"
#include "pd2bw/schemas/common.hpp"

namespace pd2bw::executor {
namespace {

static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian; this build copies it as host-order bytes");

constexpr std::string_view kMetadataKey = "__metadata__";
constexpr uint64_t kMaxHeaderBytes = uint64_t{100} << 20;  // as the reference implementation: 100 MB

// Bytes per element of a supported dtype, 0 for anything else.
int64_t element_bytes(std::string_view dtype) {
  if (dtype == "F32") return 4;
  if (dtype == "F64" || dtype == "I64") return 8;
  return 0;
}

template <typename T>
constexpr std::string_view dtype_of() {
  if constexpr (std::is_same_v<T, float>) return "F32";
  if constexpr (std::is_same_v<T, double>) return "F64";
  if constexpr (std::is_same_v<T, int64_t>) return "I64";
}

// Bytes of a tensor of `shape` and element size `esize`; false on a negative dim or int64 overflow.
bool byte_size(const std::vector<int64_t>& shape, int64_t esize, int64_t& out) {
  int64_t n = esize;
  for (int64_t d : shape) {
    if (d < 0) return false;
    if (d != 0 && n > std::numeric_limits<int64_t>::max() / d) return false;
    n *= d;
  }
  out = n;
  return true;
}

void check_view(const TensorView& t, std::set<std::string>& seen, const std::string& path) {
  const int64_t esize = element_bytes(t.dtype);
  int64_t bytes = 0;
  if (t.name.empty() || t.name == kMetadataKey || !seen.insert(t.name).second) {
    throw Error(fmt::format("{}: tensor name \"{}\" is empty, reserved or repeated", path, t.name));
  }
  if (esize == 0) throw Error(fmt::format("{}: tensor \"{}\" has unsupported dtype \"{}\"", path, t.name, t.dtype));
  if (!byte_size(t.shape, esize, bytes) || bytes != static_cast<int64_t>(t.data.size())) {
    throw Error(fmt::format("{}: tensor \"{}\" has {} data bytes, which does not match its shape [{}] of {}", path,
                            t.name, t.data.size(), fmt::join(t.shape, ", "), t.dtype));
  }
}

std::string encode_u64le(uint64_t v) {
  std::string out(8, '\0');
  for (std::size_t i = 0; i < 8; ++i) out[i] = static_cast<char>((v >> (8 * i)) & 0xFF);
  return out;
}

uint64_t decode_u64le(const std::string& bytes) {
  uint64_t v = 0;
  for (std::size_t i = 0; i < 8; ++i) v |= static_cast<uint64_t>(static_cast<unsigned char>(bytes[i])) << (8 * i);
  return v;
}

[[noreturn]] void corrupt(const std::string& path, const std::string& what) {
  throw SchemaError(fmt::format("{}: not a valid safetensors file: {}", path, what),
                    "the checkpoint file is truncated or corrupt; restore it or start from another checkpoint");
}

struct Range {
  int64_t begin, end;
  std::string name;
};

std::map<std::string, std::string> read_metadata(const detail::Json& v, const std::string& path) {
  const std::string pointer = detail::json_child("", kMetadataKey);
  if (!v.is_object()) detail::json_fail(path, pointer, "expected an object of strings");
  std::map<std::string, std::string> out;
  for (const auto& item : v.items()) {
    out[item.key()] = detail::json_string(item.value(), path, detail::json_child(pointer, item.key()));
  }
  return out;
}

// Parses one tensor entry of the header; its byte range must lie within [0, data_size].
SafetensorsFile::Tensor read_entry(const detail::Json& v, const std::string& name, const std::string& path,
                                   int64_t data_size, Range& range) {
  const std::string pointer = detail::json_child("", name);
  const detail::JsonObject r(v, path, pointer, {"dtype", "shape", "data_offsets"});
  SafetensorsFile::Tensor t;
  t.dtype = r.string("dtype");
  const int64_t esize = element_bytes(t.dtype);
  if (esize == 0) {
    detail::json_fail(path, r.at("dtype"), fmt::format("unsupported dtype \"{}\"", t.dtype),
                      "pd2bw reads F32, F64 and I64 tensors");
  }
  const detail::Json& shape = r.array("shape");
  for (std::size_t i = 0; i < shape.size(); ++i) {
    t.shape.push_back(detail::json_int(shape[i], path, detail::json_child(r.at("shape"), i), 0));
  }
  const detail::Json& offsets = r.array("data_offsets");
  if (offsets.size() != 2) detail::json_fail(path, r.at("data_offsets"), "expected [begin, end]");
  range.begin = detail::json_int(offsets[0], path, detail::json_child(r.at("data_offsets"), 0), 0);
  range.end = detail::json_int(offsets[1], path, detail::json_child(r.at("data_offsets"), 1), 0);
  range.name = name;
  int64_t bytes = 0;
  if (range.begin > range.end || range.end > data_size) {
    corrupt(path, fmt::format("tensor \"{}\" has offsets [{}, {}] outside the {}-byte data section", name,
                              range.begin, range.end, data_size));
  }
  if (!byte_size(t.shape, esize, bytes) || bytes != range.end - range.begin) {
    corrupt(path, fmt::format("tensor \"{}\" spans {} bytes but its shape [{}] of {} needs a different size", name,
                              range.end - range.begin, fmt::join(t.shape, ", "), t.dtype));
  }
  return t;
}

// Tensors must tile the data section exactly: no overlap, no gap, nothing after the last one.
void check_tiling(std::vector<Range> ranges, int64_t data_size, const std::string& path) {
  std::sort(ranges.begin(), ranges.end(),
            [](const Range& a, const Range& b) { return a.begin != b.begin ? a.begin < b.begin : a.end < b.end; });
  int64_t pos = 0;
  std::string previous = "the start of the data section";
  for (const Range& r : ranges) {
    if (r.begin < pos) corrupt(path, fmt::format("tensor \"{}\" overlaps {}", r.name, previous));
    if (r.begin > pos) corrupt(path, fmt::format("{} unused bytes before tensor \"{}\"", r.begin - pos, r.name));
    pos = r.end;
    previous = fmt::format("tensor \"{}\"", r.name);
  }
  if (pos != data_size) corrupt(path, fmt::format("{} trailing bytes after the last tensor", data_size - pos));
}

}  // namespace

template <typename T>
TensorView make_tensor_view(std::string name, std::vector<int64_t> shape, std::span<const T> values) {
  int64_t bytes = 0;
  if (!byte_size(shape, static_cast<int64_t>(sizeof(T)), bytes) || bytes != static_cast<int64_t>(values.size_bytes())) {
    throw Error(fmt::format("tensor \"{}\": {} values do not fill shape [{}]", name, values.size(),
                            fmt::join(shape, ", ")));
  }
  return TensorView{std::move(name), std::string(dtype_of<T>()), std::move(shape), std::as_bytes(values)};
}

void write_safetensors(const std::string& path, const std::vector<TensorView>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  std::set<std::string> seen;
  detail::OrderedJson header = detail::OrderedJson::object();
  if (!metadata.empty()) {
    detail::OrderedJson meta = detail::OrderedJson::object();
    for (const auto& [k, v] : metadata) meta[k] = v;  // std::map: sorted keys
    header[std::string(kMetadataKey)] = std::move(meta);
  }
  std::vector<std::string_view> pieces(2);
  int64_t offset = 0;
  for (const TensorView& t : tensors) {
    check_view(t, seen, path);
    const auto end = offset + static_cast<int64_t>(t.data.size());
    header[t.name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {offset, end}}};
    offset = end;
    pieces.emplace_back(reinterpret_cast<const char*>(t.data.data()), t.data.size());
  }
  std::string text = header.dump(-1, ' ', false, detail::OrderedJson::error_handler_t::replace);
  text.append((8 - text.size() % 8) % 8, ' ');  // keeps the data section 8-byte aligned
  const std::string length = encode_u64le(text.size());
  pieces[0] = length;
  pieces[1] = text;
  detail::write_file_replacing(path, pieces);
}

SafetensorsFile read_safetensors(const std::string& path) {
  const std::string bytes = detail::read_file_bytes(path, "checkpoint file");
  if (bytes.size() < 8) corrupt(path, fmt::format("{} bytes is too short for the 8-byte header length", bytes.size()));
  const uint64_t n = decode_u64le(bytes);
  if (n > bytes.size() - 8 || n > kMaxHeaderBytes) {
    corrupt(path, fmt::format("header length {} exceeds the {} bytes that follow it", n, bytes.size() - 8));
  }
  const std::string_view header_text(bytes.data() + 8, static_cast<std::size_t>(n));
  const detail::Json root = detail::parse_json_strict(header_text, path);
  if (!root.is_object()) detail::json_fail(path, "", "the header must be a JSON object");
  const auto data_size = static_cast<int64_t>(bytes.size() - 8 - n);
  const char* data = bytes.data() + 8 + n;
  SafetensorsFile out;
  out.path = path;
  std::vector<Range> ranges;
  for (const auto& item : root.items()) {
    if (item.key() == kMetadataKey) {
      out.metadata = read_metadata(item.value(), path);
      continue;
    }
    Range range;
    SafetensorsFile::Tensor t = read_entry(item.value(), item.key(), path, data_size, range);
    const auto* first = reinterpret_cast<const std::byte*>(data + range.begin);
    t.data.assign(first, first + (range.end - range.begin));
    out.tensors.emplace(item.key(), std::move(t));
    ranges.push_back(std::move(range));
  }
  check_tiling(std::move(ranges), data_size, path);
  return out;
}

template <typename T>
void SafetensorsFile::copy_to(const std::string& name, std::span<T> out) const {
  const auto it = tensors.find(name);
  const char* const hint = "the checkpoint does not match this model or plan; resume with the same plan";
  if (it == tensors.end()) throw SchemaError(fmt::format("{}: tensor \"{}\" is missing", path, name), hint);
  const Tensor& t = it->second;
  if (t.dtype != dtype_of<T>()) {
    throw SchemaError(fmt::format("{}: tensor \"{}\" has dtype {}, expected {}", path, name, t.dtype, dtype_of<T>()),
                      hint);
  }
  if (t.data.size() != out.size_bytes()) {
    throw SchemaError(fmt::format("{}: tensor \"{}\" has {} elements, expected {}", path, name,
                                  t.data.size() / sizeof(T), out.size()),
                      hint);
  }
  if (!t.data.empty()) std::memcpy(out.data(), t.data.data(), t.data.size());
}

std::string sha256_file(const std::string& path) {
  return schemas::sha256_hex(detail::read_file_bytes(path, "file"));
}

template TensorView make_tensor_view<float>(std::string, std::vector<int64_t>, std::span<const float>);
template TensorView make_tensor_view<double>(std::string, std::vector<int64_t>, std::span<const double>);
template TensorView make_tensor_view<int64_t>(std::string, std::vector<int64_t>, std::span<const int64_t>);
template void SafetensorsFile::copy_to<float>(const std::string&, std::span<float>) const;
template void SafetensorsFile::copy_to<double>(const std::string&, std::span<double>) const;
template void SafetensorsFile::copy_to<int64_t>(const std::string&, std::span<int64_t>) const;

}  // namespace pd2bw::executor
