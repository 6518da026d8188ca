//! Numerical building blocks, in plain f64: the log-gamma function, the
//! regularized incomplete beta function (Lentz's continued fraction) and the
//! Student t and F tail probabilities built on it, the regularized upper
//! incomplete gamma function and the chi-square tail built on it, type-7 quantiles, and
//! least squares by Householder QR.

/// Relative size below which a design column counts as a combination of the
/// columns before it (the distance from their span over the column's own
/// norm). R's `lm` uses the same tolerance.
pub(crate) const RANK_TOLERANCE: f64 = 1e-7;

/// `ln Γ(x)` for `x > 0`, by the Lanczos approximation (g = 7, 9 terms;
/// relative error about 1e-15).
pub(crate) fn ln_gamma(x: f64) -> f64 {
    const G: f64 = 7.0;
    const COEFFICIENTS: [f64; 9] = [
        0.999_999_999_999_809_9,
        676.520_368_121_885_1,
        -1_259.139_216_722_402_8,
        771.323_428_777_653_1,
        -176.615_029_162_140_6,
        12.507_343_278_686_905,
        -0.138_571_095_265_720_12,
        9.984_369_578_019_572e-6,
        1.505_632_735_149_311_6e-7,
    ];
    if x < 0.5 {
        // Γ(x) = Γ(x + 1) / x keeps the series in its accurate range.
        return ln_gamma(x + 1.0) - x.ln();
    }
    let x = x - 1.0;
    let sum = COEFFICIENTS[1..]
        .iter()
        .enumerate()
        .fold(COEFFICIENTS[0], |acc, (i, c)| acc + c / (x + i as f64 + 1.0));
    let t = x + G + 0.5;
    0.5 * (2.0 * std::f64::consts::PI).ln() + (x + 0.5) * t.ln() - t + sum.ln()
}

/// `ln B(a, b)` for positive `a` and `b`. When either argument is large the
/// big `ln Γ` terms are cancelled analytically (Stirling's series), as R's
/// `lbeta` does, so the result keeps its relative accuracy.
pub(crate) fn ln_beta(a: f64, b: f64) -> f64 {
    let (p, q) = (a.min(b), a.max(b));
    let sum = p + q;
    if p >= 10.0 {
        let correction = stirling_correction(p) + stirling_correction(q) - stirling_correction(sum);
        return -0.5 * q.ln()
            + 0.5 * (2.0 * std::f64::consts::PI).ln()
            + correction
            + (p - 0.5) * (p / sum).ln()
            + q * (-p / sum).ln_1p();
    }
    if q >= 10.0 {
        let correction = stirling_correction(q) - stirling_correction(sum);
        return ln_gamma(p) + correction + p - p * sum.ln() + (q - 0.5) * (-p / sum).ln_1p();
    }
    ln_gamma(p) + ln_gamma(q) - ln_gamma(sum)
}

/// `ln Γ(x) − [(x − ½) ln x − x + ½ ln 2π]` for `x >= 10`, by Stirling's
/// series (absolute error below 1e-17 there).
fn stirling_correction(x: f64) -> f64 {
    // B₂ₖ / (2k (2k − 1)) for k = 1..8.
    const TERMS: [f64; 8] = [
        1.0 / 12.0,
        -1.0 / 360.0,
        1.0 / 1260.0,
        -1.0 / 1680.0,
        1.0 / 1188.0,
        -691.0 / 360_360.0,
        1.0 / 156.0,
        -3617.0 / 122_400.0,
    ];
    let inverse_square = 1.0 / (x * x);
    TERMS.iter().rev().fold(0.0, |acc, c| acc * inverse_square + c) / x
}

/// The regularized incomplete beta function `I_x(a, b)`, given both `x` and
/// `y = 1 - x` so callers can pass a complement computed without cancellation.
pub(crate) fn beta_reg(a: f64, b: f64, x: f64, y: f64) -> f64 {
    if x.is_nan() || y.is_nan() {
        return f64::NAN;
    }
    if x <= 0.0 {
        return 0.0;
    }
    if y <= 0.0 {
        return 1.0;
    }
    // ln x and ln y, each from whichever of x and y is small (and so exact).
    let (ln_x, ln_y) = if x > 0.5 { ((-y).ln_1p(), y.ln()) } else { (x.ln(), (-x).ln_1p()) };
    let front = (a * ln_x + b * ln_y - ln_beta(a, b)).exp();
    if x < (a + 1.0) / (a + b + 2.0) {
        front * beta_fraction(a, b, x) / a
    } else {
        1.0 - front * beta_fraction(b, a, y) / b
    }
}

/// The continued fraction for `I_x(a, b)`, evaluated by the modified Lentz
/// method. It converges fast for `x < (a + 1) / (a + b + 2)`.
fn beta_fraction(a: f64, b: f64, x: f64) -> f64 {
    const TINY: f64 = 1e-300;
    const EPS: f64 = 1e-15;
    // Convergence takes O(sqrt(max(a, b))) steps; this bound covers any df a dataset can have.
    const MAX_STEPS: u32 = 1_000_000;
    let guard = |v: f64| if v.abs() < TINY { TINY } else { v };
    let mut c = 1.0;
    let mut d = 1.0 / guard(1.0 - (a + b) * x / (a + 1.0));
    let mut h = d;
    for m in 1..=MAX_STEPS {
        let m = f64::from(m);
        let even = m * (b - m) * x / ((a - 1.0 + 2.0 * m) * (a + 2.0 * m));
        d = 1.0 / guard(1.0 + even * d);
        c = guard(1.0 + even / c);
        h *= d * c;
        let odd = -(a + m) * (a + b + m) * x / ((a + 2.0 * m) * (a + 1.0 + 2.0 * m));
        d = 1.0 / guard(1.0 + odd * d);
        c = guard(1.0 + odd / c);
        let step = d * c;
        h *= step;
        if (step - 1.0).abs() < EPS {
            break;
        }
    }
    h
}

/// Two-sided p-value of a Student t statistic: `P(|T| >= |t|)` with `df` degrees of freedom.
pub(crate) fn t_two_sided_p(t: f64, df: f64) -> f64 {
    let t2 = t * t;
    // x = df / (df + t²) and its complement, each without cancellation.
    beta_reg(df / 2.0, 0.5, df / (df + t2), 1.0 / (1.0 + df / t2))
}

/// Upper tail of the F distribution: `P(F >= f)` with `(d1, d2)` degrees of freedom.
pub(crate) fn f_upper_p(f: f64, d1: f64, d2: f64) -> f64 {
    let scaled = d1 * f;
    beta_reg(d2 / 2.0, d1 / 2.0, d2 / (d2 + scaled), 1.0 / (1.0 + d2 / scaled))
}

/// P(X > x) for X chi-square with `df` degrees of freedom: the regularized
/// upper incomplete gamma function Q(df/2, x/2).
pub(crate) fn chi2_upper(x: f64, df: u32) -> f64 {
    if x <= 0.0 {
        return 1.0;
    }
    gamma_q(f64::from(df) / 2.0, x / 2.0)
}

/// Q(a, x) = Γ(a, x)/Γ(a): by its power series (as 1 − P) below x = a + 1,
/// by its continued fraction (modified Lentz) above.
fn gamma_q(a: f64, x: f64) -> f64 {
    let front = (a * x.ln() - x - ln_gamma(a)).exp();
    if x < a + 1.0 {
        let (mut term, mut sum, mut n) = (1.0 / a, 1.0 / a, a);
        for _ in 0..1000 {
            n += 1.0;
            term *= x / n;
            sum += term;
            if term.abs() < sum.abs() * 1e-16 {
                break;
            }
        }
        return (1.0 - sum * front).clamp(0.0, 1.0);
    }
    let tiny = 1e-300;
    let mut b = x + 1.0 - a;
    let mut c = 1.0 / tiny;
    let mut d = 1.0 / b;
    let mut h = d;
    for i in 1..1000 {
        let an = -(i as f64) * (i as f64 - a);
        b += 2.0;
        d = an * d + b;
        if d.abs() < tiny {
            d = tiny;
        }
        c = b + an / c;
        if c.abs() < tiny {
            c = tiny;
        }
        d = 1.0 / d;
        let delta = d * c;
        h *= delta;
        if (delta - 1.0).abs() < 1e-16 {
            break;
        }
    }
    (front * h).clamp(0.0, 1.0)
}

/// The `q` quantile of sorted, non-empty data by linear interpolation between
/// order statistics (R type 7, numpy's default).
pub(crate) fn quantile_sorted(sorted: &[f64], q: f64) -> f64 {
    let h = (sorted.len() - 1) as f64 * q;
    let lo = h.floor() as usize;
    match sorted.get(lo + 1) {
        Some(next) => sorted[lo] + (h - lo as f64) * (next - sorted[lo]),
        None => sorted[lo],
    }
}

/// Mean of non-empty data, two-pass with a correction term.
pub(crate) fn mean(values: &[f64]) -> f64 {
    let n = values.len() as f64;
    let first = values.iter().sum::<f64>() / n;
    first + values.iter().map(|v| v - first).sum::<f64>() / n
}

/// Sum of squared deviations from `centre`.
pub(crate) fn sum_sq_dev(values: &[f64], centre: f64) -> f64 {
    values.iter().map(|v| (v - centre) * (v - centre)).sum()
}

/// Euclidean norm, scaled so that huge or tiny entries neither overflow nor underflow.
fn norm(v: &[f64]) -> f64 {
    let scale = v.iter().fold(0.0_f64, |m, x| m.max(x.abs()));
    if scale == 0.0 {
        return 0.0;
    }
    scale * v.iter().map(|x| (x / scale) * (x / scale)).sum::<f64>().sqrt()
}

/// A least-squares solution.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct LeastSquares {
    pub coefficients: Vec<f64>,
    /// The diagonal of `(XᵀX)⁻¹ = R⁻¹R⁻ᵀ`; times σ² it gives the coefficient variances.
    pub unscaled_variances: Vec<f64>,
    /// All of `(XᵀX)⁻¹` (row-major); times σ² it is the coefficients' covariance.
    pub unscaled_covariance: Vec<Vec<f64>>,
    /// Residual sum of squares.
    pub rss: f64,
}

/// Why a design cannot be solved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Deficient {
    /// Column `j` is (numerically) a linear combination of columns `0..j`;
    /// for `j = 0`, it is all zeros.
    Collinear(usize),
}

/// Solves `min ‖y − Xb‖` by Householder QR of `X` (given as columns, each of
/// `y.len()` rows; the caller ensures more rows than columns). Columns are
/// reduced in order, so a deficient one is reported by its position.
pub(crate) fn least_squares(mut columns: Vec<Vec<f64>>, mut y: Vec<f64>) -> Result<LeastSquares, Deficient> {
    let p = columns.len();
    let n = y.len();
    let original_norms: Vec<f64> = columns.iter().map(|c| norm(c)).collect();
    let mut r = vec![vec![0.0; p]; p];
    for j in 0..p {
        let (done, rest) = columns.split_at_mut(j + 1);
        let column = &done[j];
        let alpha = norm(&column[j..]);
        if original_norms[j] == 0.0 || alpha <= RANK_TOLERANCE * original_norms[j] {
            return Err(Deficient::Collinear(j));
        }
        // Reflector H = I − 2vvᵀ/(vᵀv) maps column[j..] to (−sign·alpha, 0, …).
        let sign = if column[j] >= 0.0 { 1.0 } else { -1.0 };
        let mut v = column[j..].to_vec();
        v[0] += sign * alpha;
        let vv: f64 = v.iter().map(|x| x * x).sum();
        let reflect = |target: &mut [f64]| {
            let scale = 2.0 * v.iter().zip(target.iter()).map(|(a, b)| a * b).sum::<f64>() / vv;
            target.iter_mut().zip(&v).for_each(|(t, vi)| *t -= scale * vi);
        };
        r[j][j] = -sign * alpha;
        for (k, other) in rest.iter_mut().enumerate() {
            reflect(&mut other[j..]);
            r[j][j + 1 + k] = other[j];
        }
        reflect(&mut y[j..]);
    }
    // Rb = (Qᵀy)[..p]; the rest of Qᵀy is the residual vector in another basis.
    let mut coefficients = vec![0.0; p];
    for i in (0..p).rev() {
        let known: f64 = (i + 1..p).map(|k| r[i][k] * coefficients[k]).sum();
        coefficients[i] = (y[i] - known) / r[i][i];
    }
    let rss = y[p..n].iter().map(|e| e * e).sum();
    // R⁻¹ is upper triangular; row i of it gives ((XᵀX)⁻¹)ᵢᵢ = Σⱼ (R⁻¹)ᵢⱼ².
    let mut inverse = vec![vec![0.0; p]; p];
    for i in (0..p).rev() {
        let mut row = vec![0.0; p];
        row[i] = 1.0 / r[i][i];
        for (j, entry) in row.iter_mut().enumerate().skip(i + 1) {
            let s: f64 = (i + 1..=j).map(|k| r[i][k] * inverse[k][j]).sum();
            *entry = -s / r[i][i];
        }
        inverse[i] = row;
    }
    let unscaled_variances = inverse.iter().map(|row| row.iter().map(|x| x * x).sum()).collect();
    // (XᵀX)⁻¹ = R⁻¹R⁻ᵀ: entry (i, j) is the dot product of rows i and j of R⁻¹.
    let unscaled_covariance = (0..p)
        .map(|i| (0..p).map(|j| inverse[i].iter().zip(&inverse[j]).map(|(a, b)| a * b).sum()).collect())
        .collect();
    Ok(LeastSquares { coefficients, unscaled_variances, unscaled_covariance, rss })
}

#[cfg(test)]
#[allow(clippy::excessive_precision, reason = "reference values keep the digits their sources print")]
mod tests {
    use std::f64::consts::PI;

    use super::*;

    fn close(got: f64, want: f64, rel: f64) -> bool {
        (got - want).abs() <= rel * want.abs().max(f64::MIN_POSITIVE)
    }

    #[track_caller]
    fn assert_close(got: f64, want: f64, rel: f64) {
        assert!(close(got, want, rel), "got {got:e}, want {want:e} (relative tolerance {rel:e})");
    }

    #[test]
    fn ln_gamma_matches_reference_values() {
        // Reference values from mpmath.loggamma at 40 digits, and exact factorials.
        assert_close(ln_gamma(0.5), 0.5 * PI.ln(), 1e-14);
        assert!(ln_gamma(1.0).abs() < 1e-15);
        assert!(ln_gamma(2.0).abs() < 1e-15);
        assert_close(ln_gamma(1.5), -0.12078223763524522, 1e-13);
        assert_close(ln_gamma(3.0), 2.0_f64.ln(), 1e-14);
        assert_close(ln_gamma(10.0), 362_880.0_f64.ln(), 1e-14);
        assert_close(ln_gamma(100.5), 361.43554046777762, 1e-14);
        assert_close(ln_gamma(1e5), 1_051_287.7089736569, 1e-14);
        assert_close(ln_gamma(0.1), 2.252712651734206, 1e-13);
    }

    const LN_BETA_REFERENCES: [(f64, f64, f64); 9] = [
        (0.5, 0.5, 1.1447298858494002),
        (2.0, 3.0, -2.4849066497880003),
        (3.5, 9.5, -7.0969074725175434),
        (0.5, 10.0, -0.56643279639759393),
        (0.5, 5e6, -7.1401092672744872),
        (3.0, 1e5, -33.845659214100743),
        (10.0, 10.0, -13.736229227036555),
        (15.5, 2e4, -126.97275991903281),
        (1e6, 2.5e6, -2093949.3806289349),
    ];

    #[test]
    fn ln_beta_matches_reference_values() {
        // mpmath.log(mpmath.beta(a, b)) at 40 digits, across the three branches.
        for (a, b, want) in LN_BETA_REFERENCES {
            assert_close(ln_beta(a, b), want, 1e-13);
            assert_close(ln_beta(b, a), want, 1e-13);
        }
        for x in [10.0, 12.5, 100.0, 1e6] {
            let stirling = (x - 0.5) * f64::ln(x) - x + 0.5 * (2.0 * PI).ln();
            assert_close(stirling + stirling_correction(x), ln_gamma(x), 1e-14);
        }
    }

    #[test]
    fn incomplete_beta_matches_closed_forms_and_references() {
        for x in [1e-6, 0.1, 0.3, 0.5, 0.77, 0.999] {
            let y = 1.0 - x;
            assert_close(beta_reg(1.0, 1.0, x, y), x, 1e-14);
            assert_close(beta_reg(3.0, 1.0, x, y), x * x * x, 1e-13);
            // 1 − (1 − x)⁴, expanded so the reference itself does not cancel.
            assert_close(beta_reg(1.0, 4.0, x, y), x * (4.0 - 6.0 * x + 4.0 * x * x - x * x * x), 1e-13);
            assert_close(beta_reg(0.5, 0.5, x, y), 2.0 / PI * x.sqrt().asin(), 1e-13);
        }
        // mpmath.betainc(a, b, 0, x, regularized=True)
        assert_close(beta_reg(2.0, 3.0, 0.4, 0.6), 0.5248, 1e-13);
        assert_close(beta_reg(10.0, 20.0, 0.35, 0.65), 0.592386663663905, 1e-12);
        assert_close(beta_reg(100.0, 50.0, 0.7, 0.3), 0.80544816622775349, 1e-11);
        assert_eq!((beta_reg(2.0, 3.0, 0.0, 1.0), beta_reg(2.0, 3.0, 1.0, 0.0)), (0.0, 1.0));
    }

    #[test]
    fn student_t_p_values() {
        // Published: t = 2.0 with 10 df gives two-sided p = 0.07338803.
        assert_close(t_two_sided_p(2.0, 10.0), 0.073388034770740366, 1e-12);
        assert!((t_two_sided_p(-2.0, 10.0) - 0.07338803).abs() < 5e-9);
        // Table critical values: t(0.975, 10) = 2.228139, t(0.995, 5) = 4.032143, t(0.95, 30) = 1.697261.
        assert!((t_two_sided_p(2.228138851986, 10.0) - 0.05).abs() < 1e-12);
        assert!((t_two_sided_p(4.032142983557, 5.0) - 0.01).abs() < 1e-11);
        assert!((t_two_sided_p(1.697260886571, 30.0) - 0.10).abs() < 1e-11);
        // Closed forms: df = 1 is Cauchy, df = 2 has p = 1 − t/√(2 + t²).
        for t in [0.01, 0.5, 1.0, 3.0, 50.0] {
            assert_close(t_two_sided_p(t, 1.0), 1.0 - 2.0 / PI * f64::atan(t), 1e-12);
            assert_close(t_two_sided_p(t, 2.0), 1.0 - t / (2.0 + t * t).sqrt(), 1e-11);
        }
        // mpmath, including a far tail, fractional df and many df.
        assert_close(t_two_sided_p(40.0, 30.0), 1.3726045194406403e-27, 1e-10);
        assert_close(t_two_sided_p(1.5, 2.5), 0.24783645308629626, 1e-12);
        assert_close(t_two_sided_p(0.01, 100.0), 0.9920412102344285, 1e-13);
        assert_close(t_two_sided_p(3.0, 1000.0), 0.0027667090442381925, 1e-10);
        // With many df the t approaches the normal, P(|Z| > 1.959964) = 0.05; mpmath gives
        // 0.0500000277295126 at 1e7 df.
        assert_close(t_two_sided_p(1.959963984540054, 1e7), 0.0500000277295126, 1e-9);
        assert_eq!(t_two_sided_p(0.0, 5.0), 1.0);
        assert_eq!(t_two_sided_p(f64::INFINITY, 5.0), 0.0);
        assert!(t_two_sided_p(f64::NAN, 5.0).is_nan());
    }

    #[test]
    fn f_p_values() {
        // With d1 = 2 the tail is (1 + 2f/d2)^(−d2/2).
        assert_close(f_upper_p(3.0, 2.0, 10.0), 1.6_f64.powi(-5), 1e-13);
        // Longley's certified F = 330.285339234588 on (6, 9) df; mpmath gives this tail.
        assert_close(f_upper_p(330.285339234588, 6.0, 9.0), 4.9840305287248105e-10, 1e-9);
        assert_eq!(f_upper_p(0.0, 3.0, 7.0), 1.0);
    }

    #[test]
    fn the_chi_square_tail_matches_published_critical_values() {
        // Critical values at 5 % and 1 % (e.g. NIST/SEMATECH e-Handbook, table 1.3.6.7.4).
        for (x, df, p) in [
            (3.841, 1, 0.05),
            (6.635, 1, 0.01),
            (16.919, 9, 0.05),
            (21.666, 9, 0.01),
            (30.144, 19, 0.05),
            (124.342, 100, 0.05),
        ] {
            let got = chi2_upper(x, df);
            assert!(close(got, p, 2e-3), "chi2 {x} df {df}: {got}, want {p}");
        }
        // Closed forms: df 2 is exp(−x/2); df 4 is (1 + x/2)exp(−x/2).
        for x in [0.1, 1.0, 5.0, 40.0] {
            assert!(close(chi2_upper(x, 2), (-x / 2.0).exp(), 1e-12), "{x}");
            assert!(close(chi2_upper(x, 4), (1.0 + x / 2.0) * (-x / 2.0).exp(), 1e-12), "{x}");
        }
        assert_eq!(chi2_upper(0.0, 9), 1.0);
    }

    #[test]
    fn type_7_quantiles() {
        let v: Vec<f64> = (1..=10).map(f64::from).collect();
        let q = |p| quantile_sorted(&v, p);
        assert_eq!((q(0.0), q(0.25), q(0.5), q(0.75), q(1.0)), (1.0, 3.25, 5.5, 7.75, 10.0));
        assert_eq!(quantile_sorted(&[4.0], 0.25), 4.0);
        assert_eq!(quantile_sorted(&[1.0, 2.0, 4.0], 0.75), 3.0);
    }

    #[test]
    fn least_squares_on_a_closed_form_case() {
        // x = 1..5, y = (2, 4, 5, 4, 5): slope = Sxy/Sxx = 6/10, intercept = 4 − 0.6·3 = 2.2,
        // RSS = Syy − Sxy²/Sxx = 6 − 3.6 = 2.4, Var(slope) = σ²/Sxx so (XᵀX)⁻¹₁₁ = 1/10,
        // and (XᵀX)⁻¹₀₀ = 1/n + x̄²/Sxx = 0.2 + 0.9 = 1.1.
        let x: Vec<f64> = (1..=5).map(f64::from).collect();
        let fit = least_squares(vec![vec![1.0; 5], x], vec![2.0, 4.0, 5.0, 4.0, 5.0]).expect("full rank");
        assert_close(fit.coefficients[0], 2.2, 1e-14);
        assert_close(fit.coefficients[1], 0.6, 1e-14);
        assert_close(fit.rss, 2.4, 1e-13);
        assert_close(fit.unscaled_variances[0], 1.1, 1e-14);
        assert_close(fit.unscaled_variances[1], 0.1, 1e-14);
    }

    #[test]
    fn least_squares_reports_the_collinear_column() {
        let a = vec![1.0, 2.0, 3.0, 4.0, 5.0];
        let b = vec![2.0, 1.0, 0.0, 1.0, 2.0];
        let sum: Vec<f64> = a.iter().zip(&b).map(|(x, y)| 3.0 * x - y).collect();
        let y = vec![1.0, 0.0, 1.0, 0.0, 1.0];
        let ones = vec![1.0; 5];
        let err = least_squares(vec![ones.clone(), a.clone(), b.clone(), sum], y.clone());
        assert_eq!(err, Err(Deficient::Collinear(3)));
        assert_eq!(least_squares(vec![vec![0.0; 5], a], y.clone()), Err(Deficient::Collinear(0)));
        assert_eq!(least_squares(vec![ones, vec![7.0; 5]], y), Err(Deficient::Collinear(1)));
    }
}
