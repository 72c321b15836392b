// The heat profile of the streaming expert cache: how often each expert was requested, persisted
// next to the model's other caches so a later run preloads the hottest experts first (warm start).
// Saved counts decay: each save keeps half of the previous profile plus this run's counts.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace sluice {

class HeatProfile {
 public:
  // Loads `path` when it holds a profile of this shape; "" disables persistence.
  HeatProfile(std::string path, int n_layer, int n_expert);
  void count(int32_t key) { heat_[key] += 1.0; }
  bool loaded() const { return loaded_; }
  // Per key (layer · n_expert + expert): loaded counts plus this run's.
  const std::vector<double>& counts() const { return heat_; }
  // `keys` ordered hottest first (stable; file order without a loaded profile).
  void order_hottest_first(std::vector<int32_t>& keys) const;
  // Writes the decayed profile (atomically, through a temporary file).
  void save() const;

 private:
  bool read(std::vector<double>& into) const;

  std::string path_;
  int n_layer_, n_expert_;
  std::vector<double> heat_;  // per key: loaded counts plus this run's
  bool loaded_ = false;
};

}  // namespace sluice
