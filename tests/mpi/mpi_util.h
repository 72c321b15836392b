// mpirun as the MPI tests start it: over TCP on this machine, allowed as root, ranks
// outnumbering cores.
#pragma once

#include <string>

namespace sluice::test {

// `wrap` runs each rank through `sh -c` (with $OMPI_COMM_WORLD_RANK) before exec'ing sluice.
inline std::string mpirun(int n, const std::string& args, const std::string& wrap = "") {
  const std::string run = std::string(SLUICE_MPIEXEC) + " --oversubscribe -np " +
                          std::to_string(n) + " --mca btl tcp,self --mca btl_tcp_if_include lo ";
  const std::string env = "env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 ";
  if (wrap.empty()) return env + run + SLUICE_BIN + " " + args;
  return env + run + "sh -c '" + wrap + " exec " + SLUICE_BIN + " " + args + "'";
}

}  // namespace sluice::test
