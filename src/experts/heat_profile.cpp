// Heat profile persistence (see heat_profile.h). Format: "sluice-heat-v1 n_layer n_expert", then
// one line of n_expert counts per layer.
#include "experts/heat_profile.h"

#include <algorithm>
#include <cstdio>
#include <fstream>

namespace sluice {

HeatProfile::HeatProfile(std::string path, int n_layer, int n_expert)
    : path_(std::move(path)),
      n_layer_(n_layer),
      n_expert_(n_expert),
      heat_(static_cast<size_t>(n_layer) * n_expert, 0.0) {
  if (path_.empty()) return;
  loaded_ = read(heat_);
  if (!loaded_) std::fill(heat_.begin(), heat_.end(), 0.0);
}

bool HeatProfile::read(std::vector<double>& into) const {
  std::ifstream in(path_);
  std::string magic;
  int nl = 0, ne = 0;
  if (!(in >> magic >> nl >> ne) || magic != "sluice-heat-v1" || nl != n_layer_ || ne != n_expert_)
    return false;
  for (auto& h : into)
    if (!(in >> h)) return false;
  return true;
}

void HeatProfile::order_hottest_first(std::vector<int32_t>& keys) const {
  if (loaded_)
    std::stable_sort(keys.begin(), keys.end(),
                     [&](int32_t a, int32_t b) { return heat_[a] > heat_[b]; });
}

void HeatProfile::save() const {
  if (path_.empty()) return;
  // The saved profile is half the old one plus this run's counts (old counts were loaded into
  // heat_ and this run's were added to them). A profile that fails to parse counts as empty.
  std::vector<double> old(heat_.size(), 0.0);
  if (!read(old)) std::fill(old.begin(), old.end(), 0.0);
  const std::string tmp = path_ + ".tmp";
  std::ofstream out(tmp);
  out << "sluice-heat-v1 " << n_layer_ << ' ' << n_expert_ << '\n';
  for (size_t k = 0; k < heat_.size(); ++k)
    out << (heat_[k] - 0.5 * old[k]) << ((k + 1) % n_expert_ ? ' ' : '\n');
  out.close();
  if (out) std::rename(tmp.c_str(), path_.c_str());
}

}  // namespace sluice
