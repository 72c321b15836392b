// Routing trace recorder and replay (see routing_taps.h).
#include "runtime/routing_taps.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/error.h"
#include "core/log.h"
#include "model/model.h"

namespace sluice {

void map_replay_ids(const uint16_t* src, int k_src, int e_src, int32_t* dst, int k_dst, int e_dst) {
  for (int s = 0; s < k_dst; ++s) {
    const int64_t e = src[s % k_src];
    auto id = static_cast<int32_t>((e * e_dst / e_src + s / k_src) % e_dst);
    while (std::find(dst, dst + s, id) != dst + s) id = (id + 1) % e_dst;
    dst[s] = id;
  }
}

namespace {

class TraceRecorder final : public RoutingTraceRecorder {
 public:
  TraceRecorder(const std::string& path, int n_layer, int n_expert, int n_used, bool predictions)
      : writer_(path, n_layer, n_expert, n_used, predictions), path_(path) {}

  // The trace appears at destruction (the engine's end); a failure to write it is reported, as
  // a destructor cannot throw.
  ~TraceRecorder() override {
    try {
      writer_.close();
    } catch (const Error& e) {
      SLUICE_LOG_WARN("error: {}", e.what());
    }
  }

  void begin_forward(const Batch& batch) override {
    batch_ = &batch;
    const size_t cells = batch.size() * writer_.n_layer() * writer_.n_used();
    chosen_.assign(cells, kNoExpert);
    predicted_.assign(cells, kNoExpert);
  }
  void routed(int il, int n_used, int32_t* ids) override { keep(chosen_, il, n_used, ids); }
  bool wants_predictions() const override { return writer_.predictions(); }
  void predicted(int il, int n_used, int32_t* ids) override { keep(predicted_, il, n_used, ids); }
  void end_forward() override {
    const size_t row = static_cast<size_t>(writer_.n_layer()) * writer_.n_used();
    // The pass's rows share one record pass: the store was asked once per layer for their union.
    for (int64_t t = 0; t < batch_->size(); ++t)
      writer_.append({batch_->tokens[t], batch_->pos[t], batch_->seq[t], t > 0},
                     chosen_.data() + t * row, predicted_.data() + t * row);
  }
  uint64_t rows() const override { return writer_.rows(); }

 private:
  void keep(std::vector<uint16_t>& table, int il, int n_used, const int32_t* ids) {
    const int L = writer_.n_layer(), k = writer_.n_used();
    if (il >= L) return;  // an MTP block's layer (its passes are not tapped)
    if (n_used != k)
      fail("routing trace '{}': layer {} routes {} experts, the trace holds {}", path_, il, n_used,
           k);
    for (int64_t t = 0; t < batch_->size(); ++t)
      for (int j = 0; j < k; ++j)
        table[(t * L + il) * k + j] = static_cast<uint16_t>(ids[t * k + j]);
  }

  RoutingTraceWriter writer_;
  std::string path_;
  const Batch* batch_ = nullptr;
  std::vector<uint16_t> chosen_, predicted_;  // (n_tok, n_layer, n_used) of the current pass
};

class RoutingReplay final : public RoutingTap {
 public:
  RoutingReplay(RoutingTrace trace, int n_expert, int n_used, const std::vector<int>& routed_layers)
      : trace_(std::move(trace)), n_expert_(n_expert), n_used_(n_used) {
    std::vector<int> src;
    for (int il = 0; il < trace_.n_layer; ++il)
      if (trace_.layer_routed(il)) src.push_back(il);
    source_layer_.assign(routed_layers.empty() ? 0 : routed_layers.back() + 1, -1);
    for (size_t j = 0; j < routed_layers.size(); ++j)
      source_layer_[routed_layers[j]] = src[j % src.size()];
  }

  void begin_forward(const Batch& batch) override { n_tok_ = batch.size(); }
  void routed(int il, int n_used, int32_t* ids) override { replay(trace_.chosen, il, n_used, ids); }
  bool wants_predictions() const override { return false; }
  void predicted(int il, int n_used, int32_t* ids) override {
    if (trace_.has_predictions) replay(trace_.predicted, il, n_used, ids);
  }
  void end_forward() override { cursor_ = (cursor_ + n_tok_) % trace_.n_rows(); }

 private:
  void replay(const std::vector<uint16_t>& table, int il, int n_used, int32_t* ids) const {
    if (il >= static_cast<int>(source_layer_.size()) || source_layer_[il] < 0) return;
    const int src = source_layer_[il];
    for (int64_t t = 0; t < n_tok_; ++t) {
      const size_t row = (cursor_ + t) % trace_.n_rows();
      const uint16_t* from = table.data() + (row * trace_.n_layer + src) * trace_.n_used;
      if (from[0] == kNoExpert) continue;  // no prediction was made for that row
      map_replay_ids(from, trace_.n_used, trace_.n_expert, ids + t * n_used, n_used, n_expert_);
    }
  }

  RoutingTrace trace_;
  int n_expert_, n_used_;
  std::vector<int> source_layer_;  // model layer → trace layer it replays (−1: not routed)
  size_t cursor_ = 0;              // trace row of the pass's first row
  int64_t n_tok_ = 0;
};

}  // namespace

std::unique_ptr<RoutingTraceRecorder> make_trace_recorder(const std::string& path, int n_layer, int n_expert,
                                                int n_used, bool predictions) {
  return std::make_unique<TraceRecorder>(path, n_layer, n_expert, n_used, predictions);
}

std::unique_ptr<RoutingTap> make_routing_replay(const std::string& path, int n_expert, int n_used,
                                                const std::vector<int>& routed_layers,
                                                std::string* description) {
  RoutingTrace trace = read_routing_trace(path);
  int src_layers = 0;
  for (int il = 0; il < trace.n_layer; ++il) src_layers += trace.layer_routed(il);
  if (src_layers == 0 || trace.n_rows() == 0)
    fail("routing trace '{}': no routed rows to replay", path);
  if (routed_layers.empty()) fail("--replay-routing {}: the model routes no experts", path);
  *description = fmt::format(
      "routing replayed from {} ({} rows, {} routed layers, {} experts top-{}) onto {} routed "
      "layers, {} experts top-{}: expert choice follows the trace, so the text is not the model's",
      path, trace.n_rows(), src_layers, trace.n_expert, trace.n_used, routed_layers.size(),
      n_expert, n_used);
  return std::make_unique<RoutingReplay>(std::move(trace), n_expert, n_used, routed_layers);
}

}  // namespace sluice
