/* SE(2) relative logarithms on edges, float32, CPU: the coordinates (u_x, u_y, sqrt(2) theta) of
 * log(g_i^-1 g_j) for every edge j -> i, as pyg_lie.groups.SE2.relative_log computes them, in one
 * pass over the edges (the torch formulation makes about twenty passes over (E,) arrays).
 *
 * From the top two rows of g_i = [[R_i, t_i], [0, 1]] and g_j:
 *   c = tr(R_i^T R_j), s = (R_i^T R_j)_10 - (R_i^T R_j)_01   (2 cos theta, 2 sin theta)
 *   t = R_i^T (t_j - t_i),  theta = atan2(s, c),  u = V^{-1} t,  V^{-1} = [[a, b], [-b, a]]
 * with b = theta / 2 and a = (theta / 2) cot(theta / 2). Both are computed from (s, c) without
 * tan: cot(theta / 2) = (r + c) / s for c >= 0 and s / (r - c) for c < 0, r = |(s, c)|, so neither
 * side cancels; a = 1 - theta^2 / 12 for |theta| < 2^-10 (the next term is below 2e-14).
 * atan2 by reduction to q = min / max in [0, 1], then to [-tan(pi/8), tan(pi/8)] by
 * (q - 1) / (q + 1) + pi/4, and atan(x) = x + x z P(z), z = x^2, P of degree 4 fitted for relative
 * error (7e-10); multiples of pi are added in two parts (hi + lo) to keep float precision.
 * With the cut, theta < -pi + tol moves to theta + 2 pi and the whole vector scales by
 * (theta + 2 pi) / theta (SE2.one_sided_cut).
 *
 * SIMD lanes run over edges (the eight-float vectors of simd.h); OpenMP over blocks.
 */
#include <math.h>
#include <stdint.h>

#include "simd.h"

static inline vi ints(int32_t a) { return a - (vi){0}; }
static inline vf vabs(vf a) { return (vf)((vi)a & ints(0x7fffffff)); }

#if defined(__AVX__)
static inline vf vsqrt(vf a) { return (vf)_mm256_sqrt_ps((__m256)a); }
#else
static inline vf vsqrt(vf a) {
    vf r;
    for (int l = 0; l < VW; l++) r[l] = sqrtf(a[l]);
    return r;
}
#endif

/* pi / 4, pi / 2 and pi as float hi + lo */
#define PI4_HI 0.785398185253143310546875f
#define PI4_LO -2.1855694143368379e-08f
#define PI2_HI 1.57079637050628662109375f
#define PI2_LO -4.3711388286737929e-08f
#define PI_HI 3.1415927410125732421875f
#define PI_LO -8.7422776573475858e-08f

/* atan2(s, c) in [-pi, pi], IEEE signs of zeros: atan2(+-0, +c) = +-0, atan2(+-0, -c) = +-pi */
static inline vf atan2v(vf s, vf c) {
    vf as = vabs(s), ac = vabs(c);
    vi swap = as > ac;
    vf mx = vselect(swap, as, ac), mn = vselect(swap, ac, as);
    vf q = vselect(mx > splat(0.0f), mn / mx, splat(0.0f)); /* 0 / 0 lanes are replaced */
    vi big = q > splat(0.41421356237309503f);
    vf x = vselect(big, (q - splat(1.0f)) / (q + splat(1.0f)), q);
    vf z = x * x;
    vf p = splat(-0.06078221648931503f);
    p = p * z + splat(0.1059381365776062f);
    p = p * z + splat(-0.14243532717227936f);
    p = p * z + splat(0.19998471438884735f);
    p = p * z + splat(-0.33333316445350647f);
    vf at = x + x * z * p;
    at = vselect(big, splat(PI4_HI) + (at + splat(PI4_LO)), at);
    at = vselect(swap, (splat(PI2_HI) - at) + splat(PI2_LO), at);
    at = vselect((vi)c < ints(0), (splat(PI_HI) - at) + splat(PI_LO), at); /* c's sign bit, -0 too */
    return (vf)((vi)at | ((vi)s & ints((int32_t)0x80000000)));
}

/* Returns 0, or 1 if an index is outside [0, N) (nothing useful is written then).
 * g: (N, 3, 3) contiguous; src, dst: (E,) sources j and targets i; out: (E, 3). */
int se2_relative_log_f32(int64_t N, int64_t E, const float *g, const int64_t *src, const int64_t *dst,
                         float *out, int cut, float cut_below, int nthreads) {
    int bad = 0;
#pragma omp parallel for num_threads(nthreads) schedule(static) reduction(| : bad)
    for (int64_t e0 = 0; e0 < E; e0 += VW) {
        const int n = E - e0 < VW ? (int)(E - e0) : VW;
        vf a[6], b[6]; /* R00 R01 t0 R10 R11 t1 of the target (a) and the source (b) */
        for (int l = 0; l < VW; l++) {
            int64_t i = l < n ? dst[e0 + l] : 0, j = l < n ? src[e0 + l] : 0;
            if (i < 0 || i >= N || j < 0 || j >= N) {
                bad = 1;
                i = j = 0;
            }
            for (int k = 0; k < 6; k++) {
                a[k][l] = N ? g[i * 9 + k] : 0.0f;
                b[k][l] = N ? g[j * 9 + k] : 0.0f;
            }
        }
        vf c = a[0] * b[0] + a[3] * b[3] + a[1] * b[1] + a[4] * b[4];
        vf s = (a[1] * b[0] + a[4] * b[3]) - (a[0] * b[1] + a[3] * b[4]);
        vf d0 = b[2] - a[2], d1 = b[5] - a[5];
        vf t0 = a[0] * d0 + a[3] * d1, t1 = a[1] * d0 + a[4] * d1;
        vf theta = atan2v(s, c);
        vf r = vsqrt(s * s + c * c);
        vf cot = vselect(c >= splat(0.0f), (r + c) / s, s / (r - c)); /* s = 0 lanes take the series */
        vf half = theta * splat(0.5f);
        vf A = vselect(vabs(theta) < splat(0x1p-10f), splat(1.0f) - theta * theta * splat(1.0f / 12.0f), half * cot);
        vf u0 = A * t0 + half * t1, u1 = A * t1 - half * t0, w = theta * splat(1.41421356237309505f);
        if (cut) {
            vf f = vselect(theta < splat(cut_below), (theta + splat(6.28318548202514648f)) / theta, splat(1.0f));
            u0 *= f;
            u1 *= f;
            w *= f;
        }
        for (int l = 0; l < n; l++) {
            float *o = out + (e0 + l) * 3;
            o[0] = u0[l];
            o[1] = u1[l];
            o[2] = w[l];
        }
    }
    return bad;
}
