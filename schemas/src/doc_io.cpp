// Reading and writing the pieces shared by the profile, cluster and plan formats: the schema header,
// provenance, the model description and the device description.
#include "doc_io.hpp"

#include <array>
#include <charconv>

#include <fmt/format.h>

namespace pd2bw::schemas::detail {
namespace {

// Splits "MAJOR.MINOR.PATCH" (decimal, no leading zeros, as semver says); false for any other shape.
bool parse_semver(std::string_view s, std::array<int, 3>& out) {
  for (std::size_t part = 0; part < 3; ++part) {
    const std::size_t dot = s.find('.');
    const bool last = part == 2;
    if (last != (dot == std::string_view::npos)) return false;
    const std::string_view digits = last ? s : s.substr(0, dot);
    if (digits.empty() || digits.size() > 6 || (digits.size() > 1 && digits[0] == '0')) return false;
    for (char c : digits) {
      if (c < '0' || c > '9') return false;
    }
    std::from_chars(digits.data(), digits.data() + digits.size(), out[part]);
    if (!last) s.remove_prefix(dot + 1);
  }
  return true;
}

// The noun a kind is called by in messages.
std::string_view kind_noun(std::string_view kind) {
  if (kind == kProfileKind) return "profile";
  if (kind == kClusterKind) return "cluster";
  if (kind == kPlanKind) return "plan";
  if (kind == "pd2bw.checkpoint") return "checkpoint manifest";
  return {};
}

}  // namespace

void check_kind(const Json& root, std::string_view kind) {
  if (!root.is_object()) return;
  const auto it = root.find("schema");
  if (it == root.end() || !it->is_string()) return;
  const std::string given = it->get<std::string>();
  const std::string_view noun = kind_noun(given);
  if (given == kind || noun.empty()) return;
  fail("/schema", fmt::format("this is a {} ({}), not a {}", noun, given, kind_noun(kind)),
       fmt::format("give a {} file here; `pd2bw validate FILE` tells which kind a file is", kind_noun(kind)));
}

void check_header(const ObjectReader& root, std::string_view kind) {
  const std::string schema = root.string("schema");
  if (schema != kind) {
    fail(root.at("schema"), fmt::format("expected \"{}\", got \"{}\"", kind, schema),
         fmt::format("this input must be a {} file; `pd2bw validate FILE` tells which kind a file is", kind));
  }
  const std::string version = root.string("schema_version");
  std::array<int, 3> v{};
  if (!parse_semver(version, v)) {
    fail(root.at("schema_version"), fmt::format("\"{}\" is not a version of the form MAJOR.MINOR.PATCH", version),
         fmt::format("write \"{}\"", kSchemaVersion));
  }
  if (v[0] != kSchemaMajor) {
    fail(root.at("schema_version"),
         fmt::format("schema version {} is not supported; this pd2bw reads major version {} (writes {})", version,
                     kSchemaMajor, kSchemaVersion),
         fmt::format("regenerate the file with this pd2bw, or use a pd2bw release that reads {} version {}.x",
                     kind, v[0]));
  }
}

OrderedJson header_json(std::string_view kind) {
  OrderedJson out = OrderedJson::object();
  out["schema"] = kind;
  out["schema_version"] = kSchemaVersion;
  return out;
}

std::string dump_text(const OrderedJson& root) {
  return root.dump(2, ' ', false, OrderedJson::error_handler_t::replace) + "\n";
}

Provenance read_provenance(const ObjectReader& parent, std::string_view key) {
  const ObjectReader r = parent.object(key, {"tool", "version", "git_sha", "command_line", "notes"});
  Provenance p;
  p.tool = r.string("tool");
  p.version = r.string("version");
  p.git_sha = r.string("git_sha");
  p.command_line = r.string("command_line");
  p.notes = r.string("notes");
  return p;
}

OrderedJson provenance_json(const Provenance& p) {
  OrderedJson out = OrderedJson::object();
  out["tool"] = p.tool;
  out["version"] = p.version;
  out["git_sha"] = p.git_sha;
  out["command_line"] = p.command_line;
  out["notes"] = p.notes;
  return out;
}

ModelDesc read_model(const ObjectReader& parent, std::string_view key) {
  const ObjectReader r =
      parent.object(key, {"kind", "name", "blocks", "d_model", "heads", "seq_len", "vocab", "dtype", "tie_embeddings", "ln"});
  ModelDesc m;
  m.kind = r.string("kind");
  m.name = r.string("name");
  m.blocks = r.integer("blocks", Min::positive);
  m.d_model = r.integer("d_model", Min::positive);
  m.heads = r.integer("heads", Min::positive);
  m.seq_len = r.integer("seq_len", Min::positive);
  m.vocab = r.integer("vocab", Min::positive);
  m.dtype = parse_dtype(r.string("dtype"), r.at("dtype"));
  m.tie_embeddings = r.has("tie_embeddings") && r.boolean("tie_embeddings");
  if (r.has("ln")) {
    m.ln = r.string("ln");
    if (m.ln != "pre" && m.ln != "post")
      detail::fail(r.at("ln"), "is neither \"pre\" nor \"post\"",
                   "write \"pre\" (layer norms before attention and MLP, as GPT) or \"post\" (after each "
                   "residual add, as BERT)");
  }
  return m;
}

OrderedJson model_json(const ModelDesc& m) {
  OrderedJson out = OrderedJson::object();
  out["kind"] = m.kind;
  out["name"] = m.name;
  out["blocks"] = m.blocks;
  out["d_model"] = m.d_model;
  out["heads"] = m.heads;
  out["seq_len"] = m.seq_len;
  out["vocab"] = m.vocab;
  out["dtype"] = to_string(m.dtype);
  if (m.tie_embeddings) out["tie_embeddings"] = true;
  if (!m.ln.empty()) out["ln"] = m.ln;
  return out;
}

DeviceDesc read_device(const ObjectReader& parent, std::string_view key) {
  const ObjectReader r = parent.object(key, {"name", "memory_bytes"});
  DeviceDesc d;
  d.name = r.string("name");
  d.memory_bytes = r.integer("memory_bytes", Min::positive);
  return d;
}

OrderedJson device_json(const DeviceDesc& d) {
  OrderedJson out = OrderedJson::object();
  out["name"] = d.name;
  out["memory_bytes"] = d.memory_bytes;
  return out;
}

}  // namespace pd2bw::schemas::detail
