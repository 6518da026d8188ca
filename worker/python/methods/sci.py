"""Scientific curve fitting: the `sci` family of the platform's own methods.

`sci.curve_fit` (entry `sci:curve_fit`, predict `sci:predict`) fits one of a
named family of curves y = f(x; p) by non-linear least squares with
`scipy.optimize.curve_fit` (Levenberg-Marquardt, MINPACK's lmdif; no bounds).

Families, with their parameters in the order `start` gives them:

    exponential              a*exp(b*x)                          a, b
    exponential_association  a*(1 - exp(-b*x))                   a, b
    logistic                 L/(1 + exp(-k*(x - x0)))            L, k, x0
    power                    a*x**b                   (x >= 0)   a, b
    hill                     top*x**n/(ec50**n + x**n) (x >= 0)  top, ec50, n
    michaelis_menten         vmax*x/(km + x)                     vmax, km
    gompertz                 a*exp(-b*exp(-c*x))                 a, b, c

Starting values: `start` (comma-separated numbers in the order above), or
else a data-driven guess: every family is linear in its first parameter
(its scale), so for each point of a fixed grid over the other parameters the
scale is solved by (weighted) linear least squares and the grid point with
the smallest residual sum of squares is the start.  The grids, in units of
the data (span = max(x) - min(x), xmax = max|x|):

    exponential              b = g/span, g in [-10, 10]
    exponential_association  b = +-10**g/xmax, g in [-3, 2]
    logistic                 x0 over [min(x) - span/2, max(x) + span/2],
                             k = +-10**g/span, g in [-1, 2]
    power                    b in [-4, 4] (b > 0 only when some x is 0)
    hill                     ec50 log-spaced over [min x>0 / 10, 10 max x],
                             n in [0.25, 6]
    michaelis_menten         km log-spaced over [min x>0 / 10, 10 max x]
    gompertz                 inflection m = ln(b)/c over x0's grid,
                             c = +-10**g/span, g in [-1, 1.5]

`sigma` (a column of positive numbers) weights observation i by 1/sigma_i**2;
it is taken as relative (curve_fit's absolute_sigma=False), so the
covariance is scaled by the residual variance, as NIST StRD's certified
standard deviations are.  Standard errors are the square roots of the
covariance's diagonal; the 95 % intervals are estimate +- t(0.975, n - p) * se.
Rows with an empty x, y (or sigma) cell are left out; everything else that is
not a number is an error.  rmse and r2 are unweighted: sqrt(mean(residual**2))
and 1 - SS_res/SS_tot.
"""

import json
import math

import numpy as np

__all__ = ["curve_fit", "predict", "FAMILIES"]

MAXFEV = 10000  # curve_fit's maxfev: function evaluations before giving up


def _exponential(x, a, b):
    return a * np.exp(b * x)


def _exponential_association(x, a, b):
    return a * (1.0 - np.exp(-b * x))


def _logistic(x, L, k, x0):
    return L / (1.0 + np.exp(-k * (x - x0)))


def _power(x, a, b):
    return a * np.power(x, b)


def _hill(x, top, ec50, n):
    xn = np.power(x, n)
    return top * xn / (np.power(ec50, n) + xn)


def _michaelis_menten(x, vmax, km):
    return vmax * x / (km + x)


def _gompertz(x, a, b, c):
    return a * np.exp(-b * np.exp(-c * x))


# name -> (function, parameter names, formula)
FAMILIES = {
    "exponential": (_exponential, ("a", "b"), "a*exp(b*x)"),
    "exponential_association": (_exponential_association, ("a", "b"), "a*(1 - exp(-b*x))"),
    "logistic": (_logistic, ("L", "k", "x0"), "L/(1 + exp(-k*(x - x0)))"),
    "power": (_power, ("a", "b"), "a*x**b"),
    "hill": (_hill, ("top", "ec50", "n"), "top*x**n/(ec50**n + x**n)"),
    "michaelis_menten": (_michaelis_menten, ("vmax", "km"), "vmax*x/(km + x)"),
    "gompertz": (_gompertz, ("a", "b", "c"), "a*exp(-b*exp(-c*x))"),
}

# families whose x must be >= 0 (a real power of a negative number is not a number)
_NONNEGATIVE_X = ("power", "hill")


def family_function(family):
    """The curve f(x, *params) of a family, for tests and callers."""
    return _family(family)[0]


def _family(family):
    key = str(family).strip().lower()
    if key not in FAMILIES:
        raise ValueError(
            f"family {family!r} is not known: choose one of {', '.join(FAMILIES)}"
        )
    return FAMILIES[key]


def _numeric_column(df, name, param):
    import pandas as pd

    if name not in df.columns:
        raise ValueError(
            f"parameter `{param}`: column {name!r} is not in the dataset (columns: {', '.join(map(str, df.columns))})"
        )
    col = df[name]
    if col.dtype == object:
        # empty cells are NaN already; anything else must parse as a number
        parsed = pd.to_numeric(col.astype(str).str.strip().replace("", np.nan), errors="coerce")
        bad = parsed.isna() & col.notna() & (col.astype(str).str.strip() != "")
        if bad.any():
            example = col[bad].iloc[0]
            raise ValueError(
                f"parameter `{param}`: column {name!r} is not numeric (e.g. {example!r}); choose a numeric column"
            )
        col = parsed
    elif not (np.issubdtype(col.dtype, np.number) or col.dtype == bool):
        raise ValueError(f"parameter `{param}`: column {name!r} is not numeric; choose a numeric column")
    return col.astype(float).to_numpy()


def _parse_start(text, names):
    parts = [p.strip() for p in str(text).split(",")]
    try:
        values = [float(p) for p in parts]
    except ValueError:
        raise ValueError(
            f"parameter `start`: {text!r} is not a comma-separated list of numbers; give {len(names)} numbers ({', '.join(names)})"
        ) from None
    if len(values) != len(names):
        raise ValueError(
            f"parameter `start`: {len(values)} numbers given, the family needs {len(names)} ({', '.join(names)}, in that order)"
        )
    if not all(math.isfinite(v) for v in values):
        raise ValueError("parameter `start`: the starting values must be finite numbers")
    return values


def _best_scale(basis, y, w2):
    """For each row of `basis` (candidates x observations), the weighted LS
    scale and its residual sum of squares; non-finite candidates get inf."""
    with np.errstate(all="ignore"):
        gg = (w2 * basis * basis).sum(axis=1)
        gy = (w2 * basis * y).sum(axis=1)
        scale = gy / gg
        sse = (w2 * (y - scale[:, None] * basis) ** 2).sum(axis=1)
    ok = np.isfinite(sse) & np.isfinite(scale) & (gg > 0)
    sse = np.where(ok, sse, np.inf)
    return scale, sse


def initial_guess(family, x, y, sigma=None):
    """The documented data-driven start (see the module's doc)."""
    f, names, _ = _family(family)
    key = str(family).strip().lower()
    x = np.asarray(x, float)
    y = np.asarray(y, float)
    w2 = np.ones_like(y) if sigma is None else 1.0 / np.asarray(sigma, float) ** 2
    span = float(x.max() - x.min()) or 1.0
    xmax = float(np.abs(x).max()) or 1.0
    positive = x[x > 0]
    lo = float(positive.min()) / 10 if positive.size else 1e-3
    hi = float(x.max()) * 10 if x.max() > 0 else 1.0
    centres = np.linspace(x.min() - span / 2, x.max() + span / 2, 41)
    rates = np.concatenate([10.0 ** np.linspace(-1, 2, 31), -(10.0 ** np.linspace(-1, 2, 31))]) / span

    cands = []  # tuples of the non-scale parameters
    if key == "exponential":
        cands = [(g / span,) for g in np.linspace(-10, 10, 81)]
    elif key == "exponential_association":
        g = 10.0 ** np.linspace(-3, 2, 51) / xmax
        cands = [(b,) for b in np.concatenate([g, -g])]
    elif key == "logistic":
        cands = [(k, x0) for x0 in centres for k in rates]
    elif key == "power":
        bs = np.linspace(-4, 4, 81)
        if (x <= 0).any():
            bs = bs[bs > 0]
        cands = [(b,) for b in bs]
    elif key == "hill":
        cands = [(e, n) for e in np.geomspace(lo, hi, 41) for n in np.linspace(0.25, 6, 24)]
    elif key == "michaelis_menten":
        cands = [(km,) for km in np.geomspace(lo, hi, 81)]
    elif key == "gompertz":
        cs = np.concatenate([10.0 ** np.linspace(-1, 1.5, 26), -(10.0 ** np.linspace(-1, 1.5, 26))]) / span
        with np.errstate(all="ignore"):
            cands = [(math.exp(min(c * m, 700.0)), c) for m in centres for c in cs]
    cands = np.asarray(cands, float)
    with np.errstate(all="ignore"):
        basis = np.vstack([f(x, 1.0, *c) for c in cands])
    scale, sse = _best_scale(basis, y, w2)
    i = int(np.argmin(sse))
    if not np.isfinite(sse[i]):
        raise ValueError(
            f"no starting values found for family {key!r} on these data: give `start` ({', '.join(names)})"
        )
    return [float(scale[i])] + [float(v) for v in cands[i]]


def fit_curve(family, x, y, sigma=None, start=None):
    """Fits a family; returns a dict (the model) — what `curve_fit` writes."""
    import warnings

    from scipy import optimize, stats

    f, names, formula = _family(family)
    key = str(family).strip().lower()
    x = np.asarray(x, float)
    y = np.asarray(y, float)
    p = len(names)
    if x.size <= p:
        raise ValueError(
            f"{x.size} usable rows: family {key!r} has {p} parameters and needs more rows than that"
        )
    if key in _NONNEGATIVE_X and (x < 0).any():
        raise ValueError(f"parameter `x`: family {key!r} needs x >= 0; the column has negative values")
    if sigma is not None:
        sigma = np.asarray(sigma, float)
        if not (sigma > 0).all():
            raise ValueError("parameter `sigma`: the weights column must be positive in every used row")
    p0 = list(start) if start is not None else initial_guess(key, x, y, sigma)
    hint = (
        "give `start` (comma-separated starting values for "
        + ", ".join(names)
        + ")"
        + (", or try other starting values" if start is not None else "")
    )
    try:
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore", optimize.OptimizeWarning)
            popt, pcov = optimize.curve_fit(
                f, x, y, p0=p0, sigma=sigma, absolute_sigma=False, maxfev=MAXFEV
            )
    except RuntimeError as e:
        raise ValueError(f"the {key} fit did not converge ({e}); {hint}") from None
    with np.errstate(all="ignore"):
        fitted = f(x, *popt)
    if not (np.all(np.isfinite(popt)) and np.all(np.isfinite(fitted))):
        raise ValueError(f"the {key} fit did not converge (non-finite parameters or fitted values); {hint}")
    resid = y - fitted
    sse = float(resid @ resid)
    sst = float(((y - y.mean()) ** 2).sum())
    rmse = math.sqrt(sse / y.size)
    r2 = 1.0 - sse / sst if sst > 0 else float("nan")
    dof = y.size - p
    tq = float(stats.t.ppf(0.975, dof))
    pcov = np.asarray(pcov, float)
    se = [math.sqrt(v) if math.isfinite(v) and v >= 0 else None for v in np.diag(pcov)]
    cov = [[float(v) if math.isfinite(v) else None for v in row] for row in pcov]
    params = []
    for name, est, s in zip(names, popt, se):
        params.append(
            {
                "name": name,
                "estimate": float(est),
                "std_error": s,
                "ci_lower": None if s is None else float(est - tq * s),
                "ci_upper": None if s is None else float(est + tq * s),
            }
        )
    return {
        "method": "sci.curve_fit",
        "family": key,
        "formula": "y = " + formula,
        "parameter_names": list(names),
        "parameters": {n: float(v) for n, v in zip(names, popt)},
        "start": [float(v) for v in p0],
        "start_source": "given" if start is not None else "grid guess",
        "covariance": cov,
        "table": params,
        "n": int(y.size),
        "dof": int(dof),
        "weighted": sigma is not None,
        "rss": sse,
        "rmse": rmse,
        "r2": r2 if math.isfinite(r2) else None,
        "residual_std": math.sqrt(sse / dof) if sigma is None else None,
    }


def _fmt(v):
    return "" if v is None else repr(float(v))


def curve_fit(ctx):
    """`sci.curve_fit`: fits the named family of curves y = f(x; params)."""
    params = ctx.params
    family = params.get("family")
    if family is None or str(family).strip() == "":
        raise ValueError(f"parameter `family` is required: one of {', '.join(FAMILIES)}")
    _, names, _ = _family(family)
    xname, yname = params.get("x"), params.get("y")
    if not xname or not yname:
        raise ValueError("parameters `x` and `y` (columns) are required")
    sname = params.get("sigma") or None
    start_text = params.get("start")
    start = None
    if start_text is not None and str(start_text).strip() != "":
        start = _parse_start(start_text, names)
    ctx.progress(0.05, "reading the dataset")
    df = ctx.read_csv()
    x = _numeric_column(df, xname, "x")
    y = _numeric_column(df, yname, "y")
    sigma = _numeric_column(df, sname, "sigma") if sname else None
    keep = np.isfinite(x) & np.isfinite(y)
    if sigma is not None:
        keep &= np.isfinite(sigma)
    if not keep.any():
        raise ValueError(f"no row has numbers in both {xname!r} and {yname!r}")
    x, y = x[keep], y[keep]
    if sigma is not None:
        sigma = sigma[keep]
    ctx.progress(0.2, "fitting")
    model = fit_curve(family, x, y, sigma=sigma, start=start)
    model["x"] = xname
    model["y"] = yname
    model["sigma"] = sname
    ctx.progress(0.8, "writing outputs")

    ctx.write_json("model.json", model)
    with open(ctx.output_path("parameters.csv"), "w", encoding="utf-8") as fh:
        fh.write("name,estimate,std_error,ci95_lower,ci95_upper\n")
        for row in model["table"]:
            fh.write(
                ",".join(
                    [row["name"], _fmt(row["estimate"]), _fmt(row["std_error"]), _fmt(row["ci_lower"]), _fmt(row["ci_upper"])]
                )
                + "\n"
            )
    f = FAMILIES[model["family"]][0]
    popt = [model["parameters"][n] for n in model["parameter_names"]]
    fitted = f(x, *popt)
    with open(ctx.output_path("fitted.csv"), "w", encoding="utf-8") as fh:
        fh.write("x,y,fitted,residual\n")
        for xi, yi, fi in zip(x, y, fitted):
            fh.write(f"{xi!r},{yi!r},{float(fi)!r},{float(yi - fi)!r}\n")
    _plot(ctx.output_path("plot.png"), model, x, y, sigma)

    ctx.metric("rmse", model["rmse"])
    if model["r2"] is not None:
        ctx.metric("r2", model["r2"])
    for n in model["parameter_names"]:
        ctx.metric(n, model["parameters"][n])
    ctx.progress(1.0, "done")


def _plot(path, model, x, y, sigma):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    f = FAMILIES[model["family"]][0]
    popt = [model["parameters"][n] for n in model["parameter_names"]]
    grid = np.linspace(x.min(), x.max(), 400)
    with np.errstate(all="ignore"):
        curve = f(grid, *popt)
    fig, ax = plt.subplots(figsize=(7, 4.5))
    try:
        if sigma is not None:
            ax.errorbar(x, y, yerr=sigma, fmt="o", ms=4, color="tab:blue", label="data (± sigma)")
        else:
            ax.plot(x, y, "o", ms=4, color="tab:blue", label="data")
        ax.plot(grid, curve, "-", color="tab:red", label=model["formula"])
        ax.set_xlabel(model.get("x") or "x")
        ax.set_ylabel(model.get("y") or "y")
        ax.set_title(f"{model['family']} fit: r2 = {model['r2'] if model['r2'] is not None else float('nan'):.4f}")
        ax.legend(loc="best", fontsize=8)
        fig.tight_layout()
        fig.savefig(path, dpi=100)
    finally:
        plt.close(fig)


def predict(model, rows):
    """Rows {"x": value} (or the model's x column name) -> fitted y, one float per row."""
    if isinstance(model, str):
        with open(model, encoding="utf-8") as fh:
            model = json.load(fh)
    f, names, _ = _family(model["family"])
    popt = [float(model["parameters"][n]) for n in names]
    xname = model.get("x")
    out = []
    for i, row in enumerate(rows):
        if "x" in row:
            value = row["x"]
        elif xname and xname in row:
            value = row[xname]
        else:
            raise KeyError(f"row {i}: no 'x' value" + (f" (or {xname!r})" if xname else ""))
        try:
            xv = float(value)
        except (TypeError, ValueError):
            raise ValueError(f"row {i}: x = {value!r} is not a number") from None
        if not math.isfinite(xv):
            raise ValueError(f"row {i}: x = {value!r} is not a finite number")
        with np.errstate(all="ignore"):
            yv = float(f(np.float64(xv), *popt))
        if not math.isfinite(yv):
            raise ValueError(f"row {i}: the curve is not defined at x = {xv!r}")
        out.append(yv)
    return out
