// The prompt tokens a Session evaluates per forward pass (llama.cpp's -ub / -b): a setting of the
// process, as those flags are, kept out of EngineOptions so that the public API stays as it was.
#pragma once

namespace sluice {

// 1..512 (the KV cache's step, kEngineKvStep); default 512. Throws sluice::Error outside it.
void set_session_prefill_chunk(int tokens);
int session_prefill_chunk();

}  // namespace sluice
