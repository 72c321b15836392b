// The routed-expert layout (see expert_store.h): an expert's weights in memory, its byte ranges in
// the model files, and the routed total, all from the same tensors.
#include "core/error.h"
#include "experts/expert_file_map.h"
#include "experts/expert_store.h"

namespace sluice {

ExpertWeights ExpertLayout::in_place(int il, int e) const {
  const ExpertLayerTensors& t = layers[il];
  ExpertWeights w;
  if (t.gate) {
    w.gate = t.gate.slice(e);
    w.up = t.up.slice(e);
    w.down = t.down.slice(e);
    if (t.gate_bias) w.gate_bias = t.gate_bias.f32() + static_cast<int64_t>(e) * t.gate_bias.ne[0];
    if (t.up_bias) w.up_bias = t.up_bias.f32() + static_cast<int64_t>(e) * t.up_bias.ne[0];
    if (t.down_bias) w.down_bias = t.down_bias.f32() + static_cast<int64_t>(e) * t.down_bias.ne[0];
  } else {
    w.gate = t.gate_each[e].mat();
    w.up = t.up_each[e].mat();
    w.down = t.down_each[e].mat();
  }
  return w;
}

ExpertRanges ExpertLayout::file_ranges(int il, int e) const {
  const ExpertLayerTensors& t = layers[il];
  ExpertRanges r{};
  if (t.gate) {
    r[kGate] = t.gate.slice_file(e);
    r[kUp] = t.up.slice_file(e);
    r[kDown] = t.down.slice_file(e);
    if (t.gate_bias) r[kGateBias] = t.gate_bias.row_file(e);
    if (t.up_bias) r[kUpBias] = t.up_bias.row_file(e);
    if (t.down_bias) r[kDownBias] = t.down_bias.row_file(e);
  } else {
    r[kGate] = t.gate_each[e].file;
    r[kUp] = t.up_each[e].file;
    r[kDown] = t.down_each[e].file;
  }
  return r;
}

uint64_t ExpertLayout::routed_bytes() const {
  uint64_t b = 0;
  for (int il = 0; il < static_cast<int>(layers.size()); ++il)
    if (has_layer(il))
      for (int e = 0; e < n_expert; ++e)
        for (const FileRange& r : file_ranges(il, e)) b += r.length;
  return b;
}

ExpertFileMap expert_file_map(const ExpertLayout& layout, int n_layer,
                              std::vector<std::string> part_paths) {
  ExpertFileMap map;
  map.part_paths = std::move(part_paths);
  map.n_layer = n_layer;
  map.n_expert = layout.n_expert;
  map.ranges.resize(static_cast<size_t>(n_layer) * layout.n_expert);
  for (int il = 0; il < n_layer; ++il) {
    if (!layout.has_layer(il)) continue;
    for (int e = 0; e < layout.n_expert; ++e) {
      ExpertRanges& r = map.ranges[static_cast<size_t>(il) * layout.n_expert + e];
      r = layout.file_ranges(il, e);
      for (const FileRange& fr : r)
        if (fr.length > 0 && fr.part >= map.part_paths.size())
          fail("internal: expert L{}/E{} lies in file part {} of {}", il, e, fr.part,
               map.part_paths.size());
      if (r[kGate].length == 0 || r[kUp].length == 0 || r[kDown].length == 0)
        fail("internal: expert L{}/E{} has no file range (tensors not loaded from the model file)",
             il, e);
    }
  }
  return map;
}

}  // namespace sluice
