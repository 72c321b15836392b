// `sluice inspect MODEL`: metadata and tensor table of a GGUF file.
#include <fmt/format.h>

#include "cli/commands.h"
#include "core/units.h"
#include "gguf/gguf.h"

namespace sluice::cli {

int cmd_inspect(int argc, char** argv) {
  CLI::App app{"Show a GGUF model's metadata and tensors", "sluice inspect"};
  std::string path;
  app.add_option("model", path, "GGUF file (first part of a split model)")->required();
  SLUICE_PARSE(app, argc, argv);

  auto file = gguf::File::open(path);
  fmt::print("file: {} (GGUF v{}, {} part(s), {})\n", path, file->version(), file->n_parts(),
             format_bytes(file->total_size()));
  for (const auto& [k, v] : file->metadata()) fmt::print("  {:<48} {}\n", k, v.to_display());
  for (const auto& t : file->tensors())
    fmt::print("  {:<40} {:<8} {:<24} {:>12}\n", t.name, type_name(t.type), t.shape_string(), t.nbytes);
  return 0;
}

}  // namespace sluice::cli
