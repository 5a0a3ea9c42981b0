// Reading and writing safetensors files (https://github.com/huggingface/safetensors format): an 8-byte
// little-endian header length N, N bytes of JSON naming each tensor's dtype, shape and byte range, then
// the packed row-major little-endian tensor data. pd2bw uses it for checkpoint stage files, so other
// tools (Python's safetensors, numpy) can open a pd2bw checkpoint.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

namespace pd2bw::executor {

// One tensor to write. Non-owning: `data` must stay valid during write_safetensors.
struct TensorView {
  std::string name;            // unique within a file, non-empty, not "__metadata__"
  std::string dtype;           // "F32", "F64" or "I64"
  std::vector<int64_t> shape;  // row-major; empty for a scalar; every dim >= 0
  std::span<const std::byte> data;  // product(shape) * element size bytes, little-endian (host order)
};

// A TensorView over `values` with dtype chosen from T (float -> F32, double -> F64, int64_t -> I64).
// Throws Error when product(shape) != values.size(). `values` must outlive the view.
template <typename T>
TensorView make_tensor_view(std::string name, std::vector<int64_t> shape, std::span<const T> values);

// Writes `path` + ".tmp" then renames it onto `path`, so a crash never leaves a half-written file
// under the final name. Deterministic bytes: compact JSON header with "__metadata__" first (keys
// sorted), tensors in the given order and packed in that order, header padded with spaces to a
// multiple of 8 bytes. Throws Error on a malformed view (bad dtype, duplicate name, size mismatch)
// and on I/O failure.
void write_safetensors(const std::string& path, const std::vector<TensorView>& tensors,
                       const std::map<std::string, std::string>& metadata);

// The whole content of a safetensors file, owned.
struct SafetensorsFile {
  std::string path;  // where it was read from (used in messages)
  std::map<std::string, std::string> metadata;
  struct Tensor {
    std::string dtype;  // "F32", "F64" or "I64"
    std::vector<int64_t> shape;
    std::vector<std::byte> data;  // little-endian, product(shape) * element size bytes
  };
  std::map<std::string, Tensor> tensors;

  // Copies tensor `name` into `out` (T = float, double or int64_t). Throws SchemaError naming the file
  // and the tensor when it is absent, its dtype does not match T, or it has not exactly out.size()
  // elements.
  template <typename T>
  void copy_to(const std::string& name, std::span<T> out) const;
};

// Reads `path` strictly. Throws UsageError when it cannot be read; SchemaError naming the path for a
// header length beyond the file, invalid JSON or a duplicate key, an unknown dtype, a shape that does
// not match its byte range, overlapping or out-of-range offsets, gaps between tensors, or bytes after
// the last tensor.
SafetensorsFile read_safetensors(const std::string& path);

// Lower-case hex SHA-256 of the file's bytes. Throws UsageError when it cannot be read.
std::string sha256_file(const std::string& path);

}  // namespace pd2bw::executor
