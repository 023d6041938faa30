/* Stable sorting of non-negative int64 keys by LSD radix sort (the edge orders of graphs:
 * keys such as target * N + source, below 2^40 for a million nodes).
 *
 *   radix_sort_i64(n, key, sorted, perm, tmp)
 *
 * sorts key[0 .. n) (every key >= 0) into sorted and writes the stable sorting permutation,
 * sorted[q] = key[perm[q]], into perm (may be NULL); tmp is scratch of n int64.
 * Each key is packed with its position, key << b | q (b bits for positions below n), so one
 * array of int64 moves per pass; digits of DIGIT bits, least significant first, each pass a
 * counting sort, so equal keys keep their order and the work is O(n) per pass instead of a
 * comparison sort's O(n log n) (numpy's quicksort of 32k random keys: about 2 ms on the 2-core
 * dev CPU). The position bits need no sorting (packed in order), passes whose digit is the same
 * for every key are skipped, and sorted input is copied after one check.
 * No allocation: fresh pages cost several microseconds each on the virtual dev machine, more
 * than the sort of a small graph's edges.
 * Built and loaded by _native/__init__.py.
 */
#include <stdint.h>
#include <string.h>

#define DIGIT 8
#define BUCKETS (1 << DIGIT)
#define MAX_PASSES ((63 + DIGIT - 1) / DIGIT)

static int bit_width(uint64_t v) {
    int b = 0;
    while (v >> b) b++;
    return b;
}

/* Returns 0 on success, 1 when a key is negative or the keys and positions do not fit in 63
 * bits together (the caller falls back to a comparison sort). */
int radix_sort_i64(int64_t n, const int64_t *key, int64_t *sorted, int64_t *perm, int64_t *tmp) {
    if (n < 0) return 1;
    int is_sorted = 1;
    uint64_t top = 0; /* the bitwise or of the keys: as wide as the largest */
    for (int64_t q = 0; q < n; q++) {
        if (key[q] < 0) return 1;
        top |= (uint64_t)key[q];
        if (q && key[q] < key[q - 1]) is_sorted = 0;
    }
    const int pb = n > 1 ? bit_width((uint64_t)(n - 1)) : 0, bits = bit_width(top);
    if (bits + pb > 63) return 1;
    if (is_sorted) {
        memcpy(sorted, key, n * sizeof(int64_t));
        if (perm)
            for (int64_t q = 0; q < n; q++) perm[q] = q;
        return 0;
    }
    const int passes = (bits + DIGIT - 1) / DIGIT;
    int64_t count[MAX_PASSES][BUCKETS];
    memset(count, 0, sizeof count);
    uint64_t *a = (uint64_t *)sorted, *b = (uint64_t *)tmp;
    for (int64_t q = 0; q < n; q++) { /* pack, and every pass's histogram in the same read */
        uint64_t k = (uint64_t)key[q];
        a[q] = k << pb | (uint64_t)q;
        for (int p = 0; p < passes; p++) count[p][(k >> (p * DIGIT)) & (BUCKETS - 1)]++;
    }
    for (int p = 0; p < passes; p++) {
        int64_t *c = count[p], total = 0;
        int constant = 0;
        for (int d = 0; d < BUCKETS; d++) constant |= c[d] == n;
        if (constant) continue; /* this digit is the same for every key: order unchanged */
        for (int d = 0; d < BUCKETS; d++) { /* counts -> first output position of each digit */
            int64_t t = c[d];
            c[d] = total;
            total += t;
        }
        const int shift = pb + p * DIGIT;
        for (int64_t q = 0; q < n; q++) b[c[(a[q] >> shift) & (BUCKETS - 1)]++] = a[q];
        uint64_t *t = a;
        a = b;
        b = t;
    }
    const uint64_t mask = pb ? ((uint64_t)1 << pb) - 1 : 0;
    for (int64_t q = 0; q < n; q++) { /* unpack (in place when a is the output) */
        uint64_t v = a[q];
        if (perm) perm[q] = (int64_t)(v & mask);
        sorted[q] = (int64_t)(v >> pb);
    }
    return 0;
}
