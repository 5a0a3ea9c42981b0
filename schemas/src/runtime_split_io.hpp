// Private to pd2bw_schemas: the optional "split" of a profile's runtime_calibration (since 1.5), read
// and written (profile.hpp: RuntimeSplit says what the numbers are).
#pragma once

#include <cstdint>
#include <vector>

#include "json_reader.hpp"
#include "pd2bw/schemas/profile.hpp"

namespace pd2bw::schemas::detail {

// The split when `calibration` (the reader of /runtime_calibration) has one, else an empty one, for a
// profile of `layers` layers. Throws SchemaError naming the pointer of the first problem: a cut outside
// (0, layers), counts that are not [few, many] with 2 <= few < many, a number out of its range, entries
// that do not follow `sizes`.
RuntimeSplit read_runtime_split(const ObjectReader& calibration, const std::vector<int64_t>& sizes, int64_t layers);
// The split's JSON object, keys in a fixed order. `split` must be present().
OrderedJson runtime_split_json(const RuntimeSplit& split);

}  // namespace pd2bw::schemas::detail
