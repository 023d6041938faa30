/* Softmax over segments of rows, float32, CPU: the normalisation of attention scores over each
 * target's incoming edges when the edges are sorted by target (attention_core._SortedSoftmax).
 *
 *   w[r, e] = exp(s[r, e] - m) / sum_{e' in seg} exp(s[r, e'] - m),  m = max_{e' in seg} s[r, e']
 *
 * for s, w (R, E) row-major (R heads) and segments ptr[i] .. ptr[i + 1] - 1 of every row, and its
 * backward  ds = w * g - w * sum_seg(w * g). torch's segment reductions take five passes over
 * (R, E) and two gathers of the per-segment values; here one (row, segment) pair is one task
 * whose values stay in L1: a max pass, an exp-and-sum pass (vexpneg of simd.h) and a scaling
 * pass (the segment routines of softmax.h, which also say how +inf, -inf and NaN scores are
 * treated). Threads: OpenMP over (row, segment) pairs.
 * Built and loaded by _native/__init__.py.
 */
#include <stdint.h>

#include "csr.h"
#include "softmax.h"

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
