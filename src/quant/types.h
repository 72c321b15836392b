// GGML block types: ids as stored in GGUF tensor infos, and each type's block geometry. Every
// other module sizes tensors through row_bytes()/type_traits(), never through its own constants.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace sluice {

enum class GgmlType : uint32_t {
  F32 = 0, F16 = 1, Q4_0 = 2, Q4_1 = 3, Q5_0 = 6, Q5_1 = 7, Q8_0 = 8, Q8_1 = 9,
  Q2_K = 10, Q3_K = 11, Q4_K = 12, Q5_K = 13, Q6_K = 14, Q8_K = 15,
  IQ2_XXS = 16, IQ2_XS = 17, IQ3_XXS = 18, IQ1_S = 19, IQ4_NL = 20, IQ3_S = 21, IQ2_S = 22,
  IQ4_XS = 23, I8 = 24, I16 = 25, I32 = 26, I64 = 27, F64 = 28, IQ1_M = 29, BF16 = 30,
  TQ1_0 = 34, TQ2_0 = 35, MXFP4 = 39,
};

struct TypeTraits {
  GgmlType type;
  std::string_view name;  // as llama.cpp prints it: "Q4_K", "IQ2_XXS", "MXFP4"
  uint32_t block_elems;   // values per block
  uint32_t block_bytes;   // bytes per block
};

// nullopt for ids no GGUF writer emits (removed or never assigned).
std::optional<TypeTraits> find_type(uint32_t id);
// For a known type; callers validate ids with find_type first.
const TypeTraits& type_traits(GgmlType type);
std::optional<GgmlType> type_from_name(std::string_view name);
inline std::string_view type_name(GgmlType t) { return type_traits(t).name; }

// Bytes of a row of n values; n must be a multiple of the block size (checked by callers).
inline uint64_t row_bytes(GgmlType t, uint64_t n) {
  const TypeTraits& tt = type_traits(t);
  return n / tt.block_elems * tt.block_bytes;
}

}  // namespace sluice
