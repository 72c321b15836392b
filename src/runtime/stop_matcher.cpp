// Stop-string matching over streamed text: text is held back only while it could still grow into
// a stop string, so streaming clients never see a stop string or a prefix of one.
#include "runtime/request.h"

namespace sluice {

std::string StopMatcher::push(const std::string& text) {
  if (matched_) return {};
  pending_ += text;
  size_t cut = std::string::npos;
  for (const auto& s : stops_) {
    if (s.empty()) continue;
    size_t at = pending_.find(s);
    if (at != std::string::npos && (cut == std::string::npos || at < cut)) cut = at;
  }
  if (cut != std::string::npos) {
    matched_ = true;
    std::string out = pending_.substr(0, cut);
    pending_.clear();
    return out;
  }
  // Keep the longest suffix that is a proper prefix of some stop string.
  size_t keep = 0;
  for (const auto& s : stops_)
    for (size_t len = std::min(s.size() - (s.empty() ? 0 : 1), pending_.size()); len > keep; --len)
      if (pending_.compare(pending_.size() - len, len, s, 0, len) == 0) {
        keep = len;
        break;
      }
  std::string out = pending_.substr(0, pending_.size() - keep);
  pending_.erase(0, pending_.size() - keep);
  return out;
}

std::string StopMatcher::flush(const std::string& text) {
  std::string out = push(text);
  if (!matched_) out += pending_;
  pending_.clear();
  return out;
}

}  // namespace sluice
