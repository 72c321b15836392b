// <immintrin.h> for the SIMD kernel files and headers. GCC 12's AVX-512 headers build some
// intrinsics on _mm512_undefined_*(), which -Wuninitialized reports at every use (GCC bug
// 105593); the warnings are silenced for the header alone. Every quant header that needs the
// intrinsics includes them through this one: the first inclusion of <immintrin.h> in a file is
// the one whose warning state counts.
#pragma once

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
