// The two routing taps the engine installs on its model (model/routing_tap.h):
//  - a recorder that writes every evaluated row's routing and lookahead prediction, with the
//    forward pass it was evaluated in, to a trace file (EngineOptions::routing_trace;
//    `--routing-trace FILE`);
//  - a replay that makes the model route as a trace says (EngineOptions::replay_routing; `bench
//    --replay-routing FILE`), so a large generated model streams its experts on learned routing.
//    The trace's expert ids are mapped into the model's range and its routed layers are cycled
//    over the model's routed layers (map_replay_ids is the one rule); the replay walks the
//    trace's rows in order, one per evaluated row, from the start again when it runs out. The
//    model's text is then not its own: only its expert reads mean anything.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "experts/routing_trace.h"
#include "model/routing_tap.h"

namespace sluice {

// Trace slot s of the model's n_used comes from trace choice src[s % k_src] (variant s / k_src
// when the model uses more experts than the trace): expert e maps to e · E_dst / E_src + variant,
// stepped on past ids the token already has, so the same trace experts always give the same model
// experts and locality carries over. dst gets k_dst distinct ids in 0..E_dst−1.
void map_replay_ids(const uint16_t* src, int k_src, int e_src, int32_t* dst, int k_dst, int e_dst);

// The recorder: each forward pass's rows, as one pass of the trace. The file appears whole when
// the recorder is destroyed.
class RoutingTraceRecorder : public RoutingTap {
 public:
  // Rows written so far: where a run's next pass starts in the trace (`bench` names the rows of
  // each measured test, so route-stats can count those alone).
  virtual uint64_t rows() const = 0;
};
std::unique_ptr<RoutingTraceRecorder> make_trace_recorder(const std::string& path, int n_layer,
                                                          int n_expert, int n_used,
                                                          bool predictions);

// routed_layers: the model's layers that route (in order). Throws naming the file when the trace
// cannot be read or routes no layer.
std::unique_ptr<RoutingTap> make_routing_replay(const std::string& path, int n_expert, int n_used,
                                                const std::vector<int>& routed_layers,
                                                std::string* description);

}  // namespace sluice
