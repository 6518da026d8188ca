//! The fan-out parents: methods whose run is split into children, the
//! tasks of one execution, each running the method's Python entry on its
//! share of the work (its task index is its child index), and whose own
//! outputs the platform folds from what the children wrote once every child
//! has succeeded ([`crate::fold`]).

use super::python::{
    CSV, DAMPED, FORECAST, HORIZON, LOG, MATPLOTLIB, NUMPY, ORDERS, PANDAS, SCIPY, SEASON, SEASONAL, SERIES,
    TIME, TREND, bounded, out, required,
};
use super::{Input, JSON, MethodSpec, OutputSpec, ParamKind, ParamSpec, PythonCode, param};

/// How a fan-out parent's run is split and folded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct FanOut {
    /// The integer parameter that says how many children a run has.
    pub children: &'static str,
    /// The output of each child that the fold reads (one of the method's outputs).
    pub result: &'static str,
    pub fold: Fold,
    /// What the fold writes: the parent's own outputs, beside its children's.
    pub outputs: &'static [OutputSpec],
}

/// Which fold makes a parent's outputs from its children's results.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Fold {
    /// Forecast errors per origin → accuracy per horizon step.
    Backtest,
    /// Rank statistics per simulation → histograms and a uniformity test.
    Sbc,
}

const SVG: &str = "image/svg+xml";

pub(super) const BACKTEST: MethodSpec = MethodSpec {
    name: "ts.backtest",
    summary: "Rolling-origin backtest of ts.ets or ts.arima: one child per origin refits on the series up to \
              it and forecasts `horizon` steps; the run aggregates the errors into MAPE, RMSE, MAE and bias \
              per horizon step.",
    params: &[
        SERIES,
        TIME,
        required(param("method", ParamKind::Text, "The forecasting method to backtest: `ets` or `arima`.")),
        bounded(
            param(
                "origins",
                ParamKind::Integer,
                "How many forecast origins (the run's children). The last one forecasts the series' last \
                 `horizon` observations; each earlier one is `step` observations before the next.",
            ),
            "10",
            Some(2.0),
            Some(200.0),
        ),
        bounded(
            param("step", ParamKind::Integer, "Observations between consecutive origins."),
            "1",
            Some(1.0),
            Some(1000.0),
        ),
        HORIZON,
        SEASON,
        TREND,
        SEASONAL,
        DAMPED,
        ORDERS[0],
        ORDERS[1],
        ORDERS[2],
        ORDERS[3],
        ORDERS[4],
        ORDERS[5],
        LOG,
    ],
    outputs: &[out(
        "errors.json",
        JSON,
        "A child's origin, and each step's time, actual value, forecast and error (actual − forecast).",
    )],
    model: None,
    example: r#"{"y": "passengers", "time": "month", "method": "arima", "p": 0, "d": 1, "q": 1, "P": 0, "D": 1, "Q": 1, "seasonal_periods": 12, "log": true, "origins": 12, "horizon": 12}"#,
    input: Input::Dataset,
    example_item: None,
    fan_out: Some(FanOut {
        children: "origins",
        result: "errors.json",
        fold: Fold::Backtest,
        outputs: &[
            out(
                "backtest.csv",
                CSV,
                "Per horizon step, then `overall`: n, mean error, MAE, RMSE and MAPE (%; empty where an actual is 0).",
            ),
            out("backtest.json", JSON, "The same, with the origins the errors came from."),
        ],
    }),
    python: Some(PythonCode {
        entry: "forecast:backtest_task",
        predict: None,
        needs: FORECAST,
        base: "base-forecast",
    }),
};

const SBC_NEEDS: &[super::Package] = &[NUMPY, PANDAS, SCIPY, MATPLOTLIB];

const fn integer(
    name: &'static str,
    default: &'static str,
    range: (f64, f64),
    doc: &'static str,
) -> ParamSpec {
    bounded(param(name, ParamKind::Integer, doc), default, Some(range.0), Some(range.1))
}

pub(super) const SBC: MethodSpec = MethodSpec {
    name: "sbc",
    summary: "Simulation-based calibration (Talts et al. 2018) of a Bayesian model's inference: each child \
              draws parameters from the prior, simulates data on the dataset's design and ranks the true \
              values among posterior draws; the run folds the ranks into histograms and a chi-square test \
              of uniformity per parameter.",
    params: &[
        bounded(
            param(
                "model",
                ParamKind::Text,
                "`normal_mean` (a normal mean with known unit variance, as many observations as the \
                 dataset has rows) or `linear_regression` (conjugate normal–inverse-gamma, on the \
                 design of columns `x` with an intercept).",
            ),
            "\"normal_mean\"",
            None,
            None,
        ),
        param("x", ParamKind::Columns, "The design's columns, for `linear_regression`."),
        integer("simulations", "20", (2.0, 1000.0), "How many simulations (the run's children)."),
        integer(
            "draws",
            "99",
            (9.0, 9999.0),
            "Posterior draws per simulation; a rank lies in 0..draws. draws + 1 must be a multiple of bins.",
        ),
        integer(
            "bins",
            "10",
            (2.0, 100.0),
            "Histogram bins of the ranks (and cells of the uniformity test).",
        ),
        bounded(
            param(
                "posterior_scale",
                ParamKind::Number,
                "Multiplies the posterior's spread before drawing: 1 is the exact posterior; below 1 an \
                 over-confident inference, above 1 an under-confident one, which the test should flag.",
            ),
            "1.0",
            Some(0.01),
            Some(100.0),
        ),
        integer("seed", "0", (0.0, 4_294_967_295.0), "The seed; child i draws from the stream (seed, i)."),
    ],
    outputs: &[out(
        "ranks.json",
        JSON,
        "A child's true parameter values and their ranks among its posterior draws.",
    )],
    model: None,
    example: r#"{"model": "linear_regression", "x": ["x1", "x2"], "simulations": 40}"#,
    input: Input::Dataset,
    example_item: None,
    fan_out: Some(FanOut {
        children: "simulations",
        result: "ranks.json",
        fold: Fold::Sbc,
        outputs: &[
            out("ranks.csv", CSV, "Each simulation's rank of each parameter."),
            out(
                "sbc.json",
                JSON,
                "Per parameter: the histogram's counts, the chi-square statistic, its degrees of freedom and p-value.",
            ),
            out(
                "ranks.svg",
                SVG,
                "The rank histograms with the band 99 % of uniform histograms' bins fall in.",
            ),
        ],
    }),
    python: Some(PythonCode { entry: "sbc:simulate", predict: None, needs: SBC_NEEDS, base: "base-bayes" }),
};
