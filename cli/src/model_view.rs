//! A linear fit's `model.json` for people: the coefficient table (estimate,
//! standard error, t, p) and the fit's statistics, as R's `summary.lm`
//! shows them.

use serde_json::Value;

use crate::output::Table;

/// The summary of a `tabular.linear` model, or `None` when `bytes` is not one.
pub fn linear_summary(bytes: &[u8]) -> Option<String> {
    let m: Value = serde_json::from_slice(bytes).ok()?;
    if m["method"] != "tabular.linear" {
        return None;
    }
    let coefficients = m["coefficients"].as_array()?;
    let mut table =
        Table::new(&["TERM", "ESTIMATE", "STD. ERROR", "T", "P", ""]).right(&[1, 2, 3, 4]).flex(&[0]);
    for c in coefficients {
        let p = c["p_value"].as_f64();
        table.row(vec![
            c["name"].as_str().unwrap_or("?").into(),
            number(&c["estimate"]).into(),
            number(&c["std_error"]).into(),
            fixed(&c["t"], 3).into(),
            p.map_or("-".to_owned(), p_value).into(),
            stars(p).into(),
        ]);
    }
    let mut out = format!("{} on {}\n", m["y"].as_str().unwrap_or("?"), predictors(&m));
    out.push_str(&table.render(None, false));
    out.push_str("signif.: *** < 0.001  ** < 0.01  * < 0.05  . < 0.1\n");
    out.push_str(&format!(
        "n {}  R² {}  adj. R² {}  residual std. error {} on {} df\n",
        m["n"],
        fixed(&m["r_squared"], 4),
        fixed(&m["adj_r_squared"], 4),
        number(&m["residual_std_error"]),
        m["df_residual"]
    ));
    if let Some(f) = m["f_statistic"].as_f64() {
        let p = m["f_p_value"].as_f64().map_or("-".to_owned(), p_value);
        out.push_str(&format!("F {f:.2} on {} and {} df, p {p}\n", m["df_model"], m["df_residual"]));
    }
    Some(out)
}

fn predictors(m: &Value) -> String {
    let x: Vec<&str> = m["x"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
    let intercept = if m["intercept"] == true { " with an intercept" } else { "" };
    format!("{}{intercept}", x.join(", "))
}

/// Six significant digits, as a person reads a coefficient.
fn number(v: &Value) -> String {
    let Some(x) = v.as_f64() else { return "-".to_owned() };
    if x == 0.0 || (1e-4..1e7).contains(&x.abs()) {
        let digits = 5 - (x.abs().max(1e-300).log10().floor() as i32).clamp(-4, 5);
        format!("{x:.*}", usize::try_from(digits).unwrap_or(0))
    } else {
        format!("{x:.5e}")
    }
}

fn fixed(v: &Value, places: usize) -> String {
    v.as_f64().map_or("-".to_owned(), |x| format!("{x:.places$}"))
}

fn p_value(p: f64) -> String {
    if p < 1e-4 { format!("{p:.1e}") } else { format!("{p:.4}") }
}

fn stars(p: Option<f64>) -> &'static str {
    match p {
        Some(p) if p < 0.001 => "***",
        Some(p) if p < 0.01 => "**",
        Some(p) if p < 0.05 => "*",
        Some(p) if p < 0.1 => ".",
        _ => "",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_linear_model_reads_as_a_coefficient_table() {
        let model = json!({
            "method": "tabular.linear", "y": "employed", "x": ["gnp", "year"], "intercept": true, "n": 16,
            "coefficients": [
                {"name": "(intercept)", "estimate": -3482258.63459582, "std_error": 890420.383607373, "t": -3.91080291, "p_value": 0.00356},
                {"name": "gnp", "estimate": -0.0358191792925910, "std_error": 0.0334910077722432, "t": -1.0695, "p_value": 0.3127},
                {"name": "year", "estimate": 1829.15146461355, "std_error": 455.478499142212, "t": 4.0159, "p_value": 0.00000003},
            ],
            "r_squared": 0.995479004577296, "adj_r_squared": 0.992465007628826,
            "residual_std_error": 304.854073561965, "df_residual": 9, "df_model": 6,
            "f_statistic": 330.285339234588, "f_p_value": 4.98e-10
        });
        let text = linear_summary(model.to_string().as_bytes()).expect("a linear model");
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "employed on gnp, year with an intercept");
        assert!(lines[1].starts_with("TERM") && lines[1].contains("STD. ERROR"), "{text}");
        assert!(
            lines[2].contains("-3482259") && lines[2].contains("-3.911") && lines[2].ends_with("**"),
            "{text}"
        );
        assert!(lines[3].contains("-0.0358192") && lines[3].contains("0.3127"), "{text}");
        assert!(
            lines[4].contains("1829.15") && lines[4].contains("3.0e-8") && lines[4].ends_with("***"),
            "{text}"
        );
        assert!(text.contains("R² 0.9955  adj. R² 0.9925  residual std. error 304.854 on 9 df"), "{text}");
        assert!(text.contains("F 330.29 on 6 and 9 df, p 5.0e-10"), "{text}");
        assert_eq!(linear_summary(b"{\"method\": \"describe\"}"), None);
        assert_eq!(linear_summary(b"not json"), None);
    }
}
