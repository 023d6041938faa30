/* Fused per-head edge MLPs (the official LieTransformer's location kernel), float32, CPU.
 *
 *   y[h O + o, e] = W_L[h, o] . silu(W_{L-1}[h] ... silu(W_0[h] x[e] + b_0[h]) ...) + b_L[h, o]
 *
 * for x (E, in) row-major, weights W_l (H, out_l, in_l), biases b_l (H, out_l), hidden layers
 * of equal width, O outputs per head (O = 1: one MLP per head; H = 1: one shared MLP),
 * y (H O, E). The torch formulation spends most of its time
 * streaming (H, rows, width) activations through separate matrix-product and SiLU kernels; here
 * a block of BLOCK edges goes through every layer of one head while its activations stay in
 * registers and L1, and the backward pass recomputes them per block. SIMD lanes run over edges
 * (the eight-float vectors of simd.h).
 *
 * The sigmoid inside SiLU is written out (range reduction and a polynomial, see sigmoid_n()), so
 * that it costs about fifteen vector instructions and no call, for the eight vectors of a register
 * tile at once.
 *
 * Threads: OpenMP over chunks of edges, handed out dynamically (serial where built without it);
 * each thread accumulates its own weight gradients, summed by the calling thread at the end.
 * Built and loaded by _native/__init__.py.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "simd.h"

#define NV 4          /* vectors per block */
#define QT (8 / NV)   /* rows per register tile: QT * NV = 8 independent FMA chains for the two pipes */
#define BLOCK (VW * NV)
#define MAX_HIDDEN 32
#define MAX_LAYERS 4  /* hidden layers */
#define MAX_IN 16

/* s[i] = 1 / (1 + exp(-z[i])) for n <= 8 vectors (vexpneg_n of simd.h: their chains overlap);
 * at z <= -88.72, exp(-z) is +inf, so 1 / (1 + inf) = 0: below about -88.38 the value is exactly
 * 0 (the true one is under 4.1e-39), which keeps z * sigmoid(z) tiny for any finite z with no
 * mask. */
INLINE void sigmoid_n(const vf *z, vf *s, const int n) { vexpneg_n(z, s, n, 1); }

typedef struct {
    int64_t E;
    int in, hidden, layers, heads, outs; /* layers: hidden layers (>= 1); outs: outputs per head */
    const float *x;
    const float *W[MAX_LAYERS + 1], *b[MAX_LAYERS + 1];
    float *out;           /* forward: (H, E) */
    const float *gout;    /* backward: (H, E) */
    float *gx;            /* (E, in) or NULL */
    float *gW[MAX_LAYERS + 1], *gb[MAX_LAYERS + 1]; /* this thread's accumulators */
    int64_t e0, e1;       /* the chunk of edges being worked on */
    struct block_s *B;    /* this thread's scratch */
    struct grad_s *G;
} job_t;

/* per-block activations of one head: z (pre-activation), s = sigmoid(z), a = z s */
typedef struct block_s {
    vf xt[MAX_IN][NV];
    vf z[MAX_LAYERS][MAX_HIDDEN][NV], s[MAX_LAYERS][MAX_HIDDEN][NV], a[MAX_LAYERS][MAX_HIDDEN][NV];
} block_t;

static int64_t load_block(const job_t *j, int64_t e, block_t *B) {
    int64_t n = j->e1 - e < BLOCK ? j->e1 - e : BLOCK;
    for (int i = 0; i < j->in; i++)
        for (int v = 0; v < NV; v++)
            for (int l = 0; l < VW; l++) {
                int64_t k = v * VW + l;
                B->xt[i][v][l] = k < n ? j->x[(e + k) * j->in + i] : 0.0f;
            }
    return n;
}

/* outputs k .. k + Q - 1 of hidden layer m, W (K, n_in) applied to in[n_in][NV] (the block's
 * input for m = 0, the previous layer's activations otherwise); Q = QT: eight independent FMA
 * chains */
INLINE void hidden_rows(block_t *B, const float *W, const float *b, const vf (*in)[NV], int n_in, int m, int k,
                        const int Q, int keep_z) {
    vf acc[QT][NV];
    for (int q = 0; q < Q; q++)
        for (int v = 0; v < NV; v++) acc[q][v] = splat(b[k + q]);
    for (int i = 0; i < n_in; i++)
        for (int q = 0; q < Q; q++)
            for (int v = 0; v < NV; v++) acc[q][v] += splat(W[(k + q) * n_in + i]) * in[i][v];
    /* SiLU into the block (z and s too when the backward pass needs them) */
    vf s[QT][NV];
    sigmoid_n(&acc[0][0], &s[0][0], Q * NV);
    for (int q = 0; q < Q; q++)
        for (int v = 0; v < NV; v++) {
            if (keep_z) { B->z[m][k + q][v] = acc[q][v]; B->s[m][k + q][v] = s[q][v]; }
            B->a[m][k + q][v] = acc[q][v] * s[q][v];
        }
}

/* hidden layers of head h on one block; keep_z: store z and s for the backward pass */
static void hidden_forward(const job_t *j, int h, block_t *B, int keep_z) {
    const int K = j->hidden;
    for (int m = 0; m < j->layers; m++) {
        const int n_in = m ? K : j->in;
        const vf (*in)[NV] = m ? (const vf (*)[NV])B->a[m - 1] : (const vf (*)[NV])B->xt;
        const float *W = j->W[m] + (int64_t)h * K * n_in, *b = j->b[m] + (int64_t)h * K;
        int k = 0;
        for (; k + QT <= K; k += QT) hidden_rows(B, W, b, in, n_in, m, k, QT, keep_z);
        for (; k < K; k++) hidden_rows(B, W, b, in, n_in, m, k, 1, keep_z);
    }
}

/* out[r] = w_r . a + bias_r for one output row r on one block (a: the last hidden layer) */
INLINE void output_row(const block_t *B, int L, int K, const float *w, float bias, vf acc[NV]) {
    vf acc2[NV]; /* two partial sums: the chains are latency-bound */
    for (int v = 0; v < NV; v++) { acc[v] = splat(bias); acc2[v] = splat(0.0f); }
    int k = 0;
    for (; k + 2 <= K; k += 2)
        for (int v = 0; v < NV; v++) {
            acc[v] += splat(w[k]) * B->a[L - 1][k][v];
            acc2[v] += splat(w[k + 1]) * B->a[L - 1][k + 1][v];
        }
    for (; k < K; k++)
        for (int v = 0; v < NV; v++) acc[v] += splat(w[k]) * B->a[L - 1][k][v];
    for (int v = 0; v < NV; v++) acc[v] += acc2[v];
}

/* B and G: this thread's scratch; restrict, or the compiler must assume that its stores may
 * change the weights */
__attribute__((noinline)) static void forward_chunk(const job_t *j, block_t *restrict B) {
    const int K = j->hidden, L = j->layers;
    for (int h = 0; h < j->heads; h++) {
        for (int64_t e = j->e0; e < j->e1; e += BLOCK) {
            int64_t n = load_block(j, e, B);
            hidden_forward(j, h, B, 0);
            for (int r = h * j->outs; r < (h + 1) * j->outs; r++) { /* this head's output rows */
                vf acc[NV];
                output_row(B, L, K, j->W[L] + (int64_t)r * K, j->b[L][r], acc);
                float *o = j->out + (int64_t)r * j->E + e;
                memcpy(o, acc, n * sizeof(float)); /* n <= BLOCK: the last block may be short */
            }
        }
    }
}

/* lane accumulators of the backward, per thread; zeroed per head and chunk and reduced into the
 * thread's gradients at the end of both */
typedef struct grad_s {
    vf gW[MAX_LAYERS + 1][MAX_HIDDEN][MAX_HIDDEN]; /* [layer][out][in]; layer 0 uses in < MAX_IN */
    vf gb[MAX_LAYERS + 1][MAX_HIDDEN];
    vf g[2][MAX_HIDDEN][NV];                        /* d/da (ping) and d/dz (pong) */
} grad_t;

/* out[i .. i + Q - 1] = (W^T gz)[i .. i + Q - 1] for W (K, n_in) */
INLINE void transposed_rows(const float *W, int K, int n_in, int i, const int Q, vf (*gz)[NV],
                            vf (*out)[NV]) {
    vf acc[QT][NV];
    for (int q = 0; q < Q; q++)
        for (int v = 0; v < NV; v++) acc[q][v] = splat(0.0f);
    for (int k = 0; k < K; k++)
        for (int q = 0; q < Q; q++)
            for (int v = 0; v < NV; v++) acc[q][v] += splat(W[k * n_in + i + q]) * gz[k][v];
    for (int q = 0; q < Q; q++)
        for (int v = 0; v < NV; v++) out[i + q][v] = acc[q][v];
}

/* out = W^T gz for W (K, n_in), QT inputs at a time */
static void transposed_product(const float *W, int K, int n_in, vf (*gz)[NV], vf (*out)[NV]) {
    int i = 0;
    for (; i + QT <= n_in; i += QT) transposed_rows(W, K, n_in, i, QT, gz, out);
    for (; i < n_in; i++) transposed_rows(W, K, n_in, i, 1, gz, out);
}

/* acc[k .. k + Q - 1][i .. i + R - 1] += gz[k] in[i] over the block's vectors; a tile, so that
 * each accumulator is loaded and stored once per block and each gz[k], in[i] once per tile */
INLINE void outer_tile(vf (*acc)[MAX_HIDDEN], vf (*gz)[NV], const vf (*in)[NV], int k, int i, const int Q,
                       const int R) {
    vf t[4][2];
    for (int q = 0; q < Q; q++)
        for (int r = 0; r < R; r++) t[q][r] = acc[k + q][i + r];
    for (int v = 0; v < NV; v++)
        for (int q = 0; q < Q; q++)
            for (int r = 0; r < R; r++) t[q][r] += gz[k + q][v] * in[i + r][v];
    for (int q = 0; q < Q; q++)
        for (int r = 0; r < R; r++) acc[k + q][i + r] = t[q][r];
}

/* lane accumulators of a weight gradient: acc[k][i] += gz[k] in[i] over the block's vectors */
static void accumulate_outer(vf (*acc)[MAX_HIDDEN], vf (*gz)[NV], const vf (*in)[NV], int K, int n_in) {
    int k = 0;
    for (; k + 4 <= K; k += 4) {
        int i = 0;
        for (; i + 2 <= n_in; i += 2) outer_tile(acc, gz, in, k, i, 4, 2);
        for (; i < n_in; i++) outer_tile(acc, gz, in, k, i, 4, 1);
    }
    for (; k < K; k++)
        for (int i = 0; i < n_in; i++) outer_tile(acc, gz, in, k, i, 1, 1);
}

__attribute__((noinline)) static void backward_chunk(job_t *j, block_t *restrict B, grad_t *restrict G) {
    const int K = j->hidden, I = j->in, L = j->layers, O = j->outs;
    for (int h = 0; h < j->heads; h++) {
        for (int m = 0; m <= L; m++) {
            memset(G->gb[m], 0, sizeof G->gb[m]);
            for (int k = 0; k < (m == L ? O : K); k++) memset(G->gW[m][k], 0, (m ? K : I) * sizeof(vf));
        }
        const float *wL = j->W[L] + (int64_t)h * O * K;
        for (int64_t e = j->e0; e < j->e1; e += BLOCK) {
            int64_t n = load_block(j, e, B);
            hidden_forward(j, h, B, 1);
            vf (*ga)[NV] = G->g[0], (*gz)[NV] = G->g[1];
            /* output layer: gradients of its weights, and d/da = W_L^T g */
            for (int k = 0; k < K; k++)
                for (int v = 0; v < NV; v++) ga[k][v] = splat(0.0f);
            for (int o = 0; o < O; o++) {
                vf g[NV];
                const float *go = j->gout + (int64_t)(h * O + o) * j->E + e;
                if (n == BLOCK) memcpy(g, go, sizeof g);
                else { memset(g, 0, sizeof g); memcpy(g, go, n * sizeof(float)); }
                for (int v = 0; v < NV; v++) G->gb[L][o] += g[v];
                for (int k = 0; k < K; k++) {
                    vf t = splat(0.0f);
                    for (int v = 0; v < NV; v++) {
                        t += g[v] * B->a[L - 1][k][v];
                        ga[k][v] += splat(wL[o * K + k]) * g[v];
                    }
                    G->gW[L][o][k] += t;
                }
            }
            for (int m = L - 1; m >= 0; m--) {
                for (int k = 0; k < K; k++)
                    for (int v = 0; v < NV; v++) {
                        vf s = B->s[m][k][v];
                        gz[k][v] = ga[k][v] * s * (splat(1.0f) + B->z[m][k][v] * (splat(1.0f) - s));
                    }
                for (int k = 0; k < K; k++) {
                    vf t = splat(0.0f);
                    for (int v = 0; v < NV; v++) t += gz[k][v];
                    G->gb[m][k] += t;
                }
                const int n_in = m ? K : I;
                const vf (*in)[NV] = m ? (const vf (*)[NV])B->a[m - 1] : (const vf (*)[NV])B->xt;
                const float *W = j->W[m] + (int64_t)h * K * n_in;
                accumulate_outer(G->gW[m], gz, in, K, n_in);
                if (m > 0) {
                    transposed_product(W, K, K, gz, ga); /* d/da_{m-1} */
                } else if (j->gx) {
                    transposed_product(W, K, I, gz, ga); /* d/dx, in ga's first I rows */
                    for (int i = 0; i < I; i++)
                        for (int q = 0; q < n; q++) j->gx[(e + q) * I + i] += ga[i][q / VW][q % VW];
                }
            }
        }
        /* lanes -> this thread's (H, out, in) gradients */
        for (int o = 0; o < O; o++) {
            j->gb[L][h * O + o] += vsum(G->gb[L][o]);
            for (int k = 0; k < K; k++) j->gW[L][(int64_t)(h * O + o) * K + k] += vsum(G->gW[L][o][k]);
        }
        for (int m = 0; m < L; m++) {
            int in = m ? K : I;
            for (int k = 0; k < K; k++) {
                j->gb[m][(int64_t)h * K + k] += vsum(G->gb[m][k]);
                for (int i = 0; i < in; i++)
                    j->gW[m][((int64_t)h * K + k) * in + i] += vsum(G->gW[m][k][i]);
            }
        }
    }
}

static int64_t param_size(const job_t *j, int m, int bias) {
    int out = m == j->layers ? j->outs : j->hidden, inp = m == 0 ? j->in : j->hidden;
    return (int64_t)j->heads * out * (bias ? 1 : inp);
}

/* Returns 0 on success, 1 for unsupported sizes, 2 for out of memory.
 *
 * The edges are handed out in chunks of CHUNK blocks, dynamically: the two cores of a shared
 * virtual machine often run at different speeds, and a static split waits for the slower one.
 * A chunk is large enough that reducing the backward's lane accumulators once per chunk and
 * head costs about 1% of the chunk (an estimate from instruction counts, not a measurement). */
#define CHUNK 64
static int run(job_t *base, int nthreads, int backward) {
    if (base->in < 1 || base->in > MAX_IN || base->hidden < 1 || base->hidden > MAX_HIDDEN ||
        base->layers < 1 || base->layers > MAX_LAYERS || base->heads < 1 || base->outs < 1 ||
        base->outs > MAX_HIDDEN)
        return 1;
    const int64_t blocks = (base->E + BLOCK - 1) / BLOCK, chunks = (blocks + CHUNK - 1) / CHUNK;
    if (nthreads > chunks) nthreads = (int)chunks;
    if (nthreads < 1) nthreads = 1;
    job_t *jobs = calloc(nthreads, sizeof(job_t));
    int err = !jobs;
    for (int t = 0; t < nthreads && !err; t++) {
        jobs[t] = *base;
        jobs[t].B = aligned_alloc(64, sizeof(block_t));
        jobs[t].G = backward ? aligned_alloc(64, sizeof(grad_t)) : NULL;
        err = !jobs[t].B || (backward && !jobs[t].G);
        if (backward && t > 0) { /* thread 0 accumulates into the caller's (zeroed) outputs */
            for (int m = 0; m <= base->layers && !err; m++) {
                jobs[t].gW[m] = calloc(param_size(base, m, 0), 4);
                jobs[t].gb[m] = calloc(param_size(base, m, 1), 4);
                err = !jobs[t].gW[m] || !jobs[t].gb[m];
            }
        }
    }
    if (!err) {
        /* OpenMP: in a process that has loaded torch, libgomp.so.1 is torch's own, so these are
         * the threads of torch's intra-op pool (separate threads would compete with its spinning
         * workers for the cores) */
#pragma omp parallel num_threads(nthreads)
        {
#ifdef _OPENMP
            job_t *j = &jobs[omp_get_thread_num()];
#else
            job_t *j = &jobs[0];
#endif
#pragma omp for schedule(dynamic, 1)
            for (int64_t c = 0; c < chunks; c++) {
                j->e0 = c * CHUNK * BLOCK;
                j->e1 = j->e0 + CHUNK * BLOCK < base->E ? j->e0 + CHUNK * BLOCK : base->E;
                if (backward) backward_chunk(j, j->B, j->G);
                else forward_chunk(j, j->B);
            }
        }
    }
    if (jobs) {
        for (int t = 0; t < nthreads; t++) {
            free(jobs[t].B);
            free(jobs[t].G);
        }
        for (int t = 1; t < nthreads && backward; t++)
            for (int m = 0; m <= base->layers; m++) {
                int64_t nw = param_size(base, m, 0);
                int64_t nb = param_size(base, m, 1);
                if (!err && jobs[t].gW[m] && jobs[t].gb[m]) {
                    for (int64_t q = 0; q < nw; q++) base->gW[m][q] += jobs[t].gW[m][q];
                    for (int64_t q = 0; q < nb; q++) base->gb[m][q] += jobs[t].gb[m][q];
                }
                free(jobs[t].gW[m]);
                free(jobs[t].gb[m]);
            }
    }
    free(jobs);
    return err ? 2 : 0;
}

static void fill(job_t *j, int64_t E, int in, int hidden, int layers, int heads, int outs, const float *x,
                 const float *const *W, const float *const *b) {
    memset(j, 0, sizeof *j);
    j->E = E; j->in = in; j->hidden = hidden; j->layers = layers; j->heads = heads; j->outs = outs; j->x = x;
    if (layers < 1 || layers > MAX_LAYERS) return;
    for (int m = 0; m <= layers; m++) { j->W[m] = W[m]; j->b[m] = b[m]; }
    j->e0 = 0; j->e1 = E;
}

int headwise_mlp_forward(int64_t E, int in, int hidden, int layers, int heads, int outs, const float *x,
                         const float *const *W, const float *const *b, float *out, int nthreads) {
    job_t j;
    fill(&j, E, in, hidden, layers, heads, outs, x, W, b);
    j.out = out;
    return run(&j, nthreads, 0);
}

/* gx (E, in) and every gW, gb must be zeroed by the caller; gx may be NULL */
int headwise_mlp_backward(int64_t E, int in, int hidden, int layers, int heads, int outs, const float *x,
                          const float *const *W, const float *const *b, const float *gout, float *gx,
                          float *const *gW, float *const *gb, int nthreads) {
    job_t j;
    fill(&j, E, in, hidden, layers, heads, outs, x, W, b);
    j.gout = gout; j.gx = gx;
    if (layers >= 1 && layers <= MAX_LAYERS)
        for (int m = 0; m <= layers; m++) { j.gW[m] = gW[m]; j.gb[m] = gb[m]; }
    return run(&j, nthreads, 1);
}

/* 1 if built with OpenMP (threads from the OpenMP runtime), 0 if serial */
int headwise_mlp_openmp(void) {
#ifdef _OPENMP
    return 1;
#else
    return 0;
#endif
}
