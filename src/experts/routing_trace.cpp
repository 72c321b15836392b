// Routing trace files (see routing_trace.h for the format).
#include "experts/routing_trace.h"

#include <fmt/format.h>

#include <cstring>
#include <fstream>
#include <iterator>

#include "core/atomic_file.h"
#include "core/error.h"

namespace sluice {

namespace {

constexpr char kMagic[8] = {'S', 'L', 'U', 'I', 'C', 'E', 'R', 'T'};
constexpr uint32_t kVersion = 2;  // written; version 1 is read too
constexpr size_t kHeaderBytes = 32;
// Record heads: token, position, sequence; version 2 adds the pass.
constexpr size_t kRowHeadBytesV1 = 12;
constexpr size_t kRowHeadBytes = 16;

template <typename T>
T load(const char* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

void check_shape(const std::string& what, int64_t n_layer, int64_t n_expert, int64_t n_used) {
  if (n_layer < 1 || n_layer > 4096) fail("{}: {} layers, expected 1..4096", what, n_layer);
  if (n_expert < 1 || n_expert >= kNoExpert)
    fail("{}: {} experts, expected 1..{}", what, n_expert, kNoExpert - 1);
  if (n_used < 1 || n_used > n_expert)
    fail("{}: {} experts used per token, expected 1..{}", what, n_used, n_expert);
}

}  // namespace

size_t RoutingTrace::n_passes() const {
  size_t n = 0;
  for (const Row& r : rows) n += !r.joins_pass;
  return n;
}

bool RoutingTrace::layer_routed(int il) const {
  for (size_t r = 0; r < n_rows(); ++r)
    if (chosen_at(r, il)[0] != kNoExpert) return true;
  return false;
}

void RoutingTrace::validate(const std::string& what) const {
  check_shape(what, n_layer, n_expert, n_used);
  const size_t cells = n_rows() * n_layer * n_used;
  if (chosen.size() != cells || (has_predictions && predicted.size() != cells))
    fail("{}: {} rows need {} ids per table, found {} chosen and {} predicted", what, n_rows(),
         cells, chosen.size(), predicted.size());
  std::vector<uint32_t> seen(n_expert, 0);
  uint32_t stamp = 0;
  auto check_ids = [&](const uint16_t* ids, size_t r, int il, const char* table) {
    ++stamp;
    const bool none = ids[0] == kNoExpert;
    for (int k = 0; k < n_used; ++k) {
      if (none != (ids[k] == kNoExpert))
        fail("{}: row {} layer {} {} is partly empty", what, r, il, table);
      if (none) continue;
      if (ids[k] >= n_expert)
        fail("{}: row {} layer {} {} expert {}, expected 0..{}", what, r, il, table, ids[k],
             n_expert - 1);
      if (seen[ids[k]] == stamp)
        fail("{}: row {} layer {} {} names expert {} twice", what, r, il, table, ids[k]);
      seen[ids[k]] = stamp;
    }
  };
  for (size_t r = 0; r < n_rows(); ++r)
    for (int il = 0; il < n_layer; ++il) {
      check_ids(chosen_at(r, il), r, il, "chosen");
      if (has_predictions) check_ids(predicted_at(r, il), r, il, "predicted");
    }
}

RoutingTrace read_routing_trace(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("routing trace '{}': cannot open it", path);
  const std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (data.size() < kHeaderBytes || std::memcmp(data.data(), kMagic, sizeof kMagic) != 0)
    fail("routing trace '{}': not a routing trace (no SLUICERT header)", path);
  const char* p = data.data();
  const auto version = load<uint32_t>(p + 8);
  if (version != 1 && version != kVersion)
    fail("routing trace '{}': format version {}, this sluice reads 1 and {}", path, version,
         kVersion);
  const size_t head = version == 1 ? kRowHeadBytesV1 : kRowHeadBytes;
  RoutingTrace t;
  const auto n_layer = load<uint32_t>(p + 12), n_expert = load<uint32_t>(p + 16);
  const auto n_used = load<uint32_t>(p + 20), flags = load<uint32_t>(p + 24);
  check_shape("routing trace '" + path + "'", n_layer, n_expert, n_used);
  if (flags > 1) fail("routing trace '{}': unknown flags {:#x}", path, flags);
  t.n_layer = static_cast<int>(n_layer);
  t.n_expert = static_cast<int>(n_expert);
  t.n_used = static_cast<int>(n_used);
  t.has_predictions = flags & 1;
  const size_t cells = static_cast<size_t>(n_layer) * n_used;
  const size_t record = head + 2 * cells * (t.has_predictions ? 2 : 1);
  const size_t body = data.size() - kHeaderBytes;
  if (body % record != 0)
    fail(
        "routing trace '{}': {} bytes after the header are not whole records of {} bytes (record "
        "{} is truncated)",
        path, body, record, body / record);
  const size_t n = body / record;
  t.rows.resize(n);
  t.chosen.resize(n * cells);
  if (t.has_predictions) t.predicted.resize(n * cells);
  uint32_t prev_pass = 0;
  for (size_t r = 0; r < n; ++r) {
    const char* q = p + kHeaderBytes + r * record;
    t.rows[r] = {load<int32_t>(q), load<int32_t>(q + 4), load<int32_t>(q + 8)};
    if (version >= 2) {
      // Passes are numbered from 0 in evaluation order: a record repeats its predecessor's pass
      // or starts the next one.
      const auto pass = load<uint32_t>(q + 12);
      const bool joins = r > 0 && pass == prev_pass;
      if (r == 0 ? pass != 0 : !joins && pass != prev_pass + 1)
        fail("routing trace '{}': record {} is in pass {}, {}", path, r, pass,
             r == 0 ? std::string("expected 0 (passes count from 0)")
                    : fmt::format("expected {} or {} (the pass of record {} or the next)",
                                  prev_pass, prev_pass + 1, r - 1));
      t.rows[r].joins_pass = joins;
      prev_pass = pass;
    }
    std::memcpy(t.chosen.data() + r * cells, q + head, 2 * cells);
    if (t.has_predictions)
      std::memcpy(t.predicted.data() + r * cells, q + head + 2 * cells, 2 * cells);
  }
  t.validate("routing trace '" + path + "'");
  return t;
}

RoutingTraceWriter::RoutingTraceWriter(const std::string& path, int n_layer, int n_expert,
                                       int n_used, bool predictions)
    : path_(path), n_layer_(n_layer), n_used_(n_used), predictions_(predictions) {
  check_shape("routing trace '" + path + "'", n_layer, n_expert, n_used);
  file_ = std::make_unique<AtomicFile>(path);
  file_->bytes(kMagic, sizeof kMagic);
  file_->pod<uint32_t>(kVersion);
  file_->pod<uint32_t>(static_cast<uint32_t>(n_layer));
  file_->pod<uint32_t>(static_cast<uint32_t>(n_expert));
  file_->pod<uint32_t>(static_cast<uint32_t>(n_used));
  file_->pod<uint32_t>(predictions ? 1u : 0u);
  file_->pod<uint32_t>(0);
}

RoutingTraceWriter::~RoutingTraceWriter() = default;

void RoutingTraceWriter::append(const RoutingTrace::Row& row, const uint16_t* chosen,
                                const uint16_t* predicted) {
  const size_t cells = static_cast<size_t>(n_layer_) * n_used_;
  if (row.joins_pass && rows_ == 0)
    fail("routing trace '{}': the first row joins a pass, but no row comes before it", path_);
  if (!row.joins_pass && rows_ > 0) ++pass_;
  file_->pod<int32_t>(row.token);
  file_->pod<int32_t>(row.pos);
  file_->pod<int32_t>(row.seq);
  file_->pod<uint32_t>(pass_);
  file_->bytes(chosen, 2 * cells);
  if (predictions_) file_->bytes(predicted, 2 * cells);
  ++rows_;
}

void RoutingTraceWriter::close() {
  if (file_) file_->close();
  file_.reset();
}

void write_routing_trace(const std::string& path, const RoutingTrace& trace) {
  trace.validate("routing trace for '" + path + "'");
  RoutingTraceWriter w(path, trace.n_layer, trace.n_expert, trace.n_used, trace.has_predictions);
  for (size_t r = 0; r < trace.n_rows(); ++r)
    w.append(trace.rows[r], trace.chosen_at(r, 0),
             trace.has_predictions ? trace.predicted_at(r, 0) : nullptr);
  w.close();
}

}  // namespace sluice
