/* Checks on the CSR pointers handed to the native kernels, written once for every *.c file here;
 * _native/__init__.py hashes this header with them.
 */
#ifndef PYG_LIE_CSR_H
#define PYG_LIE_CSR_H

#include <stdint.h>

/* 0 if ptr (N + 1) is a pointer of E edges in N rows: ptr[0] = 0, ptr[N] = E, non-decreasing;
 * 1 otherwise, before any kernel reads edges through it */
static inline int csr_bad_ptr(int64_t N, int64_t E, const int64_t *ptr) {
    if (ptr[0] != 0 || ptr[N] != E) return 1;
    for (int64_t i = 0; i < N; i++)
        if (ptr[i + 1] < ptr[i]) return 1;
    return 0;
}

#endif
