/* Multi-head products on a CSR graph (rows = targets i, columns = sources j), float32 and float64.
 *
 *   SDDMM  out[h, e] = A[i, h, :] . B[j, h, :]              for every edge e = (j -> i)
 *   SpMM   out[i, h, :] = sum_{e = (j -> i)} w[h, wperm[e]] V[j, h, :]    (wperm NULL: w[h, e])
 *
 * for A (N, H, D), B (M, H, D), V (M, H, Dv) and w, out (H, E) row-major, edges in CSR order
 * (crow (N + 1), col (E), int64). Every kernel checks crow (csr_bad_ptr) and, row by row before
 * reading through them, that the row's sources lie in [0, M) and its wperm entries in [0, E)
 * (csr_bad_range); it returns CSR_BAD_INDEX (csr.h) if not.
 * wperm lets the backward passes run SpMM on the transposed pattern with
 * weights stored in the original edge order, without gathering them first. torch's sparse
 * kernels take one head per call and a CSR tensor built for each; here one pass over the rows
 * serves every head, threads (OpenMP, torch's pool) take whole rows, so every output is written
 * by one thread and no atomics are needed.
 * Dot products are summed in LANES partial sums so that the compiler can vectorise them
 * without reassociating (no -ffast-math).
 *
 * float32 with head widths that are multiples of 8 (the common 8, 16, 32) takes vector paths
 * (measured in a C harness, 1024 nodes, 32k edges, 4 heads of 16: about 1.7x faster SDDMM and
 * 2x faster SpMM than the generic loops):
 * - SDDMM: eight edges of a row at a time per head, their eight vector partial sums reduced
 *   together by one transposing tree of horizontal additions (AVX), and stored as one vector;
 *   the row code is compiled with D = 8, 16 and 32 as constants, so that the dot products
 *   unroll and stay in registers (4 heads of 16, 1024 nodes, 32.8k edges, one thread, median
 *   of 300 calls, three alternations: 263-372 against 738-1098 us with random sources, 259-263
 *   against 576-668 us with nearby ones);
 * - SpMM: up to eight vectors of a row's output stay in registers over all its edges.
 * The multiply-adds are written as explicit FMAs (vfma of simd.h), so that the fused attention
 * at the end of this file, which reuses these row loops, gives the same bits as the separate
 * products. Built and loaded by _native/__init__.py.
 */
#include <stdint.h>
#include <string.h>

#include "csr.h"
#include "simd.h"
#include "softmax.h"

#define LANES 8

#define CSR_KERNELS(T, S)                                                                                  \
    static T dot_##S(const T *a, const T *b, int64_t n) {                                                  \
        T part[LANES] = {0};                                                                               \
        int64_t d = 0;                                                                                     \
        for (; d + LANES <= n; d += LANES)                                                                 \
            for (int l = 0; l < LANES; l++) part[l] += a[d + l] * b[d + l];                                \
        for (; d < n; d++) part[0] += a[d] * b[d];                                                         \
        for (int half = LANES / 2; half > 0; half /= 2) /* pairwise: vector halves, not a serial chain */  \
            for (int l = 0; l < half; l++) part[l] += part[l + half];                                      \
        return part[0];                                                                                    \
    }                                                                                                      \
                                                                                                           \
    int csr_sddmm_##S(int64_t N, int64_t M, int64_t H, int64_t D, int64_t E, const T *A, const T *B,       \
                      const int64_t *crow, const int64_t *col, T *out, int nthreads) {                     \
        if (csr_bad_ptr(N, E, crow)) return CSR_BAD_INDEX;                                                 \
        int bad = 0;                                                                                       \
        _Pragma("omp parallel for num_threads(nthreads) schedule(dynamic, 16) reduction(| : bad)")         \
        for (int64_t i = 0; i < N; i++) {                                                                  \
            if (csr_bad_range(col, crow[i], crow[i + 1], M)) {                                             \
                bad = 1;                                                                                   \
                continue;                                                                                  \
            }                                                                                              \
            const T *a = A + i * H * D;                                                                    \
            for (int64_t e = crow[i]; e < crow[i + 1]; e++) {                                              \
                const T *b = B + col[e] * H * D;                                                           \
                for (int64_t h = 0; h < H; h++) out[h * E + e] = dot_##S(a + h * D, b + h * D, D);         \
            }                                                                                              \
        }                                                                                                  \
        return bad ? CSR_BAD_INDEX : 0;                                                                    \
    }                                                                                                      \
                                                                                                           \
    int csr_spmm_##S(int64_t N, int64_t M, int64_t H, int64_t Dv, int64_t E, const T *w, const T *V,       \
                     const int64_t *crow, const int64_t *col, const int64_t *wperm, T *out, int nthreads) {\
        if (csr_bad_ptr(N, E, crow)) return CSR_BAD_INDEX;                                                 \
        int bad = 0;                                                                                       \
        _Pragma("omp parallel for num_threads(nthreads) schedule(dynamic, 16) reduction(| : bad)")         \
        for (int64_t i = 0; i < N; i++) {                                                                  \
            T *o = out + i * H * Dv;                                                                       \
            memset(o, 0, H * Dv * sizeof(T));                                                              \
            if (csr_bad_range(col, crow[i], crow[i + 1], M)                                                \
                || (wperm && csr_bad_range(wperm, crow[i], crow[i + 1], E))) {                             \
                bad = 1;                                                                                   \
                continue;                                                                                  \
            }                                                                                              \
            for (int64_t e = crow[i]; e < crow[i + 1]; e++) {                                              \
                const T *v = V + col[e] * H * Dv;                                                          \
                for (int64_t h = 0; h < H; h++) {                                                          \
                    const T we = w[h * E + (wperm ? wperm[e] : e)];                                        \
                    for (int64_t d = 0; d < Dv; d++) o[h * Dv + d] += we * v[h * Dv + d];                  \
                }                                                                                          \
            }                                                                                              \
        }                                                                                                  \
        return bad ? CSR_BAD_INDEX : 0;                                                                    \
    }

CSR_KERNELS(float, f32_generic)
CSR_KERNELS(double, f64)

/* row i of the SDDMM; inlined with D a constant for the common widths, so that the dot
 * products unroll and their partial sums stay in registers */
INLINE void sddmm_row(int64_t i, int64_t H, int64_t D, int64_t E, const float *A, const float *B,
                      const int64_t *crow, const int64_t *col, float *out) {
    const float *a = A + i * H * D;
    int64_t e = crow[i];
#if defined(__AVX__)
    for (; e + 8 <= crow[i + 1]; e += 8) {
        const float *b[8];
        for (int l = 0; l < 8; l++) b[l] = B + col[e + l] * H * D;
        for (int64_t h = 0; h < H; h++) {
            vf s[8];
            for (int l = 0; l < 8; l++) s[l] = dot8(a + h * D, b[l] + h * D, D);
            vf r = sum8x8(s);
            memcpy(out + h * E + e, &r, sizeof r);
        }
    }
#endif
    for (; e < crow[i + 1]; e++) {
        const float *b = B + col[e] * H * D;
        for (int64_t h = 0; h < H; h++) out[h * E + e] = vsum(dot8(a + h * D, b + h * D, D));
    }
}

int csr_sddmm_f32(int64_t N, int64_t M, int64_t H, int64_t D, int64_t E, const float *A, const float *B,
                  const int64_t *crow, const int64_t *col, float *out, int nthreads) {
    if (D % 8) return csr_sddmm_f32_generic(N, M, H, D, E, A, B, crow, col, out, nthreads);
    if (csr_bad_ptr(N, E, crow)) return CSR_BAD_INDEX;
    int bad = 0;
#pragma omp parallel for num_threads(nthreads) schedule(dynamic, 16) reduction(| : bad)
    for (int64_t i = 0; i < N; i++) {
        if (csr_bad_range(col, crow[i], crow[i + 1], M)) {
            bad = 1;
            continue;
        }
        if (D == 16) sddmm_row(i, H, 16, E, A, B, crow, col, out);
        else if (D == 8) sddmm_row(i, H, 8, E, A, B, crow, col, out);
        else if (D == 32) sddmm_row(i, H, 32, E, A, B, crow, col, out);
        else sddmm_row(i, H, D, E, A, B, crow, col, out);
    }
    return bad ? CSR_BAD_INDEX : 0;
}

#define ROW_VECTORS 8 /* output vectors of a row kept in registers at a time */

/* nv <= ROW_VECTORS output vectors from column c0 of row i of the SpMM; inlined with
 * nv = ROW_VECTORS a constant for full chunks, so that the accumulators stay in registers */
INLINE void spmm_chunk(int64_t i, int64_t c0, int nv, int64_t W, int64_t Dv, int64_t E, const float *w,
                       const float *V, const int64_t *crow, const int64_t *col, const int64_t *wperm, float *out) {
    vf acc[ROW_VECTORS];
    const float *wk[ROW_VECTORS]; /* the weights of each vector's head */
    for (int k = 0; k < nv; k++) {
        acc[k] = (vf){0};
        wk[k] = w + (c0 + 8 * k) / Dv * E;
    }
    for (int64_t e = crow[i]; e < crow[i + 1]; e++) {
        const float *v = V + col[e] * W + c0;
        const int64_t ew = wperm ? wperm[e] : e;
        for (int k = 0; k < nv; k++) acc[k] = vfma(splat(wk[k][ew]), vload(v + 8 * k), acc[k]);
    }
    for (int k = 0; k < nv; k++) memcpy(out + i * W + c0 + 8 * k, &acc[k], sizeof(vf));
}

/* row i of the SpMM, Dv a multiple of 8 */
INLINE void spmm_row(int64_t i, int64_t H, int64_t Dv, int64_t E, const float *w, const float *V,
                     const int64_t *crow, const int64_t *col, const int64_t *wperm, float *out) {
    const int64_t W = H * Dv; /* floats per row; every vector lies within one head */
    for (int64_t c0 = 0; c0 < W; c0 += 8 * ROW_VECTORS) {
        const int64_t nv = (W - c0) / 8;
        if (nv >= ROW_VECTORS) spmm_chunk(i, c0, ROW_VECTORS, W, Dv, E, w, V, crow, col, wperm, out);
        else spmm_chunk(i, c0, (int)nv, W, Dv, E, w, V, crow, col, wperm, out);
    }
}

int csr_spmm_f32(int64_t N, int64_t M, int64_t H, int64_t Dv, int64_t E, const float *w, const float *V,
                 const int64_t *crow, const int64_t *col, const int64_t *wperm, float *out, int nthreads) {
    if (Dv % 8) return csr_spmm_f32_generic(N, M, H, Dv, E, w, V, crow, col, wperm, out, nthreads);
    if (csr_bad_ptr(N, E, crow)) return CSR_BAD_INDEX;
    int bad = 0;
#pragma omp parallel for num_threads(nthreads) schedule(dynamic, 16) reduction(| : bad)
    for (int64_t i = 0; i < N; i++) {
        if (csr_bad_range(col, crow[i], crow[i + 1], M)
            || (wperm && csr_bad_range(wperm, crow[i], crow[i + 1], E))) {
            bad = 1;
            continue;
        }
        spmm_row(i, H, Dv, E, w, V, crow, col, wperm, out);
    }
    return bad ? CSR_BAD_INDEX : 0;
}

/* ---------------------------------------------------------------- fused softmax attention
 *
 *   s[h, e] = q[i, h] . k[j, h] + l[h, e],   w[h, :] = softmax of s[h, :] over the edges of i,
 *   out[i, h] = sum_{e = (j -> i)} w[h, e] v[j, h]
 *
 * for q, k, v (N, H, D) with D a multiple of 8 and l, w (H, E) in CSR order: the SDDMM, the
 * addition of the location scores, the segment softmax (softmax.h) and the SpMM above, one row
 * at a time while the row's scores are in L1, instead of three passes over (H, E) and as many
 * operator calls. Each step is the unfused one's code in the same order, so the results are
 * the same to the bit. The backward, for the output gradient g (N, H, D) and optionally a
 * gradient gw (H, E) of the weights themselves:
 *
 *   rows i:        gs = softmax backward of (g[i] . v[j] + gw) (the scores' gradient, which is
 *                  also l's), gq[i] = sum gs k[j]
 *   sources j:     gv[j] = sum w g[i],  gk[j] = sum gs q[i]   (transposed pattern: crow_t,
 *                  col_t, and perm_t giving each transposed edge's sorted-edge id)
 *
 * two passes instead of five. Returns 1 for a width that is not a multiple of 8 (the caller takes
 * the unfused path), CSR_BAD_INDEX for a bad pointer or an index out of range. */

/* row i of the fused forward; D a constant where inlined for the common widths */
INLINE void attention_row(int64_t i, int64_t H, int64_t D, int64_t E, const float *q, const float *k,
                          const float *v, const float *l, const int64_t *crow, const int64_t *col, float *w,
                          float *out) {
    sddmm_row(i, H, D, E, q, k, crow, col, w);
    const int64_t e0 = crow[i], n = crow[i + 1] - e0;
    if (n > 0)
        for (int64_t h = 0; h < H; h++) {
            float *s = w + h * E + e0;
            const float *lh = l + h * E + e0;
            for (int64_t e = 0; e < n; e++) s[e] += lh[e];
            softmax_segment(s, s, n);
        }
    spmm_row(i, H, D, E, w, v, crow, col, NULL, out);
}

int csr_attention_f32(int64_t N, int64_t H, int64_t D, int64_t E, const float *q, const float *k, const float *v,
                      const float *l, const int64_t *crow, const int64_t *col, float *w, float *out, int nthreads) {
    if (D % 8) return 1;
    if (csr_bad_ptr(N, E, crow)) return CSR_BAD_INDEX;
    int bad = 0;
#pragma omp parallel for num_threads(nthreads) schedule(dynamic, 16) reduction(| : bad)
    for (int64_t i = 0; i < N; i++) {
        if (csr_bad_range(col, crow[i], crow[i + 1], N)) {
            bad = 1;
            continue;
        }
        if (D == 16) attention_row(i, H, 16, E, q, k, v, l, crow, col, w, out);
        else if (D == 8) attention_row(i, H, 8, E, q, k, v, l, crow, col, w, out);
        else if (D == 32) attention_row(i, H, 32, E, q, k, v, l, crow, col, w, out);
        else attention_row(i, H, D, E, q, k, v, l, crow, col, w, out);
    }
    return bad ? CSR_BAD_INDEX : 0;
}

/* row i of the backward's first pass */
INLINE void attention_backward_row(int64_t i, int64_t H, int64_t D, int64_t E, const float *k, const float *v,
                                   const float *w, const float *g, const float *gw, const int64_t *crow,
                                   const int64_t *col, float *gs, float *gq) {
    sddmm_row(i, H, D, E, g, v, crow, col, gs);
    const int64_t e0 = crow[i], n = crow[i + 1] - e0;
    if (n > 0)
        for (int64_t h = 0; h < H; h++) {
            float *t = gs + h * E + e0;
            if (gw)
                for (int64_t e = 0; e < n; e++) t[e] += gw[h * E + e0 + e];
            softmax_backward_segment(t, w + h * E + e0, t, n);
        }
    spmm_row(i, H, D, E, gs, k, crow, col, NULL, gq);
}

int csr_attention_backward_f32(int64_t N, int64_t H, int64_t D, int64_t E, const float *q, const float *k,
                               const float *v, const float *w, const float *g, const float *gw,
                               const int64_t *crow, const int64_t *col, const int64_t *crow_t,
                               const int64_t *col_t, const int64_t *perm_t, float *gq, float *gk, float *gv,
                               float *gs, int nthreads) {
    if (D % 8) return 1;
    if (csr_bad_ptr(N, E, crow) || csr_bad_ptr(N, E, crow_t)) return CSR_BAD_INDEX;
    int bad = 0;
#pragma omp parallel num_threads(nthreads) reduction(| : bad)
    {
#pragma omp for schedule(dynamic, 16)
        for (int64_t i = 0; i < N; i++) {
            if (csr_bad_range(col, crow[i], crow[i + 1], N)) {
                bad = 1;
                continue;
            }
            if (D == 16) attention_backward_row(i, H, 16, E, k, v, w, g, gw, crow, col, gs, gq);
            else if (D == 8) attention_backward_row(i, H, 8, E, k, v, w, g, gw, crow, col, gs, gq);
            else if (D == 32) attention_backward_row(i, H, 32, E, k, v, w, g, gw, crow, col, gs, gq);
            else attention_backward_row(i, H, D, E, k, v, w, g, gw, crow, col, gs, gq);
        }
        /* the implicit barrier: every gs is written before the sources read them */
#pragma omp for schedule(dynamic, 16)
        for (int64_t j = 0; j < N; j++) {
            if (csr_bad_range(col_t, crow_t[j], crow_t[j + 1], N) || csr_bad_range(perm_t, crow_t[j], crow_t[j + 1], E)) {
                bad = 1;
                continue;
            }
            spmm_row(j, H, D, E, w, g, crow_t, col_t, perm_t, gv);
            spmm_row(j, H, D, E, gs, q, crow_t, col_t, perm_t, gk);
        }
    }
    return bad ? CSR_BAD_INDEX : 0;
}
