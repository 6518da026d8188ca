//! `tabular.linear`: ordinary least squares by Householder QR, with standard
//! errors, t tests, R², adjusted R², the residual standard error and the F
//! test, written to `model.json`. Rows missing any used value are dropped.

use serde_json::{Value, json};

use crate::numerics::{Deficient, f_upper_p, least_squares, mean, sum_sq_dev, t_two_sided_p};
use crate::registry::{LINEAR, Params};
use crate::table::Table;
use crate::{Context, MethodError, Output, json_output, required};

pub(crate) const MODEL: &str = "model.json";

const INTERCEPT: &str = "(intercept)";

pub(crate) fn run(params: &Params, table: &Table, ctx: &mut dyn Context) -> Result<Vec<Output>, MethodError> {
    let y_name = required(params.get_str("y"), "y")?;
    let intercept = params.get_bool("intercept").unwrap_or(true);
    let x_names = match params.get_columns("x") {
        Some(x) => x,
        None => table.numeric_columns().into_iter().filter(|c| *c != y_name).map(str::to_string).collect(),
    };
    if x_names.iter().any(|x| x == y_name) {
        return Err(MethodError::Input(format!(
            "column `{y_name}` is the response `y`, so it cannot also be a predictor: remove it from `x`"
        )));
    }
    if x_names.is_empty() {
        return Err(MethodError::Input(format!(
            "there are no predictors: the dataset has no numeric column besides `{y_name}`; add one"
        )));
    }
    let column = |name: &str| {
        table
            .numeric(name)
            .ok_or_else(|| MethodError::Input(format!("column `{name}` is not a numeric column")))
    };
    let y_all = column(y_name)?;
    let x_all = x_names.iter().map(|n| column(n)).collect::<Result<Vec<_>, _>>()?;

    // Keep the rows where every used value is present.
    let complete: Vec<usize> =
        (0..table.rows()).filter(|&i| y_all[i].is_some() && x_all.iter().all(|x| x[i].is_some())).collect();
    let n = complete.len();
    let dropped = table.rows() - n;
    let pick = |values: &[Option<f64>]| complete.iter().map(|&i| values[i].unwrap_or(f64::NAN)).collect();
    let y: Vec<f64> = pick(y_all);
    let mut names: Vec<&str> = Vec::with_capacity(x_names.len() + 1);
    let mut design: Vec<Vec<f64>> = Vec::with_capacity(x_names.len() + 1);
    if intercept {
        names.push(INTERCEPT);
        design.push(vec![1.0; n]);
    }
    for (name, values) in x_names.iter().zip(&x_all) {
        names.push(name);
        design.push(pick(values));
    }
    let p = design.len();
    if n <= p {
        return Err(MethodError::Input(format!(
            "need more rows than coefficients: {n} complete rows ({dropped} dropped for missing values) \
             for {p} coefficients; add rows or use fewer predictors"
        )));
    }
    if ctx.stop_requested() {
        return Err(MethodError::Stopped { checkpointed: false });
    }
    ctx.progress(
        0.2,
        &format!("fitting {p} coefficients on {n} rows ({dropped} dropped for missing values)"),
    );

    let fit = least_squares(design.clone(), y.clone()).map_err(|Deficient::Collinear(j)| {
        MethodError::Input(collinear_message(&names, &design[j], j, intercept))
    })?;
    ctx.progress(0.5, "solved");

    let df_residual = n - p;
    let df_model = p - usize::from(intercept);
    let sigma2 = fit.rss / df_residual as f64;
    let sigma = sigma2.sqrt();
    let coefficients: Vec<Value> = names
        .iter()
        .zip(fit.coefficients.iter().zip(&fit.unscaled_variances))
        .map(|(name, (&estimate, &unscaled))| {
            let std_error = (unscaled * sigma2).sqrt();
            let t = estimate / std_error;
            json!({
                "name": name,
                "estimate": estimate,
                "std_error": std_error,
                "t": t,
                "p_value": t_two_sided_p(t, df_residual as f64),
            })
        })
        .collect();
    // R's convention: with an intercept R² compares against the mean, without it against zero.
    let tss = if intercept { sum_sq_dev(&y, mean(&y)) } else { y.iter().map(|v| v * v).sum() };
    let r_squared = 1.0 - fit.rss / tss;
    let adj_r_squared = 1.0 - (1.0 - r_squared) * (n - usize::from(intercept)) as f64 / df_residual as f64;
    let f_statistic = (df_model > 0).then(|| ((tss - fit.rss) / df_model as f64) / sigma2);
    let f_p_value = f_statistic.map(|f| f_upper_p(f, df_model as f64, df_residual as f64));

    // The Gaussian log-likelihood at the fit (R's `logLik.lm`), counting
    // σ as a parameter in AIC and BIC as R does.
    let nf = n as f64;
    let log_likelihood = -nf / 2.0 * ((2.0 * std::f64::consts::PI).ln() + 1.0 - nf.ln() + fit.rss.ln());
    let parameters = (p + 1) as f64;
    let aic = -2.0 * log_likelihood + 2.0 * parameters;
    let bic = -2.0 * log_likelihood + nf.ln() * parameters;
    // The statistics people compare fits by are the run's metrics (`mapi
    // runs compare`); the rest, and every coefficient, are in model.json.
    // Each metric is an event the platform hears, so the list stays short.
    let stats = [
        ("r_squared", r_squared),
        ("residual_std_error", sigma),
        ("adj_r_squared", adj_r_squared),
        ("aic", aic),
        ("bic", bic),
    ];
    for (name, value) in stats {
        if value.is_finite() {
            ctx.metric(name, value);
        }
    }
    // The coefficients' covariance, and one used row with the fit's own
    // prediction for it: a server of this model must answer it the same.
    let covariance: Vec<Vec<f64>> =
        fit.unscaled_covariance.iter().map(|row| row.iter().map(|v| v * sigma2).collect()).collect();
    let example_inputs: serde_json::Map<String, Value> = x_names
        .iter()
        .zip(&design[usize::from(intercept)..])
        .map(|(n, col)| (n.clone(), json!(col[0])))
        .collect();
    let example_prediction: f64 = (0..p).map(|j| design[j][0] * fit.coefficients[j]).sum();
    let model = json!({
        "method": LINEAR,
        "x": x_names,
        "covariance": covariance,
        "example": {"inputs": example_inputs, "prediction": example_prediction},
        "y": y_name,
        "intercept": intercept,
        "n": n,
        "dropped_rows": dropped,
        "coefficients": coefficients,
        "r_squared": r_squared,
        "adj_r_squared": adj_r_squared,
        "residual_std_error": sigma,
        "df_residual": df_residual,
        "df_model": df_model,
        "f_statistic": f_statistic,
        "f_p_value": f_p_value,
        "log_likelihood": log_likelihood,
        "aic": aic,
        "bic": bic,
    });
    ctx.progress(1.0, "done");
    Ok(vec![json_output(MODEL, &model)])
}

/// Says which design column is a combination of the ones before it.
fn collinear_message(names: &[&str], column: &[f64], j: usize, intercept: bool) -> String {
    let name = names[j];
    let lead = "the design matrix is rank deficient";
    if column.iter().all(|v| *v == 0.0) {
        return format!("{lead}: column `{name}` is zero in every used row; drop it");
    }
    if intercept && column.iter().all(|v| *v == column[0]) {
        return format!(
            "{lead}: column `{name}` is constant in the used rows, so it duplicates the intercept; \
             drop it or set `intercept` to false"
        );
    }
    let earlier: Vec<String> = names[..j].iter().map(|n| format!("`{n}`")).collect();
    format!(
        "{lead}: column `{name}` is (nearly) a linear combination of {}; drop it or one of those",
        earlier.join(", ")
    )
}

#[cfg(test)]
#[allow(clippy::excessive_precision, reason = "certified values keep the digits NIST prints")]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::fake::{FakeContext, params};

    fn fit(csv: &str, p: Value) -> Result<(Value, FakeContext), MethodError> {
        let mut ctx = FakeContext::default();
        let outputs = crate::run(LINEAR, &params(LINEAR, p), csv.as_bytes(), &mut ctx)?;
        assert_eq!((outputs.len(), outputs[0].name), (1, MODEL));
        Ok((serde_json::from_slice(&outputs[0].bytes).expect("model is JSON"), ctx))
    }

    fn num(v: &Value) -> f64 {
        v.as_f64().expect("a number")
    }

    #[track_caller]
    fn assert_rel(got: &Value, want: f64, rel: f64) {
        let got = num(got);
        assert!((got - want).abs() <= rel * want.abs(), "got {got:e}, want {want:e} (relative {rel:e})");
    }

    /// NIST StRD Longley (Longley 1967): y = Employed, x1..x6 = GNP deflator, GNP,
    /// Unemployed, Armed Forces, Population, Year. 16 observations.
    const LONGLEY: &str = "\
y,x1,x2,x3,x4,x5,x6
60323,83.0,234289,2356,1590,107608,1947
61122,88.5,259426,2325,1456,108632,1948
60171,88.2,258054,3682,1616,109773,1949
61187,89.5,284599,3351,1650,110929,1950
63221,96.2,328975,2099,3099,112075,1951
63639,98.1,346999,1932,3594,113270,1952
64989,99.0,365385,1870,3547,115094,1953
63761,100.0,363112,3578,3350,116219,1954
66019,101.2,397469,2904,3048,117388,1955
67857,104.6,419180,2822,2857,118734,1956
68169,108.4,442769,2936,2798,120445,1957
66513,110.8,444546,4681,2637,121950,1958
68655,112.6,482704,3813,2552,123366,1959
69564,114.2,502601,3931,2514,125368,1960
69331,115.7,518173,4806,2572,127852,1961
70551,116.9,554894,4007,2827,130081,1962
";

    #[test]
    fn nist_longley_certified_values() {
        let (m, ctx) = fit(LONGLEY, json!({"y": "y"})).expect("Longley fits");
        // NIST certified estimates and standard deviations of the estimates (B0..B6).
        let certified = [
            (-3482258.63459582, 890420.383607373),
            (15.0618722713733, 84.9149257747669),
            (-0.358191792925910E-01, 0.334910077722432E-01),
            (-2.02022980381683, 0.488399681651699),
            (-1.03322686717359, 0.214274163161675),
            (-0.511041056535807E-01, 0.226073200069370),
            (1829.15146461355, 455.478499142212),
        ];
        let coefficients = m["coefficients"].as_array().expect("coefficients");
        assert_eq!(coefficients.len(), 7);
        let names: Vec<_> = coefficients.iter().map(|c| c["name"].clone()).collect();
        assert_eq!(names, ["(intercept)", "x1", "x2", "x3", "x4", "x5", "x6"].map(|n| json!(n)));
        for (c, (estimate, se)) in coefficients.iter().zip(certified) {
            // Longley is ill-conditioned; QR agrees with the certified digits to about 2e-13
            // relative (the worst is x1's estimate), so 1e-10 leaves margin and still checks
            // ten significant digits.
            assert_rel(&c["estimate"], estimate, 1e-10);
            assert_rel(&c["std_error"], se, 1e-10);
            assert_rel(&c["t"], estimate / se, 1e-10);
        }
        assert_rel(&m["r_squared"], 0.995479004577296, 1e-12);
        assert_rel(&m["residual_std_error"], 304.854073561965, 1e-11);
        // Certified ANOVA: F = 330.285339234588 on 6 and 9 df.
        assert_rel(&m["f_statistic"], 330.285339234588, 1e-11);
        assert_rel(&m["f_p_value"], 4.9840305287248105e-10, 1e-6);
        assert_eq!((m["n"].clone(), m["dropped_rows"].clone()), (json!(16), json!(0)));
        assert_eq!((m["df_residual"].clone(), m["df_model"].clone()), (json!(9), json!(6)));
        // adj R² = 1 − (1 − R²)·15/9.
        assert_rel(&m["adj_r_squared"], 1.0 - (1.0 - 0.995479004577296) * 15.0 / 9.0, 1e-11);
        // x4 (armed forces): t = −4.822 on 9 df, so p = 0.000944366764161798 (mpmath, from the
        // certified estimate and standard error).
        assert_rel(&coefficients[4]["p_value"], 0.000944366764161798, 1e-7);
        // R: logLik(lm(Employed ~ ., longley)) = -109.6174 (df = 8), AIC 235.2349, BIC 241.4156;
        // the digits below follow from the certified residual standard error.
        assert_rel(&m["log_likelihood"], -109.61743480848057, 1e-10);
        assert_rel(&m["aic"], 235.23486961696113, 1e-10);
        assert_rel(&m["bic"], 241.4155793948794, 1e-10);
        let metric = |name: &str| ctx.metrics.iter().find(|(n, _)| n == name).map(|(_, v)| *v);
        assert!((metric("residual_std_error").unwrap_or_default() - 304.854073561965).abs() < 1e-6);
        assert!((metric("aic").unwrap_or_default() - 235.23486961696113).abs() < 1e-6);
        let names: Vec<&str> = ctx.metrics.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["r_squared", "residual_std_error", "adj_r_squared", "aic", "bic"]);
        let fractions: Vec<f64> = ctx.progress.iter().map(|(f, _)| *f).collect();
        assert_eq!(fractions, [0.1, 0.2, 0.5, 1.0]);
    }

    #[test]
    fn nist_norris_certified_values() {
        let x = [
            0.2, 337.4, 118.2, 884.6, 10.1, 226.5, 666.3, 996.3, 448.6, 777.0, 558.2, 0.4, 0.6, 775.5, 666.9,
            338.0, 447.5, 11.6, 556.0, 228.1, 995.8, 887.6, 120.2, 0.3, 0.3, 556.8, 339.1, 887.2, 999.0,
            779.0, 11.1, 118.3, 229.2, 669.1, 448.9, 0.5,
        ];
        let y = [
            0.1, 338.8, 118.1, 888.0, 9.2, 228.1, 668.5, 998.5, 449.1, 778.9, 559.2, 0.3, 0.1, 778.1, 668.8,
            339.3, 448.9, 10.8, 557.7, 228.3, 998.0, 888.8, 119.6, 0.3, 0.6, 557.6, 339.3, 888.0, 998.5,
            778.9, 10.2, 117.6, 228.9, 668.4, 449.2, 0.2,
        ];
        let csv: String = std::iter::once("y,x\n".to_string())
            .chain(y.iter().zip(x).map(|(y, x)| format!("{y},{x}\n")))
            .collect();
        let (m, _) = fit(&csv, json!({"y": "y", "x": ["x"]})).expect("Norris fits");
        let c = &m["coefficients"];
        assert_rel(&c[0]["estimate"], -0.262323073774029, 1e-12);
        assert_rel(&c[0]["std_error"], 0.232818234301152, 1e-12);
        assert_rel(&c[1]["estimate"], 1.00211681802045, 1e-13);
        assert_rel(&c[1]["std_error"], 0.429796848199937E-03, 1e-12);
        assert_rel(&m["residual_std_error"], 0.884796396144373, 1e-12);
        assert_rel(&m["r_squared"], 0.999993745883712, 1e-14);
        assert_rel(&m["f_statistic"], 5436385.54079785, 1e-10);
        assert_eq!(m["df_residual"], 34);
    }

    #[test]
    fn exact_line_and_closed_form_case() {
        // y = 1 + 2x exactly.
        let (m, _) = fit("x,y\n0,1\n1,3\n2,5\n3,7\n4,9\n", json!({"y": "y"})).expect("fits");
        assert!((num(&m["coefficients"][0]["estimate"]) - 1.0).abs() < 1e-12);
        assert!((num(&m["coefficients"][1]["estimate"]) - 2.0).abs() < 1e-12);
        assert!((num(&m["r_squared"]) - 1.0).abs() < 1e-12);
        // x = 1..5, y = 2,4,5,4,5: slope 0.6, intercept 2.2, RSS 2.4 on 3 df so σ² = 0.8,
        // SE(slope) = √(0.8/10), SE(intercept) = √(0.8·1.1), R² = 1 − 2.4/6 = 0.6, F = 3.6/0.8 = 4.5.
        let (m, _) = fit("x,y\n1,2\n2,4\n3,5\n4,4\n5,5\n", json!({"y": "y"})).expect("fits");
        let c = &m["coefficients"];
        assert_rel(&c[0]["estimate"], 2.2, 1e-13);
        assert_rel(&c[1]["estimate"], 0.6, 1e-13);
        assert_rel(&c[0]["std_error"], (0.8_f64 * 1.1).sqrt(), 1e-13);
        assert_rel(&c[1]["std_error"], 0.08_f64.sqrt(), 1e-13);
        assert_rel(&c[1]["t"], 0.6 / 0.08_f64.sqrt(), 1e-13);
        // t = 2.1213 on 3 df: p = 0.124027062657554625 (mpmath).
        assert_rel(&c[1]["p_value"], 0.124027062657554625, 1e-11);
        assert_rel(&m["r_squared"], 0.6, 1e-13);
        assert_rel(&m["adj_r_squared"], 1.0 - 0.4 * 4.0 / 3.0, 1e-13);
        assert_rel(&m["residual_std_error"], 0.8_f64.sqrt(), 1e-13);
        assert_rel(&m["f_statistic"], 4.5, 1e-12);
    }

    #[test]
    fn without_intercept_and_with_missing_rows() {
        // Through the origin: slope = Σxy/Σx² = (2+8+15+16+25)/55 = 66/55 = 1.2.
        let csv = "x,y,z\n1,2,a\n2,4,b\n3,5,c\n4,4,d\n5,5,e\nNA,3,f\n6,,g\n";
        let (m, _) = fit(csv, json!({"y": "y", "intercept": false})).expect("fits");
        assert_eq!((m["n"].clone(), m["dropped_rows"].clone()), (json!(5), json!(2)));
        assert_eq!(m["coefficients"].as_array().map(Vec::len), Some(1));
        assert_rel(&m["coefficients"][0]["estimate"], 1.2, 1e-14);
        // Uncentred R² = 1 − RSS/Σy²; RSS = Σy² − (Σxy)²/Σx² = 86 − 79.2 = 6.8.
        assert_rel(&m["r_squared"], 1.0 - 6.8 / 86.0, 1e-13);
        assert_eq!(m["df_model"], 1);
    }

    #[test]
    fn refusals_say_what_to_fix() {
        let err = fit("x,y\n1,2\n2,3\n", json!({"y": "y"})).expect_err("2 rows, 2 coefficients");
        assert_eq!(
            err.to_string(),
            "need more rows than coefficients: 2 complete rows (0 dropped for missing values) for 2 \
             coefficients; add rows or use fewer predictors"
        );
        let exact = "a,b,c,y\n1,2,4,1\n2,1,4,0\n3,0,4,1\n4,1,6,0\n5,2,8,1\n";
        let err = fit(exact, json!({"y": "y", "x": ["a", "b", "c"]})).expect_err("c = a + b + 1");
        assert_eq!(
            err.to_string(),
            "the design matrix is rank deficient: column `c` is (nearly) a linear combination of \
             `(intercept)`, `a`, `b`; drop it or one of those"
        );
        let err = fit("a,k,y\n1,5,1\n2,5,0\n3,5,1\n4,5,3\n", json!({"y": "y"})).expect_err("constant");
        assert!(err.to_string().contains("column `k` is constant in the used rows"), "{err}");
        let err = fit("a,y\n1,1\n2,2\n", json!({"y": "y", "x": ["y"]})).expect_err("y in x");
        assert!(err.to_string().starts_with("column `y` is the response"), "{err}");
        let err = fit("name,y\nq,1\nr,2\n", json!({"y": "y"})).expect_err("no predictors");
        assert!(err.to_string().starts_with("there are no predictors"), "{err}");
    }
}
