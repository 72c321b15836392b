// Byte layout of StepOrders (see step_orders.h): little-endian fixed-width fields, counts before
// lists, strings as length + bytes. Both ends are the same build, so there is no versioning; the
// reader still checks every length against what is left, so a torn message fails by name.
#include "runtime/step_orders.h"

#include <cstring>
#include <string>
#include <type_traits>

#include "core/error.h"

namespace sluice {

namespace {

class Writer {
 public:
  template <typename T>
  void put(T v) {
    static_assert(std::is_trivially_copyable_v<T>);
    const auto* p = reinterpret_cast<const uint8_t*>(&v);
    out_.insert(out_.end(), p, p + sizeof v);
  }
  void put_string(const std::string& s) {
    put<uint32_t>(static_cast<uint32_t>(s.size()));
    out_.insert(out_.end(), s.begin(), s.end());
  }
  template <typename T>
  void put_vector(const std::vector<T>& v) {
    put<uint32_t>(static_cast<uint32_t>(v.size()));
    for (const T& x : v) put(x);
  }
  std::vector<uint8_t> take() { return std::move(out_); }

 private:
  std::vector<uint8_t> out_;
};

class Reader {
 public:
  explicit Reader(std::span<const uint8_t> in) : in_(in) {}
  template <typename T>
  T get() {
    need(sizeof(T));
    T v;
    std::memcpy(&v, in_.data() + at_, sizeof v);
    at_ += sizeof v;
    return v;
  }
  std::string get_string() {
    const uint32_t n = get<uint32_t>();
    need(n);
    std::string s(reinterpret_cast<const char*>(in_.data() + at_), n);
    at_ += n;
    return s;
  }
  template <typename T>
  std::vector<T> get_vector() {
    const uint32_t n = get<uint32_t>();
    need(static_cast<size_t>(n) * sizeof(T));
    std::vector<T> v(n);
    for (T& x : v) x = get<T>();
    return v;
  }
  void finish() const {
    if (at_ != in_.size())
      fail("step orders: {} bytes left over after {} of {}", in_.size() - at_, at_, in_.size());
  }

 private:
  void need(size_t n) const {
    if (n > in_.size() - at_)
      fail("step orders: {} bytes needed at offset {} of {}", n, at_, in_.size());
  }
  std::span<const uint8_t> in_;
  size_t at_ = 0;
};

void put_options(Writer& w, const GenerateOptions& o) {
  w.put<int32_t>(o.max_tokens);
  w.put<int32_t>(o.logprobs);
  const SamplingOptions& s = o.sampling;
  w.put(s.temperature), w.put(s.top_k), w.put(s.top_p), w.put(s.min_p), w.put(s.repeat_penalty);
  w.put(s.presence_penalty), w.put(s.frequency_penalty), w.put(s.penalty_last_n), w.put(s.seed);
  w.put<uint32_t>(static_cast<uint32_t>(s.logit_bias.size()));
  for (const auto& [token, bias] : s.logit_bias) w.put(token), w.put(bias);
  w.put<uint32_t>(static_cast<uint32_t>(o.stop.size()));
  for (const std::string& stop : o.stop) w.put_string(stop);
  w.put<uint8_t>(o.stop_at_eog ? 1 : 0);
  w.put_string(o.grammar);
}

GenerateOptions get_options(Reader& r) {
  GenerateOptions o;
  o.max_tokens = r.get<int32_t>();
  o.logprobs = r.get<int32_t>();
  SamplingOptions& s = o.sampling;
  s.temperature = r.get<float>();
  s.top_k = r.get<int>();
  s.top_p = r.get<float>();
  s.min_p = r.get<float>();
  s.repeat_penalty = r.get<float>();
  s.presence_penalty = r.get<float>();
  s.frequency_penalty = r.get<float>();
  s.penalty_last_n = r.get<int>();
  s.seed = r.get<uint64_t>();
  const uint32_t n_bias = r.get<uint32_t>();
  for (uint32_t i = 0; i < n_bias; ++i) {
    const int32_t token = r.get<int32_t>();
    s.logit_bias.emplace_back(token, r.get<float>());
  }
  const uint32_t n_stop = r.get<uint32_t>();
  for (uint32_t i = 0; i < n_stop; ++i) o.stop.push_back(r.get_string());
  o.stop_at_eog = r.get<uint8_t>() != 0;
  o.grammar = r.get_string();
  return o;
}

}  // namespace

std::vector<uint8_t> encode_orders(const StepOrders& orders) {
  Writer w;
  w.put<uint8_t>(orders.stop ? 1 : 0);
  w.put_vector(orders.cancelled);
  w.put_vector(orders.timed_out);
  w.put<uint32_t>(static_cast<uint32_t>(orders.started.size()));
  for (const StepOrders::Start& s : orders.started) {
    w.put<int32_t>(s.slot);
    w.put_vector(s.request.prompt);
    put_options(w, s.request.options);
  }
  return w.take();
}

StepOrders decode_orders(std::span<const uint8_t> bytes) {
  Reader r(bytes);
  StepOrders o;
  o.stop = r.get<uint8_t>() != 0;
  o.cancelled = r.get_vector<int>();
  o.timed_out = r.get_vector<int>();
  const uint32_t n = r.get<uint32_t>();
  for (uint32_t i = 0; i < n; ++i) {
    StepOrders::Start s;
    s.slot = r.get<int32_t>();
    s.request.prompt = r.get_vector<int32_t>();
    s.request.options = get_options(r);
    o.started.push_back(std::move(s));
  }
  r.finish();
  return o;
}

}  // namespace sluice
