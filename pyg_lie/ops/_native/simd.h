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

/* the sum of the lanes, pairwise */
static inline float vsum(vf v) {
    float t[VW];
    memcpy(t, &v, sizeof t);
    return ((t[0] + t[4]) + (t[2] + t[6])) + ((t[1] + t[5]) + (t[3] + t[7]));
}

#if defined(__AVX__)
#include <immintrin.h>
static inline vf vmin(vf a, vf b) { return (vf)_mm256_min_ps((__m256)a, (__m256)b); }
static inline vf vmax(vf a, vf b) { return (vf)_mm256_max_ps((__m256)a, (__m256)b); }
/* lane l of the result: the sum of s[l]'s eight lanes (one transposing tree of horizontal
 * additions: eight dot products finished at once) */
static inline vf sum8x8(const vf s[8]) {
    __m256 t0 = _mm256_hadd_ps((__m256)s[0], (__m256)s[1]), t1 = _mm256_hadd_ps((__m256)s[2], (__m256)s[3]);
    __m256 t2 = _mm256_hadd_ps((__m256)s[4], (__m256)s[5]), t3 = _mm256_hadd_ps((__m256)s[6], (__m256)s[7]);
    __m256 u0 = _mm256_hadd_ps(t0, t1), u1 = _mm256_hadd_ps(t2, t3);
    return (vf)_mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20), _mm256_permute2f128_ps(u0, u1, 0x31));
}
#else
static inline vf vmin(vf a, vf b) { return vselect(a < b, a, b); }
static inline vf vmax(vf a, vf b) { return vselect(a > b, a, b); }
#endif

#define INLINE static inline __attribute__((always_inline))

/* a * b + c, one rounding where the CPU has FMA: written out because the compiler's own
 * contraction of a * b + c may differ between two inlined copies of the same loop, and kernels
 * that reuse a loop (csr_products.c) promise the same bits */
INLINE vf vfma(vf a, vf b, vf c) {
#if defined(__FMA__)
    return (vf)_mm256_fmadd_ps((__m256)a, (__m256)b, (__m256)c);
#else
    return a * b + c;
#endif
}

/* the lane partial sums of the dot product of a[0 .. D) and b[0 .. D), D a multiple of 8 */
INLINE vf dot8(const float *a, const float *b, int64_t D) {
    vf s = {0};
    for (int64_t d = 0; d < D; d += 8) s = vfma(vload(a + d), vload(b + d), s);
    return s;
}

/* exp(-z) = 2^n exp(-u), n = round(-z / ln 2), u = z + n ln 2 (|u| <= ln 2 / 2), exp(-u) by a
 * degree-6 polynomial fitted for relative error (1e-7 in float32 arithmetic over the interval).
 * z is clamped to [-88.72, 88.3], so n + 127 lies in [0, 255]; n is found by adding
 * 1.5 * 2^23 + 127, which leaves n + 127 in the low mantissa bits, so shifting them into the
 * exponent field gives 2^n: +inf at n = 128 (z <= -88.72, where exp(-z) overflows anyway) and 0
 * at n = -127 (z >= 88.3, where the true value is a denormal under 4.6e-39). A NaN z is
 * clamped to 88.3 (AVX min/max return their second operand), so callers that may see NaN check
 * for it. Written for exp(-z) because both callers have -z at hand (SiLU's sigmoid, softmax's
 * m - s).
 *
 * vexpneg_n: n <= 8 vectors at once, stage by stage, so that their dependency chains (about 16
 * operations each) overlap instead of running one after another; the same operations in the
 * same order as vexpneg, so the same bits. With sigmoid = 1 it returns 1 / (1 + exp(-z)) (the
 * division in the last stage, where it overlaps with the other vectors' work). */
INLINE void vexpneg_n(const vf *z0, vf *out, const int n, const int sigmoid) {
    const vf magic = splat(12582912.0f + 127.0f);
    vf t[8], u[8], p[8];
    for (int i = 0; i < n; i++) {
        vf z = vmax(vmin(z0[i], splat(88.3f)), splat(-88.72f));
        t[i] = z * splat(-1.44269504088896341f) + magic;
        vf k = t[i] - magic;
        u[i] = z + k * splat(0.693145751953125f); /* ln 2 in two parts: k * hi is exact */
        u[i] = u[i] + k * splat(1.428606765330187e-06f);
    }
    for (int i = 0; i < n; i++) p[i] = splat(0.0013836839934810996f) * u[i] + splat(-0.008374815806746483f);
    for (int i = 0; i < n; i++) p[i] = p[i] * u[i] + splat(0.04166822507977486f);
    for (int i = 0; i < n; i++) p[i] = p[i] * u[i] + splat(-0.16666419804096222f);
    for (int i = 0; i < n; i++) p[i] = p[i] * u[i] + splat(0.49999991059303284f);
    for (int i = 0; i < n; i++) p[i] = p[i] * u[i] + splat(-1.0f);
    for (int i = 0; i < n; i++) p[i] = p[i] * u[i] + splat(1.0f);
    for (int i = 0; i < n; i++) {
        vi bits = (vi)t[i] << 23;
        vf scale;
        memcpy(&scale, &bits, sizeof scale);
        out[i] = sigmoid ? splat(1.0f) / (splat(1.0f) + p[i] * scale) : p[i] * scale;
    }
}

static inline vf vexpneg(vf z) {
    vf e;
    vexpneg_n(&z, &e, 1, 0);
    return e;
}

#endif
