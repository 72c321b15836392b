// Routing traces: each evaluated token's chosen experts per layer, and the router lookahead's
// prediction of them, as a model computed them (`--routing-trace FILE` on run, bench and
// perplexity). `sluice route-stats` reads them, and `bench --replay-routing FILE` drives another
// model's expert choice from one.
//
// File format (little-endian), version 2:
//   header, 32 bytes: magic "SLUICERT" | u32 version (2) | u32 n_layer | u32 n_expert |
//                     u32 n_used | u32 flags (bit 0: predictions present) | u32 reserved (0)
//   then one record per evaluated row, in evaluation order (prefill rows, decode steps, a
//   draft verify pass's rows, rejected ones included: the position says where a row belongs):
//     i32 token | i32 position | i32 sequence | u32 pass |
//     u16 chosen[n_layer][n_used]      descending selection order; 0xFFFF: layer not routed
//     u16 predicted[n_layer][n_used]   (flag bit 0) lookahead for the layer from the hidden state
//                                      before the previous layer's experts; 0xFFFF: none
//   pass: the forward pass that evaluated the row, counted from 0 by the writer. The rows of one
//   pass are consecutive records with the same pass; the next pass's is one more. A pass of
//   several rows (a prompt chunk, a draft verify pass, a server step over several sequences) asks
//   the expert store once per layer for the union of its rows' experts (routing_stats.h).
// A record is 16 + 2·n_layer·n_used·(1 + predictions) bytes: 272 for a 8-layer top-8 model.
// Version 1 (written before passes were recorded) has no pass field (12-byte record heads); it
// is read with every row a pass of its own, as one-row decode would make them.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace sluice {

class AtomicFile;

inline constexpr uint16_t kNoExpert = 0xFFFF;

struct RoutingTrace {
  int n_layer = 0;
  int n_expert = 0;
  int n_used = 0;
  bool has_predictions = false;
  struct Row {
    int32_t token = 0, pos = 0, seq = 0;
    // Evaluated in the same forward pass as the row before it (false: the row starts a pass).
    bool joins_pass = false;
  };
  std::vector<Row> rows;
  std::vector<uint16_t> chosen;     // (rows, n_layer, n_used)
  std::vector<uint16_t> predicted;  // (rows, n_layer, n_used) when has_predictions, else empty

  size_t n_rows() const { return rows.size(); }
  const uint16_t* chosen_at(size_t row, int il) const {
    return chosen.data() + (row * n_layer + il) * n_used;
  }
  const uint16_t* predicted_at(size_t row, int il) const {
    return predicted.data() + (row * n_layer + il) * n_used;
  }
  // Forward passes: the rows that start one (row 0 always does).
  size_t n_passes() const;
  // Whether layer il routed any row (dense layers, and layers of other pipeline stages, did not).
  bool layer_routed(int il) const;
  // Throws naming what is wrong: shape out of range, ids outside 0..n_expert−1 or repeated within a
  // row's layer, a layer half routed, row 0 joining a pass before it.
  void validate(const std::string& what) const;
};

// Reads a whole trace, version 1 or 2; throws sluice::Error naming the file and the fault (not a
// trace, another version, truncated record, bad ids, a pass number that does not follow).
RoutingTrace read_routing_trace(const std::string& path);

// Appends records to a trace file as they come (bounded memory), through an AtomicFile: the
// trace appears whole at close(), and a run that fails leaves no torn file behind.
class RoutingTraceWriter {
 public:
  RoutingTraceWriter(const std::string& path, int n_layer, int n_expert, int n_used,
                     bool predictions);
  ~RoutingTraceWriter();
  RoutingTraceWriter(const RoutingTraceWriter&) = delete;
  RoutingTraceWriter& operator=(const RoutingTraceWriter&) = delete;
  // One record (version 2; row.joins_pass gives its pass); chosen and predicted hold
  // n_layer·n_used ids each (predicted ignored without predictions).
  void append(const RoutingTrace::Row& row, const uint16_t* chosen, const uint16_t* predicted);
  // Flushes and renames the file into place; throws naming the file when that fails.
  void close();
  int n_layer() const { return n_layer_; }
  int n_used() const { return n_used_; }
  bool predictions() const { return predictions_; }
  uint64_t rows() const { return rows_; }

 private:
  std::string path_;
  std::unique_ptr<AtomicFile> file_;
  int n_layer_, n_used_;
  bool predictions_;
  uint64_t rows_ = 0;
  uint32_t pass_ = 0;  // pass of the latest record
};

// Writes a whole trace (tests, tools).
void write_routing_trace(const std::string& path, const RoutingTrace& trace);

}  // namespace sluice
