// The AVX-512 intrinsics header for the *_avx512.cpp kernel files. GCC 12's AVX-512 headers build
// some intrinsics on _mm512_undefined_*(), which -Wuninitialized reports at every use (GCC bug
// 105593); the warnings are silenced for the header alone.
#pragma once

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
