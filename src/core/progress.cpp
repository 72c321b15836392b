// Progress bars and lines (see progress.h).
#include "core/progress.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>

#include "core/log.h"
#include "core/units.h"

namespace sluice {

namespace {

// Steps shorter than this show nothing: 2 s, or $SLUICE_PROGRESS_DELAY seconds (tests use 0).
std::chrono::milliseconds quiet_start() {
  static const std::chrono::milliseconds d{[] {
    const char* e = std::getenv("SLUICE_PROGRESS_DELAY");
    return e ? static_cast<int64_t>(std::atof(e) * 1000) : int64_t{2000};
  }()};
  return d;
}
constexpr std::chrono::milliseconds kRedraw{100};  // bar redraw interval on a terminal
constexpr std::chrono::seconds kLineEvery{10};     // line interval otherwise
std::atomic<int> g_active{0};                      // Progress objects that may draw

}  // namespace

Progress::Progress(std::string label, uint64_t total, std::string unit)
    : label_(std::move(label)),
      unit_(std::move(unit)),
      total_(total),
      enabled_(false),
      tty_(isatty(fileno(stderr)) != 0),
      start_(Clock::now()),
      last_(start_) {
  if (log_level() < LogLevel::kInfo) return;
  if (g_active.fetch_add(1) == 0)
    enabled_ = true;
  else
    g_active.fetch_sub(1);
}

Progress::~Progress() {
  if (!enabled_) return;
  if (shown_) draw(true);
  g_active.fetch_sub(1);
}

void Progress::update(uint64_t done) {
  done_ = std::min(done, total_);
  if (!enabled_) return;
  const Clock::time_point now = Clock::now();
  const Clock::duration every = tty_ ? Clock::duration(kRedraw) : Clock::duration(kLineEvery);
  if (now - start_ < quiet_start() || (shown_ && now - last_ < every)) return;
  last_ = now;
  draw(false);
}

// Bytes (downloads): sizes in units, the rate and the time left.
std::string Progress::draw_bytes(bool final, double secs, double frac) const {
  const double rate = secs > 0 ? static_cast<double>(done_) / secs : 0;
  const std::string amounts = fmt::format("{}/{}, {}/s", format_bytes(done_), format_bytes(total_),
                                          format_bytes(static_cast<uint64_t>(rate)));
  const std::string eta = rate > 0 ? fmt::format("{:.0f} s", static_cast<double>(total_ - done_) / rate) : "-";
  if (tty_) {
    constexpr int kWidth = 30;
    const int fill = static_cast<int>(frac * kWidth);
    return final ? std::string("\r\x1b[K")
                 : fmt::format("\r{} [{}{}] {:3.0f}% {}, ETA {}\x1b[K", label_, std::string(fill, '='),
                               std::string(kWidth - fill, ' '), 100 * frac, amounts, eta);
  }
  if (final) return fmt::format("{}: done, {} in {:.1f} s\n", label_, amounts, secs);
  return fmt::format("{}: {:.0f}% ({}), ETA {}\n", label_, 100 * frac, amounts, eta);
}

void Progress::draw(bool final) {
  shown_ = true;
  const double secs = std::chrono::duration<double>(Clock::now() - start_).count();
  const double frac = total_ ? static_cast<double>(done_) / static_cast<double>(total_) : 1.0;
  std::string line;
  if (unit_ == "B") {
    line = draw_bytes(final, secs, frac);
  } else if (tty_) {
    constexpr int kWidth = 30;
    const int fill = static_cast<int>(frac * kWidth);
    // The bar is transient: at the end it is erased, leaving the line to the command's output.
    line = final ? std::string("\r\x1b[K")
                 : fmt::format("\r{} [{}{}] {:3.0f}% {}/{} {} {:.1f} s\x1b[K", label_,
                               std::string(fill, '='), std::string(kWidth - fill, ' '), 100 * frac,
                               done_, total_, unit_, secs);
  } else if (final) {
    line = fmt::format("{}: done, {} {} in {:.1f} s\n", label_, done_, unit_, secs);
  } else {
    line = fmt::format("{}: {:.0f}% ({}/{} {}), {:.1f} s\n", label_, 100 * frac, done_, total_,
                       unit_, secs);
  }
  std::fwrite(line.data(), 1, line.size(), stderr);
  std::fflush(stderr);
}

}  // namespace sluice
