// Memory available to this process: the tightest of the cgroup limit (v2 or v1, walking up the
// hierarchy because a parent's limit binds a child too), the kernel's MemAvailable estimate, and
// RLIMIT_MEMLOCK for callers that pin memory. The expert cache is sized from this, so reading
// never throws: a file that is missing or unparsable leaves its field unset.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace sluice {

struct MemInfo {
  std::optional<uint64_t> mem_total;      // /proc/meminfo MemTotal
  std::optional<uint64_t> mem_available;  // /proc/meminfo MemAvailable
  int cgroup_version = 0;                 // 1 or 2 when a memory limit was found, else 0
  std::optional<uint64_t> cgroup_limit;   // the binding limit; unset when unlimited
  std::optional<uint64_t> cgroup_usage;   // usage of the cgroup that holds that limit
  std::optional<uint64_t> memlock_limit;  // soft RLIMIT_MEMLOCK; unset when unlimited or CAP_IPC_LOCK lifts it
  std::optional<uint64_t> rss;            // VmRSS of this process

  // min(cgroup limit − cgroup usage, MemAvailable) over the fields that are known; nullopt when
  // neither is. A usage above the limit (possible transiently) counts as 0 headroom.
  std::optional<uint64_t> available_bytes() const;
};

// Reads the live system.
MemInfo read_meminfo();
// Reads /proc and /sys/fs/cgroup under `root` ("" for the real ones) so that tests can point it
// at a fixture tree; RLIMIT_MEMLOCK always comes from getrlimit.
MemInfo read_meminfo_at(const std::string& root);

// Parsers, exposed for tests. All return nullopt (or leave fields unset) on malformed input.
void parse_proc_meminfo(std::string_view text, MemInfo& out);
std::optional<uint64_t> parse_status_rss(std::string_view proc_self_status);
// A memory.max / memory.limit_in_bytes / memory.current value: "max" and the v1 "unlimited"
// sentinel (anything at or above 2^62, e.g. 9223372036854771712) give nullopt.
std::optional<uint64_t> parse_cgroup_value(std::string_view text);

struct CgroupPaths {
  std::optional<std::string> v2;  // path from the "0::" line
  std::optional<std::string> v1;  // path of the hierarchy whose controller list includes memory
};
CgroupPaths parse_proc_self_cgroup(std::string_view text);

}  // namespace sluice
