/* Checks on the CSR pointers handed to the native kernels, written once for every *.c file here;
 * _native/__init__.py hashes this header with them.
 */
#ifndef PYG_LIE_CSR_H
#define PYG_LIE_CSR_H

#include <stdint.h>

/* the return code of a kernel that found an index outside its range or a bad pointer (nothing
 * useful written); _native/__init__.py raises ValueError for it */
#define CSR_BAD_INDEX 3

/* 0 if ptr (N + 1) is a pointer of E edges in N rows: ptr[0] = 0, ptr[N] = E, non-decreasing;
 * 1 otherwise, before any kernel reads edges through it */
static inline int csr_bad_ptr(int64_t N, int64_t E, const int64_t *ptr) {
    if (N < 0 || E < 0 || ptr[0] != 0 || ptr[N] != E) return 1;
    for (int64_t i = 0; i < N; i++)
        if (ptr[i + 1] < ptr[i]) return 1;
    return 0;
}

/* 1 if an entry of idx[e0 .. e1) lies outside [0, M): run on a row's indices just before the row
 * reads through them (they are then in cache), so the check costs no pass of its own */
static inline int csr_bad_range(const int64_t *idx, int64_t e0, int64_t e1, int64_t M) {
    int bad = 0;
    for (int64_t e = e0; e < e1; e++) bad |= (uint64_t)idx[e] >= (uint64_t)M;
    return bad;
}

#endif
