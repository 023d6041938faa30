/* Vectors of eight floats shared by the native kernels: GCC/Clang vector extensions, one AVX
 * register (other targets split them), with the few helpers C's vector syntax lacks.
 * Included by the *.c files here; _native/__init__.py hashes it with them.
 */
#ifndef PYG_LIE_SIMD_H
#define PYG_LIE_SIMD_H

#include <stdint.h>
#include <string.h>

#define VW 8 /* floats per vector */

typedef float vf __attribute__((vector_size(VW * 4)));
typedef int32_t vi __attribute__((vector_size(VW * 4)));

/* broadcast; written as a - 0 because a + 0 is not an identity (-0 + 0 = +0), so GCC would emit
 * the addition */
static inline vf splat(float a) { return a - (vf){0}; }

/* unaligned load */
static inline vf vload(const float *p) {
    vf v;
    memcpy(&v, p, sizeof v);
    return v;
}

/* lane-wise select (C has no vector ?:): mask lanes are all ones or zero */
static inline vf vselect(vi mask, vf a, vf b) { return (vf)(((vi)a & mask) | ((vi)b & ~mask)); }

#if defined(__AVX__)
#include <immintrin.h>
static inline vf vmin(vf a, vf b) { return (vf)_mm256_min_ps((__m256)a, (__m256)b); }
static inline vf vmax(vf a, vf b) { return (vf)_mm256_max_ps((__m256)a, (__m256)b); }
#else
static inline vf vmin(vf a, vf b) { return vselect(a < b, a, b); }
static inline vf vmax(vf a, vf b) { return vselect(a > b, a, b); }
#endif

#endif
