/* Edge lists of lifted and complete graphs (pyg_lie.nn.lifted_edges), int64, CPU.
 *
 *   expand_edges_i64(N, E, K, ptr, col, src, dst, nthreads)
 *
 * for a base graph in CSR order (targets i < N, sources col[ptr[i] .. ptr[i + 1]) in
 * ascending order) writes the K x K lifted edges of every base edge j -> i: lifted target
 * i K + a hears lifted sources j K + b for every base source j of i and every b < K, in
 * (target, source) order. Lifted target i K + a's edges start at ptr[i] K^2 + a deg(i) K.
 * One pass that writes each output once (the torch formulation took a dozen passes of
 * index arithmetic over the E K^2 lifted edges: 10.5 ms for 262144 of them on the 2-core dev
 * VM, 2 threads). Threads (OpenMP, torch's pool) take base targets. Returns CSR_BAD_INDEX (csr.h)
 * unless ptr is a pointer of the E base edges.
 *
 *   complete_edges_i64(B, start, src, dst, nthreads)
 *
 * writes every ordered pair (j, i) of nodes of the same graph, graph b holding the nodes
 * start[b] .. start[b + 1] - 1, in (target, source) order (self pairs included): graph b's
 * edges start at sum_{c < b} n_c^2. Threads take targets. Returns CSR_BAD_INDEX unless start is
 * non-decreasing.
 * Built and loaded by _native/__init__.py.
 */
#include <stdint.h>

#include "csr.h"

int expand_edges_i64(int64_t N, int64_t E, int64_t K, const int64_t *ptr, const int64_t *col, int64_t *src,
                     int64_t *dst, int nthreads) {
    if (K < 1 || csr_bad_ptr(N, E, ptr)) return CSR_BAD_INDEX;
#pragma omp parallel for num_threads(nthreads) schedule(dynamic, 16)
    for (int64_t i = 0; i < N; i++) {
        int64_t o = ptr[i] * K * K;
        for (int64_t a = 0; a < K; a++) {
            const int64_t t = i * K + a;
            for (int64_t e = ptr[i]; e < ptr[i + 1]; e++) {
                const int64_t s0 = col[e] * K;
                for (int64_t b = 0; b < K; b++, o++) {
                    src[o] = s0 + b;
                    dst[o] = t;
                }
            }
        }
    }
    return 0;
}

int complete_edges_i64(int64_t B, const int64_t *start, int64_t *src, int64_t *dst, int nthreads) {
    for (int64_t b = 0; b < B; b++)
        if (start[b + 1] < start[b]) return CSR_BAD_INDEX;
    int64_t offset = 0;
    for (int64_t b = 0; b < B; b++) {
        const int64_t s = start[b], n = start[b + 1] - start[b];
#pragma omp parallel for num_threads(nthreads) schedule(static) if (n * n > 65536)
        for (int64_t i = 0; i < n; i++) {
            int64_t *ps = src + offset + i * n, *pd = dst + offset + i * n;
            for (int64_t j = 0; j < n; j++) {
                ps[j] = s + j;
                pd[j] = s + i;
            }
        }
        offset += n * n;
    }
    return 0;
}
