/* Timing harness for the native per-head edge MLP (pyg_lie/ops/_native/headwise_mlp.c), without
 * Python: the official LieTransformer's location kernel, in -> 16 -> 16 -> 1 per head, on random
 * inputs and weights; prints the best of 30 forward and backward calls in ns per edge and head.
 *
 *   cc -O3 -march=native -fopenmp scripts/bench_headwise_mlp.c pyg_lie/ops/_native/headwise_mlp.c \
 *      -o /tmp/bench_headwise_mlp -lm
 *   /tmp/bench_headwise_mlp [threads=1] [edges=32768] [in=3] [heads=4]
 *
 * The checksum line lets two builds of the kernel be compared for equal outputs.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

int headwise_mlp_forward(int64_t E, int in, int hidden, int layers, int heads, int outs, const float *x,
                         const float *const *W, const float *const *b, float *out, int nthreads);
int headwise_mlp_backward(int64_t E, int in, int hidden, int layers, int heads, int outs, const float *x,
                          const float *const *W, const float *const *b, const float *gout, float *gx,
                          float *const *gW, float *const *gb, int nthreads);

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + 1e-9 * t.tv_nsec;
}

static float *uniform(int64_t n) { /* in [-1, 1] */
    float *p = malloc(n * sizeof(float));
    for (int64_t i = 0; i < n; i++) p[i] = 2.0f * rand() / (float)RAND_MAX - 1.0f;
    return p;
}

int main(int argc, char **argv) {
    const int threads = argc > 1 ? atoi(argv[1]) : 1;
    const int64_t E = argc > 2 ? atoll(argv[2]) : 32768;
    const int in = argc > 3 ? atoi(argv[3]) : 3, H = argc > 4 ? atoi(argv[4]) : 4;
    const int K = 16, L = 2, O = 1;
    const int rows[3] = {K, K, O}, cols[3] = {in, K, K};
    const float *W[3], *b[3];
    float *gW[3], *gb[3];
    for (int m = 0; m <= L; m++) {
        W[m] = uniform((int64_t)H * rows[m] * cols[m]);
        b[m] = uniform((int64_t)H * rows[m]);
        gW[m] = calloc((size_t)H * rows[m] * cols[m], sizeof(float));
        gb[m] = calloc((size_t)H * rows[m], sizeof(float));
    }
    float *x = uniform(E * in), *out = malloc(H * O * E * sizeof(float)), *gout = uniform(H * O * E);
    float *gx = calloc(E * in, sizeof(float));
    double fwd = 1e30, bwd = 1e30;
    for (int r = 0; r < 30; r++) {
        double t = now();
        if (headwise_mlp_forward(E, in, K, L, H, O, x, W, b, out, threads)) return 1;
        t = now() - t;
        fwd = t < fwd ? t : fwd;
        t = now();
        if (headwise_mlp_backward(E, in, K, L, H, O, x, W, b, gout, gx, gW, gb, threads)) return 1;
        t = now() - t;
        bwd = t < bwd ? t : bwd;
    }
    double sum = 0.0;
    for (int64_t i = 0; i < H * O * E; i++) sum += out[i];
    printf("forward %.2f ns, backward %.2f ns per edge and head (%d threads, %lld edges, in %d, %d heads)\n",
           fwd * 1e9 / ((double)E * H), bwd * 1e9 / ((double)E * H), threads, (long long)E, in, H);
    printf("checksum %.9g\n", sum);
    return 0;
}
