// Progress of long-running steps (expert preload at load, long prefill, gen-model, perplexity) on
// stderr, through this one helper so every command shows it the same way: nothing for the first
// 2 s (short steps stay silent; $SLUICE_PROGRESS_DELAY overrides), then a bar redrawn in place
// when stderr is a terminal (erased when the step ends), or a plain
// line every 10 s when it is a file or pipe (unit "B": sizes, rate and time left); nothing at all below the info log level (--quiet).
// A Progress created while another is showing stays silent, so nested steps (a perplexity
// window's prefill) never fight over the line.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace sluice {

class Progress {
 public:
  Progress(std::string label, uint64_t total, std::string unit);
  ~Progress();  // ends the bar's line, or reports the total when lines were printed
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  void update(uint64_t done);
  void add(uint64_t n) { update(done_ + n); }

 private:
  using Clock = std::chrono::steady_clock;
  void draw(bool final);
  std::string draw_bytes(bool final, double secs, double frac) const;

  std::string label_, unit_;
  uint64_t total_, done_ = 0;
  bool enabled_, tty_, shown_ = false;
  Clock::time_point start_, last_;
};

}  // namespace sluice
