/* Radius graphs of point clouds in 1 to 3 dimensions by cell lists, float64, CPU: the edges of
 * pyg_lie.neighbors.radius_graph for sorted batches without truncation, in one native pass.
 *
 *   keep (j, i)  iff  sum_k (pos[j, k] - pos[i, k])^2 <= r2      (j, i in the same graph)
 *
 * with the products and sums rounded one by one in column order, as the torch decision step
 * (neighbors._squared_distances) rounds them, so that both give the same edges. Each graph's
 * points go into a grid of cells of side at least r (a cell side of r (1 + 1e-6) keeps points
 * within r in neighbouring cells whatever the rounding of their cell coordinates; the side
 * grows where the grid would exceed 4 n + 16 cells; a graph whose extent overflows a double,
 * points near +-DBL_MAX, gets a single cell, under the candidate cap below). Each target scans
 * the 3^d cells around its own, and its sources are sorted, so the edges come in (target,
 * source) order.
 *
 *   h = radius_graph_build(N, d, pos, B, gptr, r2, r, loop, counts, nthreads)
 *   radius_graph_fill(h, rowptr, src, dst, nthreads)      (frees h)
 *
 * build returns NULL when out of memory or when the candidates exceed 256 N + 2^25 (see
 * below); it decides every pair, keeps each target's sorted
 * sources in a scratch row as long as its candidate list, and writes the in-degrees to counts
 * (N); fill copies target i's edges to rowptr[i] .. rowptr[i + 1] - 1. Threads: OpenMP over
 * targets. Built and loaded by _native/__init__.py.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "csr.h"

/* no fused multiply-adds in this file: the squared distances round as the torch step does */
#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

typedef struct {
    int64_t N, B;
    int d, loop;
    double r2;
    const double *pos;
    const int64_t *gptr;  /* graph b holds points gptr[b] .. gptr[b + 1] - 1 */
    int64_t *cell;        /* (N) the flat cell of each point within its graph's grid */
    int64_t *goff;        /* (B + 1) each graph's first entry in start */
    int64_t *start;       /* (sum of cells + B) cell pointers: graph b's cell c holds pts[start[goff[b] + c] ..) */
    int64_t *pts;         /* (N) point ids by (graph, cell, id) */
    int64_t *cand;        /* (N + 1) offsets of the targets' scratch rows */
    int64_t *scratch;     /* (cand[N]) each target's accepted sources, sorted */
    int64_t (*dims)[3];   /* (B) cells per axis */
    double (*lo)[3];      /* (B) grid origin */
    double *side;         /* (B) cell side */
} grid_t;

static inline double sq_dist(const double *a, const double *b, int d) {
    double s = 0.0;
    for (int k = 0; k < d; k++) {
        const double diff = b[k] - a[k];
        s = s + diff * diff;
    }
    return s;
}

static int64_t coord(double x, double lo, double side, int64_t n) {
    const double c = floor((x - lo) / side); /* NaN where x - lo overflows and side is infinite */
    return !(c >= 0) ? 0 : (c >= (double)n ? n - 1 : (int64_t)c);
}

void radius_graph_free(void *h) {
    grid_t *g = h;
    if (!g) return;
    free(g->cell), free(g->goff), free(g->start), free(g->pts), free(g->dims), free(g->lo), free(g->side);
    free(g->cand), free(g->scratch);
    free(g);
}

/* runs BODY for the points q0_ .. q1_ - 1 of pts in each row of the 3^d cells around target i's
 * (a row's three cells are consecutive in pts) */
#define FOR_CELL_ROWS(G, i, BODY)                                                                         \
    do {                                                                                                   \
        const int64_t b_ = graph_of(G, i), c_ = (G)->cell[i];                                             \
        const int64_t *dm_ = (G)->dims[b_];                                                                \
        const int64_t cx_ = c_ % dm_[0], cy_ = c_ / dm_[0] % dm_[1], cz_ = c_ / (dm_[0] * dm_[1]);        \
        const int64_t *st_ = (G)->start + (G)->goff[b_];                                                   \
        const int64_t x0_ = cx_ > 0 ? cx_ - 1 : 0, x1_ = cx_ + 1 < dm_[0] ? cx_ + 1 : dm_[0] - 1;          \
        for (int64_t z_ = cz_ > 0 ? cz_ - 1 : 0; z_ <= cz_ + 1 && z_ < dm_[2]; z_++)                       \
            for (int64_t y_ = cy_ > 0 ? cy_ - 1 : 0; y_ <= cy_ + 1 && y_ < dm_[1]; y_++) {                 \
                const int64_t row_ = (z_ * dm_[1] + y_) * dm_[0];                                          \
                const int64_t q0_ = st_[row_ + x0_], q1_ = st_[row_ + x1_ + 1];                            \
                BODY;                                                                                      \
            }                                                                                              \
    } while (0)

static int64_t graph_of(const grid_t *g, int64_t i) { /* the last b with gptr[b] <= i */
    int64_t lo = 0, hi = g->B - 1;
    while (lo < hi) {
        int64_t mid = (lo + hi + 1) / 2;
        if (g->gptr[mid] <= i) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}

static int cmp_ids(const void *x, const void *y) {
    const int64_t a = *(const int64_t *)x, b = *(const int64_t *)y;
    return (a > b) - (a < b);
}

/* target i's accepted sources into its scratch row, in cell order; inlined with d a constant.
 * Branch-free: every candidate is written, and the count moves on when it is kept. */
static inline __attribute__((always_inline)) int64_t decide(const grid_t *g, int64_t i, int d) {
    int64_t *out = g->scratch + g->cand[i], n = 0;
    const double *pi = g->pos + i * d;
    FOR_CELL_ROWS(g, i, for (int64_t q = q0_; q < q1_; q++) {
        const int64_t j = g->pts[q];
        out[n] = j;
        n += (j != i || g->loop) & (sq_dist(pi, g->pos + j * d, d) <= g->r2);
    });
    return n;
}

#define BITMAP_WORDS 256
#define MAX_CANDIDATES_PER_POINT 256
#define MIN_CANDIDATE_CAP ((int64_t)1 << 25)

/* sorts the n distinct ids a[0 .. n): through a bitmap where their range is short (the common
 * case of graphs of a few thousand points: one pass over a few words), else by comparisons */
static void sort_ids(int64_t *a, int64_t n) {
    if (n < 2) return;
    int64_t lo = a[0], hi = a[0];
    for (int64_t k = 1; k < n; k++) {
        lo = a[k] < lo ? a[k] : lo;
        hi = a[k] > hi ? a[k] : hi;
    }
    const int64_t words = (hi - lo) / 64 + 1;
    if (words <= BITMAP_WORDS && words <= 4 * n + 8) {
        uint64_t bits[BITMAP_WORDS] = {0};
        for (int64_t k = 0; k < n; k++) bits[(a[k] - lo) >> 6] |= (uint64_t)1 << ((a[k] - lo) & 63);
        int64_t m = 0;
        for (int64_t w = 0; w < words; w++)
            for (uint64_t b = bits[w]; b; b &= b - 1) a[m++] = lo + 64 * w + __builtin_ctzll(b);
        return;
    }
    if (n > 48) {
        qsort(a, n, sizeof *a, cmp_ids);
        return;
    }
    for (int64_t k = 1; k < n; k++) {
        const int64_t v = a[k];
        int64_t m = k;
        for (; m > 0 && a[m - 1] > v; m--) a[m] = a[m - 1];
        a[m] = v;
    }
}

void *radius_graph_build(int64_t N, int d, const double *pos, int64_t B, const int64_t *gptr, double r2, double r,
                         int loop, int64_t *counts, int nthreads) {
    if (d < 1 || d > 3 || B < 1 || csr_bad_ptr(B, N, gptr)) return NULL;
    grid_t *g = calloc(1, sizeof *g);
    if (!g) return NULL;
    g->N = N, g->B = B, g->d = d, g->loop = loop, g->r2 = r2, g->pos = pos, g->gptr = gptr;
    g->cell = malloc((N + 1) * sizeof *g->cell);
    g->goff = malloc((B + 1) * sizeof *g->goff);
    g->pts = malloc((N + 1) * sizeof *g->pts);
    g->dims = malloc(B * sizeof *g->dims);
    g->lo = malloc(B * sizeof *g->lo);
    g->side = malloc(B * sizeof *g->side);
    if (!g->cell || !g->goff || !g->pts || !g->dims || !g->lo || !g->side) goto fail;
    /* grids: origin, side and cells per axis of every graph */
    int64_t total = 0;
    for (int64_t b = 0; b < B; b++) {
        const int64_t p0 = gptr[b], n = gptr[b + 1] - gptr[b];
        double lo[3] = {0, 0, 0}, hi[3] = {0, 0, 0};
        for (int k = 0; k < d; k++) lo[k] = hi[k] = n ? pos[p0 * d + k] : 0.0;
        for (int64_t p = p0; p < p0 + n; p++)
            for (int k = 0; k < d; k++) {
                const double x = pos[p * d + k];
                lo[k] = x < lo[k] ? x : lo[k];
                hi[k] = x > hi[k] ? x : hi[k];
            }
        double side = r > 0 ? r * (1.0 + 1e-6) : 1.0;
        const double limit = 4.0 * (double)n + 16.0;
        int flat = 0; /* an extent that overflows (points near +-DBL_MAX): one cell per axis */
        for (int k = 0; k < d; k++) flat |= !isfinite(hi[k] - lo[k]);
        for (int it = 0; !flat; it++) {
            double cells = 1.0;
            for (int k = 0; k < d; k++) cells *= floor((hi[k] - lo[k]) / side) + 1.0;
            if (cells <= limit) break;
            side *= 1.5 * pow(cells / limit, 1.0 / d);
            flat = it > 64 || !isfinite(side); /* no grid found: the single cell, not a loop without end */
        }
        if (flat) side = INFINITY;
        g->side[b] = side;
        int64_t c = 1;
        for (int k = 0; k < 3; k++) {
            g->lo[b][k] = lo[k];
            g->dims[b][k] = k < d && !flat ? (int64_t)floor((hi[k] - lo[k]) / side) + 1 : 1;
            c *= g->dims[b][k];
        }
        g->goff[b] = total;
        total += c + 1;
    }
    g->goff[B] = total;
    g->start = calloc(total + 1, sizeof *g->start);
    if (!g->start) goto fail;
    /* counting sort of the points by (graph, cell), ids ascending within a cell */
    for (int64_t b = 0; b < B; b++) {
        int64_t *st = g->start + g->goff[b];
        for (int64_t p = gptr[b]; p < gptr[b + 1]; p++) {
            int64_t c = 0;
            for (int k = d - 1; k >= 0; k--) c = c * g->dims[b][k] + coord(pos[p * d + k], g->lo[b][k], g->side[b], g->dims[b][k]);
            g->cell[p] = c;
            st[c + 1]++;
        }
        const int64_t nc = g->goff[b + 1] - g->goff[b] - 1;
        st[0] = gptr[b];
        for (int64_t c = 0; c < nc; c++) st[c + 1] += st[c];
        for (int64_t p = gptr[b]; p < gptr[b + 1]; p++) g->pts[st[g->cell[p]]++] = p;
        for (int64_t c = nc; c > 0; c--) st[c] = st[c - 1]; /* the fill moved each start to its end */
        st[0] = gptr[b];
    }
    /* scratch rows as long as the candidate lists */
    g->cand = malloc((N + 1) * sizeof *g->cand);
    if (!g->cand) goto fail;
    g->cand[0] = 0;
    for (int64_t i = 0; i < N; i++) {
        int64_t n = 0;
        FOR_CELL_ROWS(g, i, n += q1_ - q0_);
        g->cand[i + 1] = g->cand[i] + n;
    }
    /* a cloud much denser in places than its bounding box suggests (a tight cluster and a far
     * outlier) falls into few cells of the capped grid, with up to n^2 candidates: leave it
     * to the caller's k-d tree, before deciding or allocating anything per candidate */
    if (g->cand[N] > MAX_CANDIDATES_PER_POINT * N + MIN_CANDIDATE_CAP) goto fail;
    g->scratch = malloc((g->cand[N] + 1) * sizeof *g->scratch);
    if (!g->scratch) goto fail;
#pragma omp parallel for num_threads(nthreads) schedule(dynamic, 64)
    for (int64_t i = 0; i < N; i++) {
        int64_t n;
        if (d == 2) n = decide(g, i, 2);
        else if (d == 3) n = decide(g, i, 3);
        else n = decide(g, i, 1);
        sort_ids(g->scratch + g->cand[i], n);
        counts[i] = n;
    }
    return g;
fail:
    radius_graph_free(g);
    return NULL;
}

void radius_graph_fill(void *h, const int64_t *rowptr, int64_t *src, int64_t *dst, int nthreads) {
    grid_t *g = h;
#pragma omp parallel for num_threads(nthreads) schedule(static)
    for (int64_t i = 0; i < g->N; i++) {
        const int64_t n = rowptr[i + 1] - rowptr[i];
        memcpy(src + rowptr[i], g->scratch + g->cand[i], n * sizeof *src);
        for (int64_t e = rowptr[i]; e < rowptr[i + 1]; e++) dst[e] = i;
    }
    radius_graph_free(g);
}
