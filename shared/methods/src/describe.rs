//! `describe`: summary statistics of numeric columns (count, missing, mean,
//! sample standard deviation, min, type-7 quartiles, max), written to
//! `summary.json` along with the names of the text columns.

use serde_json::{Value, json};

use crate::numerics::{mean, quantile_sorted, sum_sq_dev};
use crate::registry::Params;
use crate::table::Table;
use crate::{Context, MethodError, Output, json_output};

pub(crate) const SUMMARY: &str = "summary.json";

pub(crate) fn run(params: &Params, table: &Table, ctx: &mut dyn Context) -> Result<Vec<Output>, MethodError> {
    let names = params
        .get_columns("columns")
        .unwrap_or_else(|| table.numeric_columns().into_iter().map(str::to_string).collect());
    let mut summaries = Vec::with_capacity(names.len());
    for (i, name) in names.iter().enumerate() {
        if ctx.stop_requested() {
            return Err(MethodError::Stopped { checkpointed: false });
        }
        let values = table
            .numeric(name)
            .ok_or_else(|| MethodError::Input(format!("column `{name}` is not a numeric column")))?;
        summaries.push(summarise(name, values));
        let done = (i + 1) as f64 / names.len() as f64;
        ctx.progress(0.1 + 0.9 * done, &format!("summarised column `{name}`"));
    }
    let summary = json!({
        "rows": table.rows(),
        "columns": summaries,
        "text_columns": table.text_columns(),
    });
    ctx.progress(1.0, "done");
    Ok(vec![json_output(SUMMARY, &summary)])
}

fn summarise(name: &str, values: &[Option<f64>]) -> Value {
    let mut present: Vec<f64> = values.iter().flatten().copied().collect();
    present.sort_by(f64::total_cmp);
    let count = present.len();
    let missing = values.len() - count;
    if count == 0 {
        return json!({
            "name": name, "count": 0, "missing": missing, "mean": null, "std": null,
            "min": null, "q25": null, "median": null, "q75": null, "max": null,
        });
    }
    let centre = mean(&present);
    let std = (count > 1).then(|| (sum_sq_dev(&present, centre) / (count - 1) as f64).sqrt());
    let q = |p| quantile_sorted(&present, p);
    json!({
        "name": name,
        "count": count,
        "missing": missing,
        "mean": centre,
        "std": std,
        "min": present[0],
        "q25": q(0.25),
        "median": q(0.5),
        "q75": q(0.75),
        "max": present[count - 1],
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::fake::{FakeContext, params};
    use crate::registry::DESCRIBE;

    fn describe(csv: &str, p: Value, ctx: &mut FakeContext) -> Result<Value, MethodError> {
        let outputs = crate::run(DESCRIBE, &params(DESCRIBE, p), csv.as_bytes(), ctx)?;
        assert_eq!(outputs.len(), 1);
        assert_eq!(outputs[0].name, SUMMARY);
        Ok(serde_json::from_slice(&outputs[0].bytes).expect("summary is JSON"))
    }

    #[test]
    fn summary_of_one_to_ten_with_missing_and_text_columns() {
        let mut csv = String::from("id,label,v,gaps,single\n");
        for i in 1..=10 {
            // `gaps` holds 2, 4, 6 and 8 with the rest missing; `single` one value.
            let gap =
                if i % 2 == 0 && i < 10 { i.to_string() } else { ["", "NA", "null"][i % 3].to_string() };
            let single = if i == 3 { "7" } else { "" };
            csv.push_str(&format!("{i},item {i},{i},{gap},{single}\n"));
        }
        let mut ctx = FakeContext::default();
        let s = describe(&csv, json!({}), &mut ctx).expect("describe runs");
        assert_eq!(s["rows"], 10);
        assert_eq!(s["text_columns"], json!(["label"]));
        let names: Vec<_> =
            s["columns"].as_array().expect("array").iter().map(|c| c["name"].clone()).collect();
        assert_eq!(names, [json!("id"), json!("v"), json!("gaps"), json!("single")]);
        let v = &s["columns"][1];
        // By hand: mean 55/10; sum of squared deviations 82.5, so std = sqrt(82.5/9);
        // type 7: h = 9p, so q25 = x[2.25] = 3.25, median = 5.5, q75 = x[6.75] = 7.75.
        assert_eq!((v["count"].clone(), v["missing"].clone()), (json!(10), json!(0)));
        assert_eq!(v["mean"], 5.5);
        assert!((v["std"].as_f64().expect("std") - 3.0276503540974917).abs() < 1e-15);
        assert_eq!((v["min"].clone(), v["max"].clone()), (json!(1.0), json!(10.0)));
        assert_eq!(
            (v["q25"].clone(), v["median"].clone(), v["q75"].clone()),
            (json!(3.25), json!(5.5), json!(7.75))
        );
        // gaps = 2, 4, 6, 8: mean 5, std sqrt(20/3), q25 = 2 + 0.75·2 = 3.5, q75 = 6.5.
        let g = &s["columns"][2];
        assert_eq!((g["count"].clone(), g["missing"].clone()), (json!(4), json!(6)));
        assert_eq!(
            (g["mean"].clone(), g["q25"].clone(), g["median"].clone(), g["q75"].clone()),
            (json!(5.0), json!(3.5), json!(5.0), json!(6.5))
        );
        assert!((g["std"].as_f64().expect("std") - (20.0_f64 / 3.0).sqrt()).abs() < 1e-15);
        let one = &s["columns"][3];
        assert_eq!(
            (one["count"].clone(), one["mean"].clone(), one["std"].clone()),
            (json!(1), json!(7.0), Value::Null)
        );
        assert_eq!((one["q25"].clone(), one["max"].clone()), (json!(7.0), json!(7.0)));
        // Progress per column, ending at 1.
        let fractions: Vec<f64> = ctx.progress.iter().map(|(f, _)| *f).collect();
        assert_eq!(fractions.len(), 6);
        assert!(fractions.windows(2).all(|w| w[0] <= w[1]));
        assert_eq!(fractions.last(), Some(&1.0));
    }

    #[test]
    fn chosen_columns_and_empty_columns() {
        let mut ctx = FakeContext::default();
        let s = describe("a,b\n1,\n3,NA\n", json!({"columns": ["b", "a"]}), &mut ctx).expect("runs");
        assert_eq!(s["columns"][0]["name"], "b");
        assert_eq!(
            (s["columns"][0]["count"].clone(), s["columns"][0]["missing"].clone()),
            (json!(0), json!(2))
        );
        assert_eq!(s["columns"][0]["mean"], Value::Null);
        assert_eq!(
            (s["columns"][1]["mean"].clone(), s["columns"][1]["std"].clone()),
            (json!(2.0), json!(2.0_f64.sqrt()))
        );
        let err = describe("a,b\n1,x\n", json!({"columns": ["b"]}), &mut ctx).expect_err("text column");
        assert!(err.to_string().starts_with("column `b` (parameter `columns`) is not numeric"), "{err}");
    }

    #[test]
    fn stops_when_asked() {
        let mut ctx = FakeContext { stop_after: Some(1), ..FakeContext::default() };
        let err = describe("a,b\n1,2\n", json!({}), &mut ctx).expect_err("stopped");
        assert_eq!(err, MethodError::Stopped { checkpointed: false });
    }
}
