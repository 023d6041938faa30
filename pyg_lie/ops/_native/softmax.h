/* The softmax of one segment of scores and its backward, float32, with the vectors of simd.h:
 * shared by segment_softmax.c (a softmax over the segments of rows) and csr_attention.c (the
 * fused attention, whose scores are computed row by row). _native/__init__.py hashes this
 * header with the sources.
 *
 *   softmax_segment(s, w, n):              w = exp(s - max s) / sum exp(s - max s)
 *   softmax_backward_segment(g, w, out, n): out = w * g - w * sum(w * g)
 *
 * for n >= 1 floats; both may work in place (w = s, out = g): every vector is read before the
 * same vector is written. A segment whose maximum is not finite or that holds a NaN is done in
 * scalar code with libm's expf, so that +inf and NaN scores give NaN as torch does; -inf scores
 * (masked edges) give 0 on the vector path too.
 */
#ifndef PYG_LIE_SOFTMAX_H
#define PYG_LIE_SOFTMAX_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "simd.h"

/* lanes l < n */
static inline vi first_lanes(int64_t n) {
    const vi lane = {0, 1, 2, 3, 4, 5, 6, 7};
    return lane < (int32_t)n;
}

/* the first n < VW floats of p, the other lanes fill; masked accesses touch no memory beyond */
static inline vf load_part(const float *p, int64_t n, float fill) {
#if defined(__AVX__)
    vi m = first_lanes(n);
    return vselect(m, (vf)_mm256_maskload_ps(p, (__m256i)m), splat(fill));
#else
    vf v = splat(fill);
    memcpy(&v, p, n * sizeof(float));
    return v;
#endif
}

static inline void store_part(float *p, vf v, int64_t n) {
#if defined(__AVX__)
    _mm256_maskstore_ps(p, (__m256i)first_lanes(n), (__m256)v);
#else
    memcpy(p, &v, n * sizeof(float));
#endif
}

static inline float vmax_lanes(vf v) {
    float m = v[0];
    for (int l = 1; l < VW; l++) m = v[l] > m ? v[l] : m;
    return m;
}

/* torch's formula in scalar code, for segments with a non-finite maximum or a NaN */
static inline void softmax_scalar(const float *s, float *w, int64_t n) {
    float m = s[0];
    for (int64_t e = 1; e < n; e++) m = (s[e] > m || isnan(s[e])) ? s[e] : m;
    float z = 0.0f;
    for (int64_t e = 0; e < n; e++) z += (w[e] = expf(s[e] - m));
    for (int64_t e = 0; e < n; e++) w[e] /= z;
}

static inline void softmax_segment(const float *s, float *w, int64_t n) {
    const int64_t nv = n - n % VW;
    vf vm = splat(-INFINITY);
    vi nan = {0};
    for (int64_t e = 0; e < nv; e += VW) {
        vf x = vload(s + e);
        vm = vmax(vm, x);
        nan |= x != x;
    }
    if (nv < n) {
        vf x = load_part(s + nv, n - nv, -INFINITY);
        vm = vmax(vm, x);
        nan |= x != x;
    }
    const float m = vmax_lanes(vm);
    int any_nan = 0;
    for (int l = 0; l < VW; l++) any_nan |= nan[l];
    if (any_nan || !isfinite(m)) {
        softmax_scalar(s, w, n);
        return;
    }
    const vf mv = splat(m);
    vf acc = {0};
    for (int64_t e = 0; e < nv; e += VW) {
        vf x = vexpneg(mv - vload(s + e));
        memcpy(w + e, &x, sizeof x);
        acc += x;
    }
    vf tail = {0};
    if (nv < n) { /* the fill -inf gives exp(-inf) = 0 */
        tail = vexpneg(mv - load_part(s + nv, n - nv, -INFINITY));
        acc += tail;
    }
    const vf z = splat(vsum(acc));
    for (int64_t e = 0; e < nv; e += VW) {
        vf x = vload(w + e) / z;
        memcpy(w + e, &x, sizeof x);
    }
    if (nv < n) store_part(w + nv, tail / z, n - nv);
}

static inline void softmax_backward_segment(const float *g, const float *w, float *out, int64_t n) {
    const int64_t nv = n - n % VW;
    vf acc = {0};
    for (int64_t e = 0; e < nv; e += VW) acc += vload(g + e) * vload(w + e);
    if (nv < n) acc += load_part(g + nv, n - nv, 0.0f) * load_part(w + nv, n - nv, 0.0f);
    const vf t = splat(vsum(acc));
    for (int64_t e = 0; e < nv; e += VW) {
        vf wv = vload(w + e), x = vload(g + e) * wv - wv * t;
        memcpy(out + e, &x, sizeof x);
    }
    if (nv < n) {
        vf wv = load_part(w + nv, n - nv, 0.0f);
        store_part(out + nv, load_part(g + nv, n - nv, 0.0f) * wv - wv * t, n - nv);
    }
}

#endif
