//! The methods written in Python on the base images' libraries (scikit-learn,
//! statsmodels, scipy): their parameters and outputs as data, like every
//! method, and [`PythonCode`] saying which function of the platform's own
//! modules (`worker/python/methods/`) runs them and which serves their models.

use super::{JSON, MethodSpec, ModelSpec, OutputSpec, ParamKind, ParamSpec, param};
use crate::registry::Input;

/// A method's Python: the worker runs `entry` (`module:function`) of the
/// platform's modules in a child process (as it runs a plugin's code, but
/// trusted), and an endpoint scores its model with `predict`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct PythonCode {
    pub entry: &'static str,
    pub predict: Option<&'static str>,
    /// The packages it imports beyond the standard library.
    pub needs: &'static [Package],
    /// The base image that holds them, where its runs and its model servers run on Cloud Run.
    pub base: &'static str,
}

/// A Python package a method imports: its import name, the Debian package
/// that provides it on one machine and in the Debian-based images, and the
/// PyPI wheel a base image installs instead where Debian's build will not do
/// (PyTorch: Debian's is CPU-only; base-dl takes the CUDA wheels).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Package {
    pub module: &'static str,
    pub debian: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wheel: Option<&'static str>,
}

const fn debian(module: &'static str, debian: &'static str) -> Package {
    Package { module, debian, wheel: None }
}

pub(super) const NUMPY: Package = debian("numpy", "python3-numpy");
pub(super) const PANDAS: Package = debian("pandas", "python3-pandas");
const SKLEARN: Package = debian("sklearn", "python3-sklearn");
pub(super) const SCIPY: Package = debian("scipy", "python3-scipy");
const STATSMODELS: Package = debian("statsmodels", "python3-statsmodels");
pub(super) const MATPLOTLIB: Package = debian("matplotlib", "python3-matplotlib");

pub(super) const CSV: &str = "text/csv";
pub(super) const PNG: &str = "image/png";
const PICKLE: &str = "application/octet-stream";

pub(super) const fn out(name: &'static str, media_type: &'static str, doc: &'static str) -> OutputSpec {
    OutputSpec { name, media_type, doc }
}

pub(super) const fn bounded(
    p: ParamSpec,
    default: &'static str,
    min: Option<f64>,
    max: Option<f64>,
) -> ParamSpec {
    ParamSpec { default: Some(default), min, max, ..p }
}

pub(super) const fn required(p: ParamSpec) -> ParamSpec {
    ParamSpec { required: true, ..p }
}

const ML: &[Package] = &[NUMPY, PANDAS, SKLEARN, SCIPY, MATPLOTLIB];

const Y_CLASS: ParamSpec = required(param(
    "y",
    ParamKind::AnyColumn,
    "The target: class labels (text or numbers), or numbers to regress.",
));
const X: ParamSpec =
    param("x", ParamKind::Columns, "Numeric input columns. Default: every column other than `y`.");
pub(super) const TEST_SIZE: ParamSpec = bounded(
    param(
        "test_size",
        ParamKind::Number,
        "The share of rows held out to measure the fit (stratified by class); 0: none.",
    ),
    "0.25",
    Some(0.0),
    Some(0.9),
);
const CV_FOLDS: ParamSpec = bounded(
    param("cv_folds", ParamKind::Integer, "Cross-validation folds on the training rows (2 to 20); 0: none."),
    "0",
    Some(0.0),
    Some(20.0),
);
const RANDOM_STATE: ParamSpec = bounded(
    param("random_state", ParamKind::Integer, "The seed of the split, the folds and the estimator."),
    "0",
    Some(0.0),
    Some(4_294_967_295.0),
);
const TASK: ParamSpec = bounded(
    param(
        "task",
        ParamKind::Text,
        "`classification`, `regression` or `auto` (classification for text, boolean, or at most 10 distinct integers).",
    ),
    "\"auto\"",
    None,
    None,
);
const METRICS_JSON: OutputSpec =
    out("metrics.json", JSON, "Hold-out, training and cross-validation metrics, with the split's sizes.");
const IMPORTANCE: OutputSpec =
    out("feature_importance.csv", CSV, "Impurity-based importance of each input, largest first.");
const PKL: OutputSpec =
    out("model.pkl", PICKLE, "The fitted estimator (a pickle), with its inputs and classes.");

pub(super) const LOGISTIC: MethodSpec = MethodSpec {
    name: "sklearn.logistic_regression",
    summary: "Binary or multinomial logistic regression (scikit-learn, lbfgs) with a hold-out split and cross-validation.",
    params: &[
        Y_CLASS,
        X,
        bounded(
            param("C", ParamKind::Number, "Inverse L2 regularisation strength (with penalty l2)."),
            "1.0",
            Some(1e-12),
            Some(1e12),
        ),
        bounded(param("penalty", ParamKind::Text, "`l2` or `none`."), "\"l2\"", None, None),
        bounded(
            param("standardize", ParamKind::Boolean, "Standardise the inputs on the training rows first."),
            "false",
            None,
            None,
        ),
        TEST_SIZE,
        CV_FOLDS,
        RANDOM_STATE,
        bounded(
            param("max_iter", ParamKind::Integer, "The most lbfgs iterations."),
            "1000",
            Some(1.0),
            Some(1e6),
        ),
    ],
    outputs: &[
        out(
            "model.json",
            JSON,
            "Classes, coefficients and intercepts per class, inputs and any standardisation.",
        ),
        out(
            "coefficients.csv",
            CSV,
            "Each class's coefficient of each input (also on the inputs' own scale).",
        ),
        METRICS_JSON,
        out(
            "plot.png",
            PNG,
            "The ROC curve (binary) or the confusion matrix (multiclass) on the hold-out rows.",
        ),
    ],
    model: Some(ModelSpec { file: "model.json" }),
    example: r#"{"y": "churned", "test_size": 0.25, "cv_folds": 5}"#,
    input: Input::Dataset,
    example_item: None,
    fan_out: None,
    python: Some(PythonCode {
        entry: "sk:logistic_regression",
        predict: Some("sk:predict"),
        needs: ML,
        base: "base-ml",
    }),
};

pub(super) const RANDOM_FOREST: MethodSpec = MethodSpec {
    name: "sklearn.random_forest",
    summary: "Random forest classifier or regressor (scikit-learn) with a hold-out split, cross-validation and importances.",
    params: &[
        Y_CLASS,
        TASK,
        X,
        bounded(
            param("n_estimators", ParamKind::Integer, "Trees in the forest."),
            "100",
            Some(1.0),
            Some(2000.0),
        ),
        bounded(
            param("max_depth", ParamKind::Integer, "The deepest a tree grows; 0: no limit."),
            "0",
            Some(0.0),
            Some(1000.0),
        ),
        bounded(
            param("min_samples_leaf", ParamKind::Integer, "The fewest rows in a leaf."),
            "1",
            Some(1.0),
            Some(100_000.0),
        ),
        TEST_SIZE,
        CV_FOLDS,
        RANDOM_STATE,
    ],
    outputs: &[PKL, IMPORTANCE, METRICS_JSON, out("plot.png", PNG, "The inputs' importances.")],
    model: Some(ModelSpec { file: "model.pkl" }),
    example: r#"{"y": "churned", "n_estimators": 200}"#,
    input: Input::Dataset,
    example_item: None,
    fan_out: None,
    python: Some(PythonCode {
        entry: "sk:random_forest",
        predict: Some("sk:predict"),
        needs: ML,
        base: "base-ml",
    }),
};

pub(super) const GRADIENT_BOOSTING: MethodSpec = MethodSpec {
    name: "sklearn.gradient_boosting",
    summary: "Gradient-boosted trees, classifier or regressor (scikit-learn), with a hold-out split and cross-validation.",
    params: &[
        Y_CLASS,
        TASK,
        X,
        bounded(
            param("learning_rate", ParamKind::Number, "Shrinkage of each tree's contribution."),
            "0.1",
            Some(1e-9),
            Some(10.0),
        ),
        bounded(
            param("n_estimators", ParamKind::Integer, "Boosting stages."),
            "100",
            Some(1.0),
            Some(2000.0),
        ),
        bounded(
            param("max_depth", ParamKind::Integer, "The depth of each tree."),
            "3",
            Some(1.0),
            Some(100.0),
        ),
        bounded(
            param("min_samples_leaf", ParamKind::Integer, "The fewest rows in a leaf."),
            "1",
            Some(1.0),
            Some(100_000.0),
        ),
        TEST_SIZE,
        CV_FOLDS,
        RANDOM_STATE,
    ],
    outputs: &[PKL, IMPORTANCE, METRICS_JSON, out("plot.png", PNG, "The inputs' importances.")],
    model: Some(ModelSpec { file: "model.pkl" }),
    example: r#"{"y": "churned", "learning_rate": 0.05}"#,
    input: Input::Dataset,
    example_item: None,
    fan_out: None,
    python: Some(PythonCode {
        entry: "sk:gradient_boosting",
        predict: Some("sk:predict"),
        needs: ML,
        base: "base-ml",
    }),
};

const BAYES: &[Package] = &[NUMPY, PANDAS, SCIPY, MATPLOTLIB];

pub(super) const MMM: MethodSpec = MethodSpec {
    name: "mmm.adstock_saturation",
    summary: "Marketing-mix model: geometric adstock and Hill saturation per channel, fitted by non-linear least squares (scipy) with non-negative effects.",
    params: &[
        required(param("y", ParamKind::Column, "Sales (or any outcome) per period.")),
        required(param("channels", ParamKind::Columns, "Spend per channel per period (non-negative).")),
        param(
            "time",
            ParamKind::AnyColumn,
            "Orders the periods (numbers or dates). Default: the file's order.",
        ),
        bounded(param("trend", ParamKind::Boolean, "Add a linear trend to the base."), "false", None, None),
        bounded(
            param("max_lag_decay", ParamKind::Number, "The largest adstock decay λ tried."),
            "0.9",
            Some(0.0),
            Some(0.95),
        ),
        bounded(
            param("restarts", ParamKind::Integer, "Starts of the optimiser (the best is kept)."),
            "5",
            Some(1.0),
            Some(50.0),
        ),
        bounded(
            param("random_state", ParamKind::Integer, "The seed of the random starts."),
            "0",
            Some(0.0),
            Some(4_294_967_295.0),
        ),
    ],
    outputs: &[
        out(
            "model.json",
            JSON,
            "Base, trend and each channel's decay, half-saturation, shape, effect, ROI and marginal ROI.",
        ),
        out("contributions.csv", CSV, "Per period: actual, fitted, base and each channel's contribution."),
        out(
            "roi.csv",
            CSV,
            "Per channel: spend, contribution, ROI, marginal ROI and the fitted curve's parameters.",
        ),
        out("plot.png", PNG, "Contributions stacked over time, with actual and fitted sales."),
    ],
    model: Some(ModelSpec { file: "model.json" }),
    example: r#"{"y": "sales", "channels": ["tv", "radio", "online"], "time": "week"}"#,
    input: Input::Dataset,
    example_item: None,
    fan_out: None,
    python: Some(PythonCode {
        entry: "mmm:adstock_saturation",
        predict: Some("mmm:predict"),
        needs: BAYES,
        base: "base-bayes",
    }),
};

pub(super) const CURVE_FIT: MethodSpec = MethodSpec {
    name: "sci.curve_fit",
    summary: "Fits a named curve (exponential, exponential_association, logistic, power, hill, michaelis_menten, gompertz) with scipy's curve_fit.",
    params: &[
        required(param("x", ParamKind::Column, "The predictor.")),
        required(param("y", ParamKind::Column, "The response.")),
        required(param(
            "family",
            ParamKind::Text,
            "exponential, exponential_association, logistic, power, hill, michaelis_menten or gompertz.",
        )),
        param(
            "start",
            ParamKind::Text,
            "Starting values, comma separated, in the family's order. Default: a grid guess.",
        ),
        param("sigma", ParamKind::Column, "Each row's uncertainty (weights 1/σ²)."),
    ],
    outputs: &[
        out("model.json", JSON, "The family, its parameters and their covariance, and the fit's statistics."),
        out("parameters.csv", CSV, "Each parameter's estimate, standard error and 95 % interval."),
        out("fitted.csv", CSV, "Each row's x, y, fitted value and residual."),
        out("plot.png", PNG, "The data and the fitted curve."),
    ],
    model: Some(ModelSpec { file: "model.json" }),
    example: r#"{"x": "x", "y": "y", "family": "exponential_association"}"#,
    input: Input::Dataset,
    example_item: None,
    fan_out: None,
    python: Some(PythonCode {
        entry: "sci:curve_fit",
        predict: Some("sci:predict"),
        needs: BAYES,
        base: "base-bayes",
    }),
};

pub(super) const FORECAST: &[Package] = &[NUMPY, PANDAS, SCIPY, STATSMODELS, MATPLOTLIB];

pub(super) const SERIES: ParamSpec =
    required(param("y", ParamKind::Column, "The series (numbers, no empty cells)."));
pub(super) const TIME: ParamSpec = param(
    "time",
    ParamKind::AnyColumn,
    "Orders the rows and labels the forecast (evenly spaced integers or dates). Default: the file's order.",
);
pub(super) const HORIZON: ParamSpec =
    bounded(param("horizon", ParamKind::Integer, "Steps ahead to forecast."), "12", Some(1.0), Some(1000.0));
pub(super) const SEASON: ParamSpec = bounded(
    param("seasonal_periods", ParamKind::Integer, "Observations per season (12 for monthly data); 0: none."),
    "0",
    Some(0.0),
    Some(366.0),
);
const FORECAST_CSV: OutputSpec =
    out("forecast.csv", CSV, "Each step's forecast and 95 % prediction interval (with its time, given one).");
const FORECAST_PLOT: OutputSpec =
    out("plot.png", PNG, "The series, the fitted values and the forecast with its interval.");
const FORECAST_MODEL: OutputSpec = out(
    "model.json",
    JSON,
    "The fitted parameters and the forecast path with its interval, which endpoints serve by step.",
);

pub(super) const TREND: ParamSpec =
    bounded(param("trend", ParamKind::Text, "`none` or `add`."), "\"add\"", None, None);
pub(super) const SEASONAL: ParamSpec = bounded(
    param("seasonal", ParamKind::Text, "`none`, `add` or `mul` (with seasonal_periods ≥ 2)."),
    "\"add\"",
    None,
    None,
);
pub(super) const DAMPED: ParamSpec =
    bounded(param("damped", ParamKind::Boolean, "Damp the trend."), "false", None, None);

pub(super) const ETS: MethodSpec = MethodSpec {
    name: "ts.ets",
    summary: "Exponential smoothing (ETS, additive errors, maximum likelihood; statsmodels) with trend and seasonality.",
    params: &[SERIES, TIME, HORIZON, SEASON, TREND, SEASONAL, DAMPED],
    outputs: &[FORECAST_MODEL, FORECAST_CSV, FORECAST_PLOT],
    model: Some(ModelSpec { file: "model.json" }),
    example: r#"{"y": "passengers", "time": "month", "seasonal_periods": 12, "seasonal": "mul", "horizon": 24}"#,
    input: Input::Dataset,
    example_item: None,
    fan_out: None,
    python: Some(PythonCode {
        entry: "forecast:ets",
        predict: Some("forecast:predict"),
        needs: FORECAST,
        base: "base-forecast",
    }),
};

pub(super) const fn order(
    name: &'static str,
    default: &'static str,
    max: f64,
    doc: &'static str,
) -> ParamSpec {
    bounded(param(name, ParamKind::Integer, doc), default, Some(0.0), Some(max))
}

/// ARIMA's orders: p, d, q, then the seasonal P, D, Q.
pub(super) const ORDERS: [ParamSpec; 6] = [
    order("p", "1", 5.0, "Autoregressive order."),
    order("d", "1", 2.0, "Differences."),
    order("q", "1", 5.0, "Moving-average order."),
    order("P", "0", 5.0, "Seasonal autoregressive order."),
    order("D", "0", 2.0, "Seasonal differences."),
    order("Q", "0", 5.0, "Seasonal moving-average order."),
];
pub(super) const LOG: ParamSpec = bounded(
    param("log", ParamKind::Boolean, "Fit the log of the series (which must be positive)."),
    "false",
    None,
    None,
);

pub(super) const ARIMA: MethodSpec = MethodSpec {
    name: "ts.arima",
    summary: "Seasonal ARIMA by exact maximum likelihood (statsmodels SARIMAX), with forecasts and intervals.",
    params: &[
        SERIES, TIME, HORIZON, ORDERS[0], ORDERS[1], ORDERS[2], ORDERS[3], ORDERS[4], ORDERS[5], SEASON, LOG,
    ],
    outputs: &[
        FORECAST_MODEL,
        FORECAST_CSV,
        out("coefficients.csv", CSV, "Each coefficient's estimate, standard error, z and p-value."),
        FORECAST_PLOT,
    ],
    model: Some(ModelSpec { file: "model.json" }),
    example: r#"{"y": "passengers", "time": "month", "p": 0, "d": 1, "q": 1, "P": 0, "D": 1, "Q": 1, "seasonal_periods": 12, "log": true}"#,
    input: Input::Dataset,
    example_item: None,
    fan_out: None,
    python: Some(PythonCode {
        entry: "forecast:arima",
        predict: Some("forecast:predict"),
        needs: FORECAST,
        base: "base-forecast",
    }),
};

const COEFFICIENTS: OutputSpec =
    out("coefficients.csv", CSV, "Each term's estimate, standard error, t, p-value and 95 % interval.");

pub(super) const DID: MethodSpec = MethodSpec {
    name: "causal.did",
    summary: "Difference-in-differences by OLS (statsmodels) with robust or cluster-robust standard errors.",
    params: &[
        required(param("y", ParamKind::Column, "The outcome.")),
        required(param("treated", ParamKind::Column, "1 for the treated group, 0 for the control group.")),
        required(param("post", ParamKind::Column, "1 after the treatment began, 0 before.")),
        param(
            "cluster",
            ParamKind::AnyColumn,
            "Cluster-robust standard errors by this column (e.g. the unit).",
        ),
        param("covariates", ParamKind::Columns, "Numeric controls, entered linearly."),
        bounded(
            param("se", ParamKind::Text, "`hc1` (heteroskedasticity-robust) or `classical`."),
            "\"hc1\"",
            None,
            None,
        ),
    ],
    outputs: &[
        COEFFICIENTS,
        out(
            "summary.json",
            JSON,
            "The estimate with its standard error, t, p and 95 % interval; the cell means; n and clusters.",
        ),
        out("plot.png", PNG, "Both groups' means before and after, with the treated group's counterfactual."),
    ],
    model: None,
    example: r#"{"y": "outcome", "treated": "treated", "post": "post", "cluster": "unit"}"#,
    input: Input::Dataset,
    example_item: None,
    fan_out: None,
    python: Some(PythonCode { entry: "causal:did", predict: None, needs: FORECAST, base: "base-forecast" }),
};

pub(super) const ITS: MethodSpec = MethodSpec {
    name: "causal.interrupted_time_series",
    summary: "Interrupted time series by segmented regression (statsmodels), with Newey-West standard errors on request.",
    params: &[
        required(param("y", ParamKind::Column, "The outcome.")),
        required(param("time", ParamKind::AnyColumn, "Time (numbers or dates).")),
        required(param("intervention", ParamKind::Text, "The first time value of the intervention period.")),
        bounded(
            param("hac_lags", ParamKind::Integer, "Newey-West lags; 0: ordinary standard errors."),
            "0",
            Some(0.0),
            Some(100.0),
        ),
    ],
    outputs: &[
        COEFFICIENTS,
        out(
            "summary.json",
            JSON,
            "The level and slope changes with standard errors and intervals; the slopes before and after.",
        ),
        out("plot.png", PNG, "The series, both segments and the counterfactual."),
    ],
    model: None,
    example: r#"{"y": "visits", "time": "month", "intervention": "2024-01"}"#,
    input: Input::Dataset,
    example_item: None,
    fan_out: None,
    python: Some(PythonCode {
        entry: "causal:interrupted_time_series",
        predict: None,
        needs: FORECAST,
        base: "base-forecast",
    }),
};

/// Every Python package a method imports, once.
pub fn packages() -> Vec<Package> {
    let mut all: Vec<Package> =
        super::all().iter().filter_map(|m| m.python).flat_map(|p| p.needs.iter().copied()).collect();
    all.sort_by_key(|p| p.module);
    all.dedup();
    all
}

/// The Python methods an interpreter that imports only `found` cannot run,
/// each with the sentence a submit is refused with (naming what to install).
pub fn unavailable(
    found: &std::collections::BTreeSet<String>,
    interpreter: &str,
) -> std::collections::BTreeMap<String, String> {
    let mut out = std::collections::BTreeMap::new();
    for m in super::all() {
        let Some(code) = m.python else { continue };
        let missing: Vec<&Package> = code.needs.iter().filter(|p| !found.contains(p.module)).collect();
        if missing.is_empty() {
            continue;
        }
        let modules: Vec<&str> = missing.iter().map(|p| p.module).collect();
        let debian: Vec<&str> = missing.iter().map(|p| p.debian).collect();
        out.insert(
            m.name.to_owned(),
            format!(
                "method {} needs {}, which {interpreter} here cannot import: install it (on Debian: apt-get install {}) \
                 and start the platform again",
                m.name,
                modules.join(", "),
                debian.join(" ")
            ),
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_method_is_unavailable_exactly_when_a_package_it_needs_is_missing() {
        let every: std::collections::BTreeSet<String> =
            packages().iter().map(|p| p.module.to_owned()).collect();
        assert!(unavailable(&every, "/usr/bin/python3").is_empty());
        let mut no_sklearn = every.clone();
        no_sklearn.remove("sklearn");
        let missing = unavailable(&no_sklearn, "/usr/bin/python3");
        assert!(missing.keys().all(|m| m.starts_with("sklearn.")), "{missing:?}");
        let why = &missing["sklearn.logistic_regression"];
        assert!(why.contains("apt-get install python3-sklearn") && why.contains("/usr/bin/python3"), "{why}");
        assert!(!missing.contains_key("sci.curve_fit"));
    }

    #[test]
    fn every_python_method_names_its_entry_and_a_predict_when_it_makes_a_model() {
        for m in super::super::all() {
            let Some(code) = m.python else { continue };
            assert!(
                code.entry.split_once(':').is_some_and(|(a, b)| !a.is_empty() && !b.is_empty()),
                "{}",
                m.name
            );
            assert_eq!(
                m.model.is_some(),
                code.predict.is_some(),
                "{}: a model is served by its predict",
                m.name
            );
            let model = m.model.map(|s| s.file);
            assert!(model.is_none_or(|f| m.outputs.iter().any(|o| o.name == f)), "{}", m.name);
        }
    }
}
