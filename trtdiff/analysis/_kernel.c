/* The comparison's one pass over a float32 pair, compiled (trtdiff.analysis.metrics loads it with ctypes).
 *
 * For blocks of `block` elements from `start` to `stop` it adds to `out` what
 * metrics._numpy_block computes with numpy in ten passes, in one: out[0] max |r - c|,
 * out[1] sum |r - c|, out[2] max |r|, out[3] sum r*c, out[4] sum r*r, out[5] sum c*c.
 * Every value is widened to double first, so each product is exact (24 + 24 bits of
 * mantissa fit in 53) and the sums accumulate in float64, as the float64 implementation's.
 * Four lanes per sum break the chain of dependent additions; the order of additions differs
 * from numpy's, by rounding only.
 *
 * A block holding NaN or Inf is left to numpy (which counts them by position): the pass
 * stops at that block's start and returns it; a pass that finishes returns `stop`.
 * Plain C with no Python API, so it serves every Python version; ctypes releases the GIL
 * around the call, so threads run it side by side.
 */
#include <math.h>
#include <stdint.h>

#define LANES 4

#ifdef _WIN32
#define EXPORTED __declspec(dllexport)
#else
#define EXPORTED
#endif

static double larger(double a, double b) { return a > b ? a : b; }

EXPORTED int64_t trtdiff_moments_f32(const float *ref, const float *cand, int64_t start, int64_t stop, int64_t block,
                            double *out) {
    for (int64_t begin = start; begin < stop; begin += block) {
        int64_t end = stop - begin > block ? begin + block : stop;
        double max_abs[LANES] = {0}, sum_abs[LANES] = {0}, ref_max[LANES] = {0};
        double dot[LANES] = {0}, ref_sq[LANES] = {0}, cand_sq[LANES] = {0};
        int64_t i = begin;
        for (; i + LANES <= end; i += LANES) {
            for (int k = 0; k < LANES; k++) {
                double r = ref[i + k], c = cand[i + k], d = fabs(r - c);
                max_abs[k] = larger(max_abs[k], d);
                sum_abs[k] += d;
                ref_max[k] = larger(ref_max[k], fabs(r));
                dot[k] += r * c;
                ref_sq[k] += r * r;
                cand_sq[k] += c * c;
            }
        }
        for (; i < end; i++) {
            double r = ref[i], c = cand[i], d = fabs(r - c);
            max_abs[0] = larger(max_abs[0], d);
            sum_abs[0] += d;
            ref_max[0] = larger(ref_max[0], fabs(r));
            dot[0] += r * c;
            ref_sq[0] += r * r;
            cand_sq[0] += c * c;
        }
        double block_max = 0, block_sum = 0, block_ref_max = 0, block_dot = 0, block_ref_sq = 0, block_cand_sq = 0;
        for (int k = 0; k < LANES; k++) {
            block_max = larger(block_max, max_abs[k]);
            block_sum += sum_abs[k];
            block_ref_max = larger(block_ref_max, ref_max[k]);
            block_dot += dot[k];
            block_ref_sq += ref_sq[k];
            block_cand_sq += cand_sq[k];
        }
        /* NaN or Inf on either side makes a sum of squares NaN or Inf (a float32 square cannot overflow a double). */
        if (!isfinite(block_ref_sq) || !isfinite(block_cand_sq)) {
            return begin;
        }
        out[0] = larger(out[0], block_max);
        out[1] += block_sum;
        out[2] = larger(out[2], block_ref_max);
        out[3] += block_dot;
        out[4] += block_ref_sq;
        out[5] += block_cand_sq;
    }
    return stop;
}

/* One float32 tensor's summary (trtdiff.analysis.statistics, `--capture stats`), in one pass.
 *
 * For blocks of `block` elements from `start` to `stop` it folds into `out` what
 * statistics._numpy_summary computes with numpy: out[0] min, out[1] max, out[2] sum, out[3]
 * sum of squares, each value widened to double (out[0] and out[1] start at +-HUGE_VAL).
 * A block holding NaN or Inf is left to numpy, as in trtdiff_moments_f32: the pass stops at
 * that block's start and returns it; a pass that finishes returns `stop`.
 */
EXPORTED int64_t trtdiff_summary_f32(const float *x, int64_t start, int64_t stop, int64_t block, double *out) {
    for (int64_t begin = start; begin < stop; begin += block) {
        int64_t end = stop - begin > block ? begin + block : stop;
        double low[LANES], high[LANES], sum[LANES] = {0}, sq[LANES] = {0};
        for (int k = 0; k < LANES; k++) {
            low[k] = HUGE_VAL;
            high[k] = -HUGE_VAL;
        }
        int64_t i = begin;
        for (; i + LANES <= end; i += LANES) {
            for (int k = 0; k < LANES; k++) {
                double v = x[i + k];
                low[k] = v < low[k] ? v : low[k];
                high[k] = v > high[k] ? v : high[k];
                sum[k] += v;
                sq[k] += v * v;
            }
        }
        for (; i < end; i++) {
            double v = x[i];
            low[0] = v < low[0] ? v : low[0];
            high[0] = v > high[0] ? v : high[0];
            sum[0] += v;
            sq[0] += v * v;
        }
        double block_low = HUGE_VAL, block_high = -HUGE_VAL, block_sum = 0, block_sq = 0;
        for (int k = 0; k < LANES; k++) {
            block_low = low[k] < block_low ? low[k] : block_low;
            block_high = high[k] > block_high ? high[k] : block_high;
            block_sum += sum[k];
            block_sq += sq[k];
        }
        /* NaN or Inf makes the sum of squares NaN or Inf (a float32 square cannot overflow a double). */
        if (!isfinite(block_sq)) {
            return begin;
        }
        out[0] = block_low < out[0] ? block_low : out[0];
        out[1] = block_high > out[1] ? block_high : out[1];
        out[2] += block_sum;
        out[3] += block_sq;
    }
    return stop;
}
