"""Forecasting one series: the `ts` family of the platform's own methods.

`ts.ets` (entry `forecast:ets`) and `ts.arima` (entry `forecast:arima`) fit one
numeric column `y`, optionally ordered and labelled by a `time` column, and
forecast `horizon` steps past its end.  Both write `model.json` (read by
`forecast:predict`), `forecast.csv` and `plot.png`; `ts.arima` also writes
`coefficients.csv`.  `backtest_task` (entry `forecast:backtest_task`) is one
rolling origin of a backtest and `aggregate` / `backtest_aggregate_csv`
combine the origins' `errors.json`.

The series
----------
Rows whose `y` cell is empty are an error (a series with holes cannot be
fitted by these models without imputation, which is the user's choice).
With a `time` column the rows are sorted by it; it must hold integers (e.g.
years, evenly spaced) or dates (evenly spaced at a frequency pandas can infer:
daily, weekly, monthly, quarterly, yearly, ...), without repeats.  Its values
label the history and the forecast (the next `horizon` values of the same
spacing).  Without it the rows are taken in file order and steps are labelled
1..horizon only.  A horizon longer than the series (`horizon` > n) is refused.

ts.ets: statsmodels' ETSModel
-----------------------------
We use `statsmodels.tsa.exponential_smoothing.ets.ETSModel` (the innovations
state-space form of Hyndman et al., "Forecasting with Exponential Smoothing",
2008), not `holtwinters.ExponentialSmoothing`, because ETSModel is a
statistical model: it is fitted by maximum likelihood, so its AIC/BIC are
likelihood-based (comparable with ts.arima's on the same series), and it gives
prediction intervals (exact formulas for the all-additive models, simulation
with a fixed seed otherwise), which Holt-Winters' SSE fit does not.  The error
is additive.  `trend` none|add, `damped` (only with a trend), `seasonal`
none|add|mul used only when `seasonal_periods` >= 2 (its default `add` is what
a seasonal model gets when the user names only a period; with
`seasonal_periods` = 0 there is no seasonal component whatever `seasonal`
says).  `mul` needs y > 0.  Initial states are estimated with the smoothing
parameters (ETSModel's `initialization_method="estimated"`).  At least
max(10, 2 * seasonal_periods) observations are needed.

Interval: 95 % prediction interval.  ETS(A,*,N) and ETS(A,*,A) use the exact
variance formulas; ETS(A,*,M) (multiplicative seasonality) uses 1000 simulated
paths with random_state = 0 (so reruns agree).

ts.arima: statsmodels' SARIMAX
------------------------------
Order (p, d, q) x (P, D, Q, seasonal_periods), exact Gaussian likelihood by the
Kalman filter (diffuse initialisation of the integrated part), fitted by
L-BFGS.  A constant (mean) is included only when there is no differencing
(d = D = 0), as R's `arima` does; with differencing there is none.
`seasonal_periods` >= 2 is needed when P, D or Q is not 0 and is otherwise
ignored.  `log` fits the model to log(y) (y must be > 0); the forecast and its
interval are then exp() of the log-scale ones (the forecast is the median, not
the mean, of the implied log-normal).  Standard errors come from the numerical
Hessian of the log-likelihood (`cov_type="approx"`), as R's `arima` computes
them.  Coefficients, sigma2, aic and bic are on the scale fitted (log y when
`log`).  Needs n >= 10 and n - d - D*s >= p + q + P + Q + 3.

Metrics
-------
aic, bic (both methods; likelihood-based), rmse (in-sample one-step-ahead
errors on the scale of y; for ARIMA the first d + D*s observations, which the
diffuse initialisation cannot predict, are left out), mape (ts.ets only, in %,
reported only when no y is 0), sigma2 (ts.arima: the innovation variance).

model.json and predict
----------------------
`model.json` holds the forecast path up to `horizon` with its 95 % interval
(`forecast`: a list of {"step", "time"?, "forecast", "lower_95", "upper_95"}),
which is what `predict` serves, plus, to make the model readable, the
specification, the fitted parameters and (ETS) the final states, from which
`ets_point_forecast` recomputes the point forecasts for any step.  `predict`
takes rows {"step": k} with 1 <= k <= horizon and returns, per row,
{"step", "time" (when the series had one), "forecast", "lower_95",
"upper_95"}.  A row without "step" is a KeyError, a step that is not an
integer in 1..horizon a ValueError.

Backtest
--------
`backtest_task(ctx)` runs one origin of a rolling-origin backtest.  With n
observations, K = `origins`, h = `horizon` and s = `step`, origin i
(i = ctx.task_index, 0 <= i < K) fits `method` (ets|arima, with that method's
parameters) to the first

    n_i = n - h - (K - 1 - i) * s

observations and forecasts y[n_i], ..., y[n_i + h - 1] (0-based), so the last
origin (i = K - 1) forecasts the last h observations and each earlier origin
is s observations earlier.  n_0 must leave enough data to fit (the method's
minimum above).  It writes `errors.json`:
{"task_index", "origins", "origin", "origin_time", "method", "horizon",
"steps": [{"step", "time"?, "actual", "forecast", "error"}]} with
error = actual - forecast, and reports the origin's rmse (and mape).
`aggregate(errors_by_task)` (a list of those dicts, or a dict of them by task
index) gives per step and overall n, mean error (bias), MAE, RMSE and MAPE
(100 * mean(|error| / |actual|); None when some actual is 0);
`backtest_aggregate_csv(summary, path)` writes that as CSV.
"""

import csv
import math
import re
import warnings

import numpy as np
import pandas as pd

__all__ = [
    "ets",
    "arima",
    "predict",
    "backtest_task",
    "aggregate",
    "backtest_aggregate_csv",
    "ets_point_forecast",
]

INTERVAL = 0.95
ETS_SIM_REPETITIONS = 1000
ETS_SIM_SEED = 0
MIN_OBS = 10


# --------------------------------------------------------------------------
# The series


class Series:
    """The cleaned series: values in time order and, when there is a time
    column, its labels and how to continue them."""

    def __init__(self, y, kind=None, times=None, fmt=None, freq=None, spacing=None):
        self.y = y  # float ndarray
        self.kind = kind  # None | "int" | "date"
        self.times = times  # list (ints or Timestamps) or None
        self.fmt = fmt  # date format for labels
        self.freq = freq  # pandas offset alias (dates)
        self.spacing = spacing  # integer step (ints)

    @property
    def n(self):
        return len(self.y)

    def label(self, t):
        if self.kind == "date":
            return t.strftime(self.fmt)
        if self.kind == "int":
            return int(t)
        return None

    def labels(self):
        if self.kind is None:
            return None
        return [self.label(t) for t in self.times]

    def future(self, h):
        """Labels of the h steps after the end (None without a time column)."""
        if self.kind is None:
            return [None] * h
        last = self.times[-1]
        if self.kind == "int":
            return [int(last + k * self.spacing) for k in range(1, h + 1)]
        rng = pd.date_range(start=last, periods=h + 1, freq=self.freq)
        return [self.label(t) for t in rng[1:]]

    def head(self, m):
        """The first m observations as a Series of their own."""
        return Series(
            self.y[:m],
            self.kind,
            None if self.times is None else self.times[:m],
            self.fmt,
            self.freq,
            self.spacing,
        )

    def plot_x(self):
        if self.kind == "date":
            return list(pd.DatetimeIndex(self.times).to_pydatetime())
        if self.kind == "int":
            return list(self.times)
        return list(range(1, self.n + 1))

    def plot_future_x(self, h):
        if self.kind == "date":
            rng = pd.date_range(start=self.times[-1], periods=h + 1, freq=self.freq)
            return list(rng[1:].to_pydatetime())
        if self.kind == "int":
            return [self.times[-1] + k * self.spacing for k in range(1, h + 1)]
        return list(range(self.n + 1, self.n + h + 1))


def _opt_column(params, name):
    v = params.get(name)
    if v is None or (isinstance(v, str) and not v.strip()):
        return None
    return v


def _column(df, params, name):
    col = params.get(name)
    if col is None or (isinstance(col, str) and not col.strip()):
        raise ValueError(f"parameter {name!r} is required: name a column of the dataset")
    if col not in df.columns:
        raise ValueError(
            f"parameter {name!r}: column {col!r} is not in the dataset (its columns: {list(df.columns)})"
        )
    return col


def _numeric(series, param, col):
    """A column as floats, or a ValueError naming the parameter."""
    if series.isna().any():
        k = int(series.isna().sum())
        raise ValueError(
            f"parameter {param!r}: column {col!r} has {k} empty cell(s); fill or remove those rows"
        )
    if not (pd.api.types.is_numeric_dtype(series) and not pd.api.types.is_bool_dtype(series)):
        conv = pd.to_numeric(series, errors="coerce")
        bad = series[conv.isna()]
        raise ValueError(
            f"parameter {param!r}: column {col!r} must be numeric; "
            f"{len(bad)} value(s) are not numbers, e.g. {str(bad.iloc[0])!r}"
        )
    v = series.to_numpy(dtype=float)
    if not np.all(np.isfinite(v)):
        raise ValueError(f"parameter {param!r}: column {col!r} has infinite values")
    return v


_MONTH = re.compile(r"^\s*\d{4}-\d{1,2}\s*$")


def _parse_time(raw, col):
    """(kind, values sortable, fmt) for a time column, or a ValueError naming `time`."""
    if raw.isna().any():
        raise ValueError(
            f"parameter 'time': column {col!r} has {int(raw.isna().sum())} empty cell(s); fill or remove those rows"
        )
    if pd.api.types.is_numeric_dtype(raw) and not pd.api.types.is_bool_dtype(raw):
        v = raw.to_numpy(dtype=float)
        if not np.all(np.isfinite(v)) or np.any(v != np.round(v)):
            raise ValueError(
                f"parameter 'time': column {col!r} is numeric but not whole numbers; "
                "use integers (e.g. 1, 2, 3 or years) or dates"
            )
        return "int", v.astype(np.int64), None
    text = raw.astype(str)
    try:
        t = pd.to_datetime(text)
    except (ValueError, TypeError, OverflowError) as e:
        raise ValueError(
            f"parameter 'time': column {col!r} holds neither integers nor dates "
            f"(e.g. {text.iloc[0]!r}): {e}"
        ) from None
    if getattr(t.dt, "tz", None) is not None:
        t = t.dt.tz_convert(None)
    if text.map(lambda s: bool(_MONTH.match(s))).all():
        fmt = "%Y-%m"
    elif (t == t.dt.normalize()).all():
        fmt = "%Y-%m-%d"
    else:
        fmt = "%Y-%m-%dT%H:%M:%S"
    return "date", t, fmt


def load_series(df, params):
    """The series named by params `y` (and optional `time`), sorted and checked."""
    ycol = _column(df, params, "y")
    y = _numeric(df[ycol], "y", ycol)
    tcol = _opt_column(params, "time")
    if tcol is None:
        return Series(y)
    if tcol not in df.columns:
        raise ValueError(
            f"parameter 'time': column {tcol!r} is not in the dataset (its columns: {list(df.columns)})"
        )
    kind, t, fmt = _parse_time(df[tcol], tcol)
    order = np.argsort(np.asarray(t), kind="stable")
    y = y[order]
    if kind == "int":
        t = t[order]
        if len(t) > 1:
            d = np.diff(t)
            if np.any(d == 0):
                raise ValueError(f"parameter 'time': column {tcol!r} repeats the value {int(t[1:][d == 0][0])}")
            if np.any(d != d[0]):
                raise ValueError(
                    f"parameter 'time': column {tcol!r} is not evenly spaced (steps {sorted(set(d.tolist()))[:5]}); "
                    "these models need one observation per period (write dates as YYYY-MM or YYYY-MM-DD)"
                )
            spacing = int(d[0])
        else:
            spacing = 1
        return Series(y, "int", [int(v) for v in t], spacing=spacing)
    idx = pd.DatetimeIndex(t.iloc[order].to_numpy())
    if idx.has_duplicates:
        raise ValueError(f"parameter 'time': column {tcol!r} repeats the date {idx[idx.duplicated()][0]}")
    freq = pd.infer_freq(idx) if len(idx) >= 3 else None
    if freq is None:
        raise ValueError(
            f"parameter 'time': the dates in column {tcol!r} are not evenly spaced at a frequency "
            "that can be inferred (daily, weekly, monthly, quarterly, yearly, ...); "
            "these models need one observation per period"
        )
    return Series(y, "date", list(idx), fmt=fmt, freq=freq)


# --------------------------------------------------------------------------
# Parameters


def _int_param(params, name, default, lo, hi):
    v = params.get(name, default)
    if v is None:
        v = default
    if v is None:
        raise ValueError(f"parameter {name!r} is required: an integer between {lo} and {hi}")
    if isinstance(v, bool) or not float(v).is_integer():
        raise ValueError(f"parameter {name!r} must be an integer, not {v!r}")
    v = int(v)
    if not lo <= v <= hi:
        raise ValueError(f"parameter {name!r} must be between {lo} and {hi}, not {v}")
    return v


def _text_param(params, name, default, allowed):
    v = params.get(name, default)
    if v is None:
        v = default
    if v is None:
        raise ValueError(f"parameter {name!r} is required: one of {'|'.join(allowed)}")
    v = str(v).strip().lower()
    if v not in allowed:
        raise ValueError(f"parameter {name!r} must be one of {'|'.join(allowed)}, not {v!r}")
    return v


def _bool_param(params, name, default):
    v = params.get(name, default)
    if v is None:
        return default
    if isinstance(v, bool):
        return v
    if isinstance(v, str) and v.strip().lower() in ("true", "false"):
        return v.strip().lower() == "true"
    if v in (0, 1):
        return bool(v)
    raise ValueError(f"parameter {name!r} must be true or false, not {v!r}")


def ets_spec(params):
    """The ETS specification the params describe (checked)."""
    m = _int_param(params, "seasonal_periods", 0, 0, 366)
    trend = _text_param(params, "trend", "add", ("none", "add"))
    seasonal = _text_param(params, "seasonal", "add", ("none", "add", "mul"))
    damped = _bool_param(params, "damped", False)
    if m == 1:
        raise ValueError("parameter 'seasonal_periods' must be 0 (no seasonality) or at least 2, not 1")
    if m == 0 or seasonal == "none":
        seasonal, m = "none", 0
    if damped and trend == "none":
        raise ValueError("parameter 'damped': a damped trend needs trend = add; set damped to false or trend to add")
    return {"trend": trend, "damped": damped, "seasonal": seasonal, "seasonal_periods": m, "error": "add"}


def arima_spec(params):
    """The SARIMA specification the params describe (checked)."""
    p = _int_param(params, "p", 1, 0, 5)
    d = _int_param(params, "d", 1, 0, 2)
    q = _int_param(params, "q", 1, 0, 5)
    P = _int_param(params, "P", 0, 0, 5)
    D = _int_param(params, "D", 0, 0, 2)
    Q = _int_param(params, "Q", 0, 0, 5)
    s = _int_param(params, "seasonal_periods", 0, 0, 366)
    log = _bool_param(params, "log", False)
    if P or D or Q:
        if s < 2:
            raise ValueError(
                "parameter 'seasonal_periods' must be at least 2 when P, D or Q is not 0 "
                f"(P={P}, D={D}, Q={Q}, seasonal_periods={s})"
            )
    else:
        s = 0
    return {
        "order": [p, d, q],
        "seasonal_order": [P, D, Q, s],
        "trend": "c" if d == 0 and D == 0 else "n",
        "log": log,
    }


def _min_obs_ets(spec):
    return max(MIN_OBS, 2 * spec["seasonal_periods"])


def _min_obs_arima(spec):
    p, d, q = spec["order"]
    P, D, Q, s = spec["seasonal_order"]
    return max(MIN_OBS, d + D * s + p + q + P + Q + 3)


def _check_length(series, spec, method, what="the series"):
    need = _min_obs_ets(spec) if method == "ets" else _min_obs_arima(spec)
    if series.n < need:
        raise ValueError(
            f"parameter 'y': {what} has {series.n} observation(s) but this {method} model needs at least {need}"
            + (" (two full seasons)" if method == "ets" and spec["seasonal_periods"] else "")
        )


def _check_positive(series, spec, method):
    if method == "ets" and spec["seasonal"] == "mul" and np.any(series.y <= 0):
        raise ValueError("parameter 'seasonal': multiplicative seasonality needs y > 0; use seasonal = add")
    if method == "arima" and spec["log"] and np.any(series.y <= 0):
        raise ValueError("parameter 'log': log needs every y > 0; set log to false")


# --------------------------------------------------------------------------
# Fitting


def _fit_ets(y, spec):
    from statsmodels.tsa.exponential_smoothing.ets import ETSModel

    m = spec["seasonal_periods"]
    model = ETSModel(
        pd.Series(np.asarray(y, dtype=float)),
        error="add",
        trend=None if spec["trend"] == "none" else "add",
        damped_trend=spec["damped"],
        seasonal=None if spec["seasonal"] == "none" else spec["seasonal"],
        seasonal_periods=m if m else None,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return model.fit(disp=False)


def _ets_path(res, n, h):
    """(mean, lower, upper) arrays of the h-step forecast."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pred = res.get_prediction(
            start=n,
            end=n + h - 1,
            simulate_repetitions=ETS_SIM_REPETITIONS,
            random_state=ETS_SIM_SEED,
        )
        frame = pred.summary_frame(alpha=1 - INTERVAL)
    return (
        frame["mean"].to_numpy(dtype=float),
        frame["pi_lower"].to_numpy(dtype=float),
        frame["pi_upper"].to_numpy(dtype=float),
        pred.method,
    )


def _fit_arima(y, spec):
    from statsmodels.tsa.statespace.sarimax import SARIMAX

    z = np.log(y) if spec["log"] else np.asarray(y, dtype=float)
    P, D, Q, s = spec["seasonal_order"]
    model = SARIMAX(
        z,
        order=tuple(spec["order"]),
        seasonal_order=(P, D, Q, s),
        trend=spec["trend"],
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return model.fit(disp=False, cov_type="approx")


def _arima_path(res, h, log):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fc = res.get_forecast(steps=h)
        mean = np.asarray(fc.predicted_mean, dtype=float)
        ci = np.asarray(fc.conf_int(alpha=1 - INTERVAL), dtype=float)
    lo, hi = ci[:, 0], ci[:, 1]
    if log:
        return np.exp(mean), np.exp(lo), np.exp(hi)
    return mean, lo, hi


def _arima_fitted(res, log):
    """In-sample one-step predictions on the scale of y, and how many leading
    observations they cannot predict (the diffuse burn-in)."""
    fitted = np.asarray(res.fittedvalues, dtype=float)
    if log:
        fitted = np.exp(fitted)
    return fitted, int(res.loglikelihood_burn)


def _rmse(err):
    err = np.asarray(err, dtype=float)
    return float(np.sqrt(np.mean(err**2)))


def _mape(actual, err):
    actual = np.asarray(actual, dtype=float)
    if np.any(actual == 0):
        return None
    return float(100.0 * np.mean(np.abs(np.asarray(err, dtype=float)) / np.abs(actual)))


def _finite(x):
    x = float(x)
    return x if math.isfinite(x) else None


def _fit_forecast(method, spec, series, h):
    """Fits `method` to `series` and forecasts h steps: (mean, lower, upper, res)."""
    if method == "ets":
        res = _fit_ets(series.y, spec)
        mean, lo, hi, _ = _ets_path(res, series.n, h)
    else:
        res = _fit_arima(series.y, spec)
        mean, lo, hi = _arima_path(res, h, spec["log"])
    return mean, lo, hi, res


# --------------------------------------------------------------------------
# Outputs


def _forecast_rows(series, mean, lo, hi):
    labels = series.future(len(mean))
    rows = []
    for k in range(len(mean)):
        row = {"step": k + 1}
        if series.kind is not None:
            row["time"] = labels[k]
        row["forecast"] = float(mean[k])
        row["lower_95"] = _finite(lo[k])
        row["upper_95"] = _finite(hi[k])
        rows.append(row)
    return rows


def _write_forecast_csv(path, series, rows):
    cols = ["step"] + (["time"] if series.kind is not None else []) + ["forecast", "lower_95", "upper_95"]
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(cols)
        for r in rows:
            w.writerow(["" if r.get(c) is None else _fmt(r[c]) for c in cols])


def _fmt(v):
    if isinstance(v, float):
        return repr(v)
    return str(v)


def _plot(path, series, fitted, mean, lo, hi, title, fitted_from=0):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 4.5))
    try:
        x = series.plot_x()
        fx = series.plot_future_x(len(mean))
        ax.plot(x, series.y, color="#1f77b4", lw=1.4, label="observed")
        if fitted is not None:
            ax.plot(x[fitted_from:], fitted[fitted_from:], color="#7f7f7f", lw=0.9, ls=":", label="fitted (one step)")
        ax.plot(fx, mean, color="#d62728", lw=1.6, label="forecast")
        okb = np.isfinite(lo) & np.isfinite(hi)
        if okb.any():
            ax.fill_between(
                [fx[i] for i in range(len(fx)) if okb[i]],
                lo[okb],
                hi[okb],
                color="#d62728",
                alpha=0.18,
                lw=0,
                label="95% prediction interval",
            )
        ax.set_title(title)
        ax.set_xlabel("time" if series.kind else "observation")
        ax.legend(loc="upper left", fontsize=8)
        if series.kind == "date":
            fig.autofmt_xdate()
        fig.tight_layout()
        fig.savefig(path, dpi=100)
    finally:
        plt.close(fig)


def _history_block(series):
    out = {"n": series.n, "time_kind": series.kind}
    if series.kind is not None:
        out["first_time"] = series.label(series.times[0])
        out["last_time"] = series.label(series.times[-1])
        if series.kind == "date":
            out["freq"] = series.freq
        else:
            out["spacing"] = series.spacing
    return out


def _horizon(params, series):
    h = _int_param(params, "horizon", 12, 1, 1000)
    if h > series.n:
        raise ValueError(
            f"parameter 'horizon': {h} steps is longer than the series ({series.n} observations); "
            f"use a horizon of at most {series.n}"
        )
    return h


# --------------------------------------------------------------------------
# ts.ets


def ets(ctx):
    """ts.ets: exponential smoothing (ETSModel, additive error)."""
    params = ctx.params
    spec = ets_spec(params)
    series = load_series(ctx.read_csv(), params)
    h = _horizon(params, series)
    _check_length(series, spec, "ets")
    _check_positive(series, spec, "ets")
    ctx.progress(0.1, "fitting ETS")

    res = _fit_ets(series.y, spec)
    mean, lo, hi, interval_method = _ets_path(res, series.n, h)
    ctx.progress(0.7, "writing outputs")

    fitted = np.asarray(res.fittedvalues, dtype=float)
    err = series.y - fitted
    rmse = _rmse(err)
    mape = _mape(series.y, err)

    states = np.asarray(res.states, dtype=float)
    final = {"level": float(states[-1, 0])}
    if spec["trend"] != "none":
        final["trend"] = float(states[-1, 1])
    m = spec["seasonal_periods"]
    if m:
        # the last m seasonal states, oldest first: step k uses seasonal[(k - 1) % m]
        final["seasonal"] = [float(v) for v in states[-m:, -1]]
    rows = _forecast_rows(series, mean, lo, hi)
    model = {
        "kind": "ts.ets",
        "format": 1,
        "spec": spec,
        "model_name": res.model.short_name,
        "params": {name: float(v) for name, v in zip(res.param_names, res.params)},
        "final_states": final,
        "history": _history_block(series),
        "interval": {"level": INTERVAL, "method": interval_method},
        "horizon": h,
        "forecast": rows,
        "fit": {
            "aic": _finite(res.aic),
            "bic": _finite(res.bic),
            "llf": _finite(res.llf),
            "rmse": rmse,
            "mape": mape,
            "converged": bool(res.mle_retvals.get("converged", True)) if isinstance(res.mle_retvals, dict) else True,
        },
    }
    ctx.write_json("model.json", model)
    _write_forecast_csv(ctx.output_path("forecast.csv"), series, rows)
    _plot(ctx.output_path("plot.png"), series, fitted, mean, lo, hi, f"ETS {res.model.short_name} forecast")

    for name in ("aic", "bic"):
        if model["fit"][name] is not None:
            ctx.metric(name, model["fit"][name])
    ctx.metric("rmse", rmse)
    if mape is not None:
        ctx.metric("mape", mape)
    ctx.progress(1.0, "done")


def ets_point_forecast(model, steps):
    """Point forecasts for steps 1..steps from an ets model.json's parameters
    and final states (no refit): level + damped trend sum, then the seasonal
    state of the same season added (add) or multiplied (mul)."""
    spec = model["spec"]
    st = model["final_states"]
    phi = model["params"].get("damping_trend", 1.0) if spec["damped"] else 1.0
    out = []
    for k in range(1, steps + 1):
        v = st["level"]
        if spec["trend"] != "none":
            bsum = sum(phi**i for i in range(1, k + 1)) if spec["damped"] else k
            v = v + bsum * st["trend"]
        if spec["seasonal_periods"]:
            s = st["seasonal"][(k - 1) % spec["seasonal_periods"]]
            v = v * s if spec["seasonal"] == "mul" else v + s
        out.append(float(v))
    return out


# --------------------------------------------------------------------------
# ts.arima


def arima(ctx):
    """ts.arima: seasonal ARIMA (statsmodels SARIMAX)."""
    params = ctx.params
    spec = arima_spec(params)
    series = load_series(ctx.read_csv(), params)
    h = _horizon(params, series)
    _check_length(series, spec, "arima")
    _check_positive(series, spec, "arima")
    ctx.progress(0.1, "fitting ARIMA")

    res = _fit_arima(series.y, spec)
    mean, lo, hi = _arima_path(res, h, spec["log"])
    ctx.progress(0.7, "writing outputs")

    fitted, burn = _arima_fitted(res, spec["log"])
    err = series.y[burn:] - fitted[burn:]
    rmse = _rmse(err)
    names = list(res.param_names)
    est = np.asarray(res.params, dtype=float)
    se = np.asarray(res.bse, dtype=float)
    sigma2 = float(est[names.index("sigma2")])

    rows = _forecast_rows(series, mean, lo, hi)
    model = {
        "kind": "ts.arima",
        "format": 1,
        "spec": spec,
        "params": {n_: float(v) for n_, v in zip(names, est)},
        "std_errors": {n_: _finite(v) for n_, v in zip(names, se)},
        "history": _history_block(series),
        "interval": {"level": INTERVAL, "scale": "exp of log-scale interval" if spec["log"] else "y"},
        "horizon": h,
        "forecast": rows,
        "fit": {
            "aic": _finite(res.aic),
            "bic": _finite(res.bic),
            "llf": _finite(res.llf),
            "sigma2": sigma2,
            "rmse": rmse,
            "rmse_from_observation": burn + 1,
            "converged": bool(res.mle_retvals.get("converged", True)) if isinstance(res.mle_retvals, dict) else True,
        },
    }
    ctx.write_json("model.json", model)
    _write_forecast_csv(ctx.output_path("forecast.csv"), series, rows)
    with open(ctx.output_path("coefficients.csv"), "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["name", "estimate", "std_error", "z", "p_value"])
        zs = np.asarray(res.zvalues, dtype=float)
        ps = np.asarray(res.pvalues, dtype=float)
        for i, n_ in enumerate(names):
            w.writerow([n_, repr(float(est[i]))] + [("" if not math.isfinite(v) else repr(float(v))) for v in (se[i], zs[i], ps[i])])
    p_, d_, q_ = spec["order"]
    P_, D_, Q_, s_ = spec["seasonal_order"]
    title = f"ARIMA({p_},{d_},{q_})" + (f"({P_},{D_},{Q_}){s_}" if s_ else "") + (" on log y" if spec["log"] else "")
    _plot(ctx.output_path("plot.png"), series, fitted, mean, lo, hi, title, fitted_from=burn)

    for name in ("aic", "bic"):
        if model["fit"][name] is not None:
            ctx.metric(name, model["fit"][name])
    ctx.metric("sigma2", sigma2)
    ctx.metric("rmse", rmse)
    ctx.progress(1.0, "done")


# --------------------------------------------------------------------------
# predict


def predict(model, rows):
    """Serves a ts.ets or ts.arima model.json: rows {"step": k}, 1 <= k <= horizon."""
    if not isinstance(model, dict) or "forecast" not in model:
        raise ValueError("model is not a ts.ets / ts.arima model.json (no 'forecast')")
    path = model["forecast"]
    H = len(path)
    out = []
    for i, row in enumerate(rows):
        if not isinstance(row, dict) or "step" not in row:
            raise KeyError(f"row {i}: missing 'step' (give {{\"step\": k}} with k in 1..{H})")
        k = row["step"]
        if isinstance(k, str):
            try:
                k = float(k.strip())
            except ValueError:
                raise ValueError(f"row {i}: 'step' must be an integer in 1..{H}, not {row['step']!r}") from None
        if isinstance(k, bool) or not isinstance(k, (int, float)) or not float(k).is_integer():
            raise ValueError(f"row {i}: 'step' must be an integer in 1..{H}, not {row['step']!r}")
        k = int(k)
        if not 1 <= k <= H:
            raise ValueError(
                f"row {i}: 'step' {k} is beyond what the model holds: it was fitted with horizon {H}, "
                f"so step must be in 1..{H}"
            )
        out.append(dict(path[k - 1]))
    return out


# --------------------------------------------------------------------------
# Backtest


def backtest_origin(n, horizon, origins, step, i):
    """n_i, the number of observations origin i (0-based) is fitted on."""
    return n - horizon - (origins - 1 - i) * step


def backtest_task(ctx):
    """One origin (ctx.task_index) of a rolling-origin backtest: writes errors.json."""
    params = ctx.params
    method = _text_param(params, "method", None, ("ets", "arima"))
    spec = ets_spec(params) if method == "ets" else arima_spec(params)
    K = _int_param(params, "origins", None, 1, 200)
    s = _int_param(params, "step", 1, 1, 1000)
    h = _int_param(params, "horizon", 12, 1, 1000)
    i = int(getattr(ctx, "task_index", 0))
    count = int(getattr(ctx, "task_count", 1))
    if count not in (1, K):
        raise ValueError(f"parameter 'origins' is {K} but this backtest runs {count} tasks; they must agree")
    if not 0 <= i < K:
        raise ValueError(f"task index {i} is outside 0..{K - 1} (parameter 'origins' = {K})")
    series = load_series(ctx.read_csv(), params)
    n0 = backtest_origin(series.n, h, K, s, 0)
    need = _min_obs_ets(spec) if method == "ets" else _min_obs_arima(spec)
    if n0 < need:
        raise ValueError(
            f"parameter 'origins': with {series.n} observations, horizon {h}, step {s} and {K} origins the "
            f"first origin keeps only {n0} observation(s) to fit, but this {method} model needs {need}; "
            "use fewer origins, a smaller step or a shorter horizon"
        )
    ni = backtest_origin(series.n, h, K, s, i)
    train = series.head(ni)
    # Only what an origin fits on must suit the model: a later value that does
    # not fails the origins that fit on it, not the ones before it.
    try:
        _check_positive(train, spec, method)
    except ValueError as e:
        raise ValueError(f"origin {i + 1} of {K} (fitted on the first {ni} observations): {e}") from None
    ctx.progress(0.1, f"origin {i + 1} of {K}: fitting on {ni} observations")
    mean, _, _, _ = _fit_forecast(method, spec, train, h)
    actual = series.y[ni : ni + h]
    labels = series.labels()
    steps = []
    for k in range(h):
        row = {"step": k + 1}
        if labels is not None:
            row["time"] = labels[ni + k]
        row["actual"] = float(actual[k])
        row["forecast"] = float(mean[k])
        row["error"] = float(actual[k] - mean[k])
        steps.append(row)
    doc = {
        "task_index": i,
        "origins": K,
        "step_between_origins": s,
        "origin": ni,
        "origin_time": None if labels is None else labels[ni - 1],
        "method": method,
        "horizon": h,
        "steps": steps,
    }
    ctx.write_json("errors.json", doc)
    err = actual - mean
    ctx.metric("rmse", _rmse(err))
    mape = _mape(actual, err)
    if mape is not None:
        ctx.metric("mape", mape)
    ctx.progress(1.0, "done")


def _summary(actual, err):
    actual = np.asarray(actual, dtype=float)
    err = np.asarray(err, dtype=float)
    return {
        "n": int(len(err)),
        "mean_error": float(np.mean(err)),
        "mae": float(np.mean(np.abs(err))),
        "rmse": _rmse(err),
        "mape": _mape(actual, err),
    }


def aggregate(errors_by_task):
    """Combines backtest tasks' errors.json (a list, or a dict by task index):
    per horizon step and overall n, mean_error, mae, rmse and mape (%; None when
    some actual is 0).  error = actual - forecast."""
    tasks = list(errors_by_task.values()) if isinstance(errors_by_task, dict) else list(errors_by_task)
    if not tasks:
        raise ValueError("no backtest tasks to aggregate")
    by_step = {}
    all_a, all_e = [], []
    for t in tasks:
        for r in t["steps"]:
            a, e = float(r["actual"]), float(r["error"])
            by_step.setdefault(int(r["step"]), ([], []))
            by_step[int(r["step"])][0].append(a)
            by_step[int(r["step"])][1].append(e)
            all_a.append(a)
            all_e.append(e)
    per_step = []
    for k in sorted(by_step):
        a, e = by_step[k]
        row = {"step": k}
        row.update(_summary(a, e))
        per_step.append(row)
    return {"tasks": len(tasks), "per_step": per_step, "overall": _summary(all_a, all_e)}


def backtest_aggregate_csv(summary, path):
    """Writes aggregate()'s result as CSV: one row per step, then `overall`."""
    cols = ["step", "n", "mean_error", "mae", "rmse", "mape"]
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(cols)
        rows = list(summary["per_step"]) + [dict(summary["overall"], step="overall")]
        for r in rows:
            w.writerow(["" if r.get(c) is None else _fmt(r[c]) for c in cols])
    return path
