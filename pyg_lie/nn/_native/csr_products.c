/* Multi-head products on a CSR graph (rows = targets i, columns = sources j), float32 and float64.
 *
 *   SDDMM  out[h, e] = A[i, h, :] . B[j, h, :]              for every edge e = (j -> i)
 *   SpMM   out[i, h, :] = sum_{e = (j -> i)} w[h, e] V[j, h, :]
 *
 * for A, B (N, H, D), V (N, H, Dv) and w, out (H, E) row-major, edges in CSR order (crow (N + 1),
 * col (E), int64). torch's sparse kernels take one head per call and a CSR tensor built for
 * each; here one pass over the rows serves every head, threads (OpenMP, torch's pool) take
 * whole rows, so every output is written by one thread and no atomics are needed.
 * Dot products are summed in LANES partial sums so that the compiler can vectorise them
 * without reassociating (no -ffast-math).
 * Built and loaded by _native/__init__.py.
 */
#include <stdint.h>
#include <string.h>

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
    int csr_sddmm_##S(int64_t N, int64_t H, int64_t D, int64_t E, const T *A, const T *B,                  \
                      const int64_t *crow, const int64_t *col, T *out, int nthreads) {                     \
        _Pragma("omp parallel for num_threads(nthreads) schedule(dynamic, 16)")                            \
        for (int64_t i = 0; i < N; i++) {                                                                  \
            const T *a = A + i * H * D;                                                                    \
            for (int64_t e = crow[i]; e < crow[i + 1]; e++) {                                              \
                const T *b = B + col[e] * H * D;                                                           \
                for (int64_t h = 0; h < H; h++) out[h * E + e] = dot_##S(a + h * D, b + h * D, D);         \
            }                                                                                              \
        }                                                                                                  \
        return 0;                                                                                          \
    }                                                                                                      \
                                                                                                           \
    int csr_spmm_##S(int64_t N, int64_t H, int64_t Dv, int64_t E, const T *w, const T *V,                  \
                     const int64_t *crow, const int64_t *col, T *out, int nthreads) {                      \
        _Pragma("omp parallel for num_threads(nthreads) schedule(dynamic, 16)")                            \
        for (int64_t i = 0; i < N; i++) {                                                                  \
            T *o = out + i * H * Dv;                                                                       \
            memset(o, 0, H * Dv * sizeof(T));                                                              \
            for (int64_t e = crow[i]; e < crow[i + 1]; e++) {                                              \
                const T *v = V + col[e] * H * Dv;                                                          \
                for (int64_t h = 0; h < H; h++) {                                                          \
                    const T we = w[h * E + e];                                                             \
                    for (int64_t d = 0; d < Dv; d++) o[h * Dv + d] += we * v[h * Dv + d];                  \
                }                                                                                          \
            }                                                                                              \
        }                                                                                                  \
        return 0;                                                                                          \
    }

CSR_KERNELS(float, f32)
CSR_KERNELS(double, f64)
