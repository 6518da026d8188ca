"""Quasi-experimental effect estimates: the `causal` family of the platform's
own methods.  Neither fits a servable model (no predict).

causal.did (entry `causal:did`)
-------------------------------
Two-group, two-period difference-in-differences by OLS (statsmodels):

    y = b0 + b1*treated + b2*post + b3*treated*post [+ covariates] + e

`treated` and `post` are columns holding only 0 and 1; the DiD estimate is b3,
the interaction.  Without covariates b3 equals the difference of the four
cell means, (treated_post - treated_pre) - (control_post - control_pre).
`covariates` (numeric columns) enter linearly.  Rows with an empty cell in any
column used are left out (their count is in summary.json as `n_dropped`); all
four treated x post cells must keep at least one row.

Standard errors (`se`, and `cluster`):
  * default `se = hc1`: heteroskedasticity-robust HC1 (White's sandwich with
    the n/(n-k) factor, Stata's `robust`), t inference with n - k df;
  * `se = classical`: the conventional OLS standard errors (homoskedastic),
    as textbooks print them;
  * `cluster` (a column): cluster-robust by its values (statsmodels'
    cov_type="cluster": the sandwich summed within clusters, with the factor
    G/(G-1) * (n-1)/(n-k)), t inference with G - 1 df, as Stata's
    `vce(cluster ...)`.  `cluster` cannot be combined with `se = classical`.
The 95 % interval is b3 +- t(0.975, df) * se.

Outputs: coefficients.csv (term, estimate, std_error, t, p_value, ci_low,
ci_high), summary.json (the DiD estimate, its std error, t, p, 95 % CI, n,
clusters, df, the standard error type, the four cell means), plot.png (group
means before and after, with the treated group's counterfactual path).
Metrics: did_estimate, did_std_error, did_p_value.

causal.interrupted_time_series (entry `causal:interrupted_time_series`)
----------------------------------------------------------------------
Segmented regression of one series around one intervention (Wagner et al.,
J Clin Pharm Ther 2002; Bernal, Cummins & Gasparrini, Int J Epidemiol 2017):

    y = b0 + b1*(t - t0) + b2*D + b3*(t - t0)*D + e,   D = 1 when time >= intervention

Design: the intervention is given as a time value (`intervention`, the first
time value of the intervention period, which must be one of the `time`
column's values), not as a 0/1 column.  A single time value cannot be
inconsistent with the time column (an `after` column could switch back to 0,
or disagree with the order of the rows), and t0 (where the level change is
measured) is then defined without ambiguity.  b2 is the level change at the
intervention (the jump of the fitted line at t0 relative to the pre-period
trend extrapolated to t0), b3 the slope change (post slope = b1 + b3).

Time scale: a numeric `time` is used as is (slopes per unit of it).  Dates are
turned into periods: when they are evenly spaced at a frequency pandas can
infer (monthly, weekly, ...) t is the period number (0, 1, 2, ...; slopes per
period); otherwise t is days since the first date (slopes per day);
summary.json says which (`time_unit`).  Rows are sorted by time; repeated time
values are an error; rows with an empty y or time cell are left out.  At least
3 observations are needed before and 3 from the intervention on.

Standard errors: `hac_lags` = 0 gives the conventional OLS ones;
`hac_lags` = L > 0 Newey-West HAC (Bartlett kernel, L lags, the small-sample
factor n/(n-k)), both with t inference on n - k df (as Stata's `regress` and
`newey`).

Outputs: coefficients.csv, summary.json (level change and slope change with
std errors, t, p and 95 % CIs, the pre and post slopes, n before and after,
the time unit), plot.png (the series, both fitted segments and the
counterfactual continuation of the pre-period line).  Metrics: level_change,
slope_change (and their p values).
"""

import csv
import math

import numpy as np
import pandas as pd

__all__ = ["did", "interrupted_time_series"]

LEVEL = 0.95


# --------------------------------------------------------------------------
# Helpers


def _opt(params, name):
    v = params.get(name)
    if v is None or (isinstance(v, str) and not v.strip()):
        return None
    return v


def _col(df, params, name, required=True):
    col = _opt(params, name)
    if col is None:
        if required:
            raise ValueError(f"parameter {name!r} is required: name a column of the dataset")
        return None
    if col not in df.columns:
        raise ValueError(f"parameter {name!r}: column {col!r} is not in the dataset (its columns: {list(df.columns)})")
    return col


def _require_numeric(series, param, col):
    s = series.dropna()
    if not (pd.api.types.is_numeric_dtype(series) and not pd.api.types.is_bool_dtype(series)):
        conv = pd.to_numeric(s, errors="coerce")
        bad = s[conv.isna()]
        raise ValueError(
            f"parameter {param!r}: column {col!r} must be numeric; "
            f"{len(bad)} value(s) are not numbers, e.g. {str(bad.iloc[0])!r}"
        )
    if not np.all(np.isfinite(s.to_numpy(dtype=float))):
        raise ValueError(f"parameter {param!r}: column {col!r} has infinite values")


def _require_binary(series, param, col):
    s = series.dropna()
    vals = pd.to_numeric(s, errors="coerce")
    bad = s[vals.isna() | ~vals.isin([0, 1])]
    if len(bad):
        raise ValueError(
            f"parameter {param!r}: column {col!r} must hold only 0 and 1; "
            f"it also holds {[str(v) for v in pd.unique(bad)][:5]}"
        )


def _coef_rows(res, names):
    ci = np.asarray(res.conf_int(alpha=1 - LEVEL), dtype=float)
    rows = []
    for i, name in enumerate(names):
        rows.append(
            {
                "term": name,
                "estimate": float(res.params[i]),
                "std_error": float(res.bse[i]),
                "t": float(res.tvalues[i]),
                "p_value": float(res.pvalues[i]),
                "ci_low": float(ci[i, 0]),
                "ci_high": float(ci[i, 1]),
            }
        )
    return rows


def _write_coefficients(path, rows):
    cols = ["term", "estimate", "std_error", "t", "p_value", "ci_low", "ci_high"]
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(cols)
        for r in rows:
            w.writerow([r["term"]] + [_num(r[c]) for c in cols[1:]])


def _num(v):
    v = float(v)
    return repr(v) if math.isfinite(v) else ""


def _clean(v):
    """JSON-safe float (None when not finite)."""
    v = float(v)
    return v if math.isfinite(v) else None


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


# --------------------------------------------------------------------------
# causal.did


def did(ctx):
    """causal.did: 2x2 difference-in-differences by OLS."""
    import statsmodels.api as sm

    p = ctx.params
    df = ctx.read_csv()
    ycol = _col(df, p, "y")
    tcol = _col(df, p, "treated")
    pcol = _col(df, p, "post")
    ccol = _col(df, p, "cluster", required=False)
    covs = p.get("covariates") or []
    if isinstance(covs, str):
        covs = [c.strip() for c in covs.split(",") if c.strip()]
    covs = list(covs)
    for c in covs:
        if c not in df.columns:
            raise ValueError(f"parameter 'covariates': column {c!r} is not in the dataset (its columns: {list(df.columns)})")
    se = str(p.get("se") or "hc1").strip().lower()
    if se not in ("hc1", "classical"):
        raise ValueError(f"parameter 'se' must be hc1 or classical, not {se!r}")
    if ccol is not None and se == "classical":
        raise ValueError("parameter 'se': classical standard errors cannot be clustered; leave se at hc1 when 'cluster' is set")
    used = [ycol, tcol, pcol] + covs
    if len(set(used)) != len(used):
        raise ValueError(f"parameters 'y', 'treated', 'post' and 'covariates' must name different columns, not {used}")
    if ccol is not None and ccol in (ycol, tcol, pcol):
        raise ValueError(f"parameter 'cluster': column {ccol!r} is already used as y, treated or post")

    _require_numeric(df[ycol], "y", ycol)
    _require_binary(df[tcol], "treated", tcol)
    _require_binary(df[pcol], "post", pcol)
    for c in covs:
        _require_numeric(df[c], "covariates", c)

    keep_cols = used + ([ccol] if ccol is not None and ccol not in used else [])
    n_all = len(df)
    data = df[keep_cols].dropna()
    n = len(data)
    if n == 0:
        raise ValueError("no row has all of y, treated, post (and covariates, cluster) filled")
    yv = data[ycol].to_numpy(dtype=float)
    tr = data[tcol].to_numpy(dtype=float)
    po = data[pcol].to_numpy(dtype=float)
    cells = {}
    for gname, g in (("control", 0.0), ("treated", 1.0)):
        for pname, pv in (("pre", 0.0), ("post", 1.0)):
            mask = (tr == g) & (po == pv)
            if not mask.any():
                raise ValueError(
                    f"parameters 'treated'/'post': no row is {gname} ({tcol}={int(g)}) and {pname} ({pcol}={int(pv)}); "
                    "difference-in-differences needs all four groups"
                )
            cells[f"{gname}_{pname}"] = {"mean": float(np.mean(yv[mask])), "n": int(mask.sum())}

    inter = f"{tcol}:{pcol}"
    names = ["Intercept", tcol, pcol, inter] + covs
    X = np.column_stack([np.ones(n), tr, po, tr * po] + [data[c].to_numpy(dtype=float) for c in covs])
    k = X.shape[1]
    if np.linalg.matrix_rank(X) < k:
        raise ValueError(
            "parameter 'covariates': the design is collinear (a covariate is a combination of the others, "
            "of treated, post or their product); remove it"
        )
    if n <= k:
        raise ValueError(f"parameter 'y': {n} complete rows are too few for {k} coefficients")

    ctx.progress(0.3, "fitting OLS")
    model = sm.OLS(yv, X)
    clusters = None
    if ccol is not None:
        codes, uniq = pd.factorize(data[ccol])
        clusters = int(len(uniq))
        if clusters < 2:
            raise ValueError(f"parameter 'cluster': column {ccol!r} has only {clusters} distinct value; clustering needs at least 2")
        res = model.fit(cov_type="cluster", cov_kwds={"groups": codes}, use_t=True)
        se_type = f"cluster-robust by {ccol} ({clusters} clusters), t with {clusters - 1} df"
        df_inf = clusters - 1
    elif se == "hc1":
        res = model.fit(cov_type="HC1", use_t=True)
        se_type = "HC1 heteroskedasticity-robust"
        df_inf = int(round(res.df_resid))
    else:
        res = model.fit(use_t=True)
        se_type = "classical OLS"
        df_inf = int(round(res.df_resid))

    rows = _coef_rows(res, names)
    d = rows[3]
    raw = (cells["treated_post"]["mean"] - cells["treated_pre"]["mean"]) - (
        cells["control_post"]["mean"] - cells["control_pre"]["mean"]
    )
    summary = {
        "term": inter,
        "did_estimate": d["estimate"],
        "std_error": d["std_error"],
        "t": d["t"],
        "p_value": d["p_value"],
        "ci_level": LEVEL,
        "ci_low": d["ci_low"],
        "ci_high": d["ci_high"],
        "n": n,
        "n_dropped": n_all - n,
        "clusters": clusters,
        "se_type": se_type,
        "df": df_inf,
        "covariates": covs,
        "r_squared": _clean(res.rsquared),
        "cell_means": cells,
        "did_of_means": raw,
    }
    _write_coefficients(ctx.output_path("coefficients.csv"), rows)
    ctx.write_json("summary.json", summary)
    _did_plot(ctx.output_path("plot.png"), cells, d["estimate"], tcol, pcol, ycol)
    ctx.metric("did_estimate", d["estimate"])
    ctx.metric("did_std_error", d["std_error"])
    ctx.metric("did_p_value", d["p_value"])
    ctx.progress(1.0, "done")


def _did_plot(path, cells, est, tcol, pcol, ycol):
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    try:
        x = [0, 1]
        c = [cells["control_pre"]["mean"], cells["control_post"]["mean"]]
        t = [cells["treated_pre"]["mean"], cells["treated_post"]["mean"]]
        ax.plot(x, c, "o-", color="#1f77b4", label=f"control ({tcol}=0)")
        ax.plot(x, t, "o-", color="#d62728", label=f"treated ({tcol}=1)")
        cf = [t[0], t[0] + (c[1] - c[0])]
        ax.plot(x, cf, "o--", color="#d62728", alpha=0.45, label="treated without the effect (parallel trends)")
        ax.set_xticks(x)
        ax.set_xticklabels([f"before ({pcol}=0)", f"after ({pcol}=1)"])
        ax.set_xlim(-0.3, 1.3)
        ax.set_ylabel(f"mean {ycol}")
        raw = (t[1] - t[0]) - (c[1] - c[0])
        ax.set_title(f"DiD estimate (regression) {est:.4g}; from these means {raw:.4g}", fontsize=10)
        ax.legend(fontsize=8, loc="best")
        fig.tight_layout()
        fig.savefig(path, dpi=100)
    finally:
        plt.close(fig)


# --------------------------------------------------------------------------
# causal.interrupted_time_series


def _its_time(raw, col, intervention):
    """(t as float array, t0, unit, labels, x for plotting) — see the module doc."""
    if pd.api.types.is_numeric_dtype(raw) and not pd.api.types.is_bool_dtype(raw):
        t = raw.to_numpy(dtype=float)
        try:
            t0 = float(str(intervention).strip())
        except ValueError:
            raise ValueError(
                f"parameter 'intervention': {intervention!r} is not a number, but column {col!r} is numeric"
            ) from None
        return t, t0, f"{col} (as given)", list(t), list(t)
    text = raw.astype(str)
    try:
        dt = pd.DatetimeIndex(pd.to_datetime(text))
    except (ValueError, TypeError, OverflowError) as e:
        raise ValueError(f"parameter 'time': column {col!r} holds neither numbers nor dates (e.g. {text.iloc[0]!r}): {e}") from None
    try:
        i0 = pd.Timestamp(str(intervention).strip())
    except (ValueError, TypeError):
        raise ValueError(f"parameter 'intervention': {intervention!r} is not a date, but column {col!r} holds dates") from None
    if dt.tz is not None:
        dt = dt.tz_convert(None)
    return dt, i0, None, list(text), list(dt.to_pydatetime())


def interrupted_time_series(ctx):
    """causal.interrupted_time_series: segmented regression around one intervention."""
    import statsmodels.api as sm

    p = ctx.params
    df = ctx.read_csv()
    ycol = _col(df, p, "y")
    tcol = _col(df, p, "time")
    if ycol == tcol:
        raise ValueError("parameters 'y' and 'time' must name different columns")
    intervention = _opt(p, "intervention")
    if intervention is None:
        raise ValueError("parameter 'intervention' is required: the first time value of the intervention period")
    lags = p.get("hac_lags", 0)
    if lags is None:
        lags = 0
    if isinstance(lags, bool) or not float(lags).is_integer() or int(lags) < 0:
        raise ValueError(f"parameter 'hac_lags' must be a whole number >= 0, not {lags!r}")
    lags = int(lags)

    _require_numeric(df[ycol], "y", ycol)
    data = df[[ycol, tcol]].dropna()
    n_all = len(df)
    n = len(data)
    if n == 0:
        raise ValueError("no row has both y and time filled")
    tt, t0, unit, labels, xs = _its_time(data[tcol], tcol, intervention)
    yv = data[ycol].to_numpy(dtype=float)

    if isinstance(tt, pd.DatetimeIndex):
        order = np.argsort(tt.asi8, kind="stable")
        tt = tt[order]
        if tt.has_duplicates:
            raise ValueError(f"parameter 'time': column {tcol!r} repeats the value {tt[tt.duplicated()][0]}")
        matches = np.nonzero(tt == t0)[0]
        if len(matches) == 0:
            raise ValueError(
                f"parameter 'intervention': {intervention!r} is not one of the dates in column {tcol!r}; "
                "give the first time value of the intervention period as it appears there"
            )
        freq = pd.infer_freq(tt) if n >= 3 else None
        if freq is not None:
            t = np.arange(n, dtype=float)
            unit = f"periods ({freq})"
        else:
            t = ((tt - tt[0]) / pd.Timedelta(days=1)).to_numpy(dtype=float)
            unit = "days"
        t0v = float(t[matches[0]])
        after = (t >= t0v)
    else:
        order = np.argsort(tt, kind="stable")
        t = tt[order]
        d = np.diff(t)
        if np.any(d == 0):
            raise ValueError(f"parameter 'time': column {tcol!r} repeats the value {t[1:][d == 0][0]!r}")
        if not np.any(t == t0):
            raise ValueError(
                f"parameter 'intervention': {intervention!r} is not one of the values of column {tcol!r}; "
                "give the first time value of the intervention period"
            )
        t0v = float(t0)
        after = t >= t0v
    yv = yv[order]
    xs = [xs[i] for i in order]
    labels = [labels[i] for i in order]
    n_pre, n_post = int((~after).sum()), int(after.sum())
    if n_pre < 3 or n_post < 3:
        raise ValueError(
            f"parameter 'intervention': {n_pre} observation(s) before and {n_post} from {intervention!r} on; "
            "segmented regression needs at least 3 on each side"
        )
    if lags >= n:
        raise ValueError(f"parameter 'hac_lags': {lags} lags is not less than the number of observations ({n})")

    D = after.astype(float)
    tc = t - t0v
    X = np.column_stack([np.ones(n), tc, D, tc * D])
    names = ["Intercept", "time", "level_change", "slope_change"]
    ctx.progress(0.3, "fitting segmented regression")
    model = sm.OLS(yv, X)
    if lags > 0:
        res = model.fit(cov_type="HAC", cov_kwds={"maxlags": lags, "use_correction": True}, use_t=True)
        se_type = f"Newey-West HAC, {lags} lag(s), Bartlett kernel, n/(n-k) factor"
    else:
        res = model.fit(use_t=True)
        se_type = "classical OLS"
    rows = _coef_rows(res, names)

    # post-period slope b1 + b3 and its standard error
    L = np.array([0.0, 1.0, 0.0, 1.0])
    tst = res.t_test(L)
    post_ci = np.asarray(tst.conf_int(alpha=1 - LEVEL), dtype=float).ravel()
    post = {
        "estimate": float(np.squeeze(tst.effect)),
        "std_error": float(np.squeeze(tst.sd)),
        "t": float(np.squeeze(tst.tvalue)),
        "p_value": float(np.squeeze(tst.pvalue)),
        "ci_low": float(post_ci[0]),
        "ci_high": float(post_ci[1]),
    }

    def block(r):
        return {k: r[k] for k in ("estimate", "std_error", "t", "p_value", "ci_low", "ci_high")}

    summary = {
        "level_change": block(rows[2]),
        "slope_change": block(rows[3]),
        "pre_slope": block(rows[1]),
        "post_slope": post,
        "baseline_at_intervention": block(rows[0]),
        "ci_level": LEVEL,
        "intervention": str(intervention),
        "time_unit": unit,
        "n": n,
        "n_pre": n_pre,
        "n_post": n_post,
        "n_dropped": n_all - n,
        "se_type": se_type,
        "hac_lags": lags,
        "df": int(round(res.df_resid)),
        "r_squared": _clean(res.rsquared),
    }
    _write_coefficients(ctx.output_path("coefficients.csv"), rows)
    ctx.write_json("summary.json", summary)
    _its_plot(ctx.output_path("plot.png"), xs, yv, after, np.asarray(res.params, dtype=float), tc, ycol, str(intervention))
    ctx.metric("level_change", rows[2]["estimate"])
    ctx.metric("slope_change", rows[3]["estimate"])
    ctx.metric("level_change_p_value", rows[2]["p_value"])
    ctx.metric("slope_change_p_value", rows[3]["p_value"])
    ctx.progress(1.0, "done")


def _its_plot(path, xs, yv, after, b, tc, ycol, intervention):
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(9, 4.5))
    try:
        pre = ~after
        ax.plot(xs, yv, "o", ms=3, color="#1f77b4", label=ycol)
        xpre = [x for x, a in zip(xs, pre) if a]
        xpost = [x for x, a in zip(xs, after) if a]
        ax.plot(xpre, b[0] + b[1] * tc[pre], color="#2ca02c", lw=1.8, label="fitted, before")
        ax.plot(xpost, b[0] + b[2] + (b[1] + b[3]) * tc[after], color="#d62728", lw=1.8, label="fitted, after")
        ax.plot(xpost, b[0] + b[1] * tc[after], color="#2ca02c", lw=1.2, ls="--", label="counterfactual (pre trend)")
        ax.axvline(xpost[0], color="#7f7f7f", lw=0.8, ls=":")
        ax.set_title(f"Interrupted time series: level change {b[2]:.4g}, slope change {b[3]:.4g} (from {intervention})")
        ax.legend(fontsize=8, loc="best")
        if hasattr(xs[0], "year"):
            fig.autofmt_xdate()
        fig.tight_layout()
        fig.savefig(path, dpi=100)
    finally:
        plt.close(fig)
