/* Softmax over segments of rows, float32, CPU: the normalisation of attention scores over each
 * target's incoming edges when the edges are sorted by target (attention_core._SortedSoftmax).
 *
 *   w[r, e] = exp(s[r, e] - m) / sum_{e' in seg} exp(s[r, e'] - m),  m = max_{e' in seg} s[r, e']
 *
 * for s, w (R, E) row-major (R heads) and segments ptr[i] .. ptr[i + 1] - 1 of every row, and its
 * backward  ds = w * g - w * sum_seg(w * g). torch's segment reductions take five passes over
 * (R, E) and two gathers of the per-segment values; here one (row, segment) pair is one task
 * whose values stay in L1: a max pass, an exp-and-sum pass (vexpneg of simd.h) and a scaling
 * pass. A segment whose maximum is not finite or that holds a NaN is done in scalar code with
 * libm's expf, so that +inf and NaN scores give NaN as torch does; -inf scores (masked edges)
 * give 0 on the vector path too. Threads: OpenMP over (row, segment) pairs.
 * Built and loaded by _native/__init__.py.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "csr.h"
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
static void softmax_scalar(const float *s, float *w, int64_t n) {
    float m = s[0];
    for (int64_t e = 1; e < n; e++) m = (s[e] > m || isnan(s[e])) ? s[e] : m;
    float z = 0.0f;
    for (int64_t e = 0; e < n; e++) z += (w[e] = expf(s[e] - m));
    for (int64_t e = 0; e < n; e++) w[e] /= z;
}

static void softmax_segment(const float *s, float *w, int64_t n) {
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

static void softmax_backward_segment(const float *g, const float *w, float *out, int64_t n) {
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

int segment_softmax_f32(int64_t R, int64_t N, int64_t E, const float *s, const int64_t *ptr, float *w,
                        int nthreads) {
    if (csr_bad_ptr(N, E, ptr)) return 1;
#pragma omp parallel for num_threads(nthreads) schedule(dynamic, 64) collapse(2)
    for (int64_t r = 0; r < R; r++)
        for (int64_t i = 0; i < N; i++)
            if (ptr[i + 1] > ptr[i]) softmax_segment(s + r * E + ptr[i], w + r * E + ptr[i], ptr[i + 1] - ptr[i]);
    return 0;
}

int segment_softmax_backward_f32(int64_t R, int64_t N, int64_t E, const float *g, const float *w, const int64_t *ptr,
                                 float *out, int nthreads) {
    if (csr_bad_ptr(N, E, ptr)) return 1;
#pragma omp parallel for num_threads(nthreads) schedule(dynamic, 64) collapse(2)
    for (int64_t r = 0; r < R; r++)
        for (int64_t i = 0; i < N; i++) {
            const int64_t o = r * E + ptr[i];
            softmax_backward_segment(g + o, w + o, out + o, ptr[i + 1] - ptr[i]);
        }
    return 0;
}
