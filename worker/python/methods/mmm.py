"""Marketing-mix models: the `mmm` family of the platform's own methods.

`mmm.adstock_saturation` (entry `mmm:adstock_saturation`, predict
`mmm:predict`) fits, for sales y_t over periods t = 0..n-1 (in the order of
the `time` column, else the file's order):

    y_t = base + trend*t + sum_c beta_c * s_c(a_{c,t}) + noise

    adstock   A_{c,t} = x_{c,t} + lambda_c * A_{c,t-1},  A_{c,-1} = 0
    scaled    a_{c,t} = A_{c,t} / mean_t(x_{c,t})      (the channel's mean spend)
    Hill      s_c(a)  = a**S_c / (a**S_c + K_c**S_c)

so K_c is the scaled adstock at which a channel gives half its maximum
effect beta_c, in units of "one period of average spend" (comparable across
channels whatever their currency scale), and S_c its shape (S > 1: S-curve,
S <= 1: concave).  `trend` is off by default (trend = 0).

Fit: non-linear least squares over the per-channel (lambda_c, log K_c,
log S_c) with scipy.optimize.least_squares (trust-region reflective, 2-point
finite-difference Jacobian), by variable projection: for each value of those
the linear part is solved exactly, beta_c >= 0 by non-negative least squares
(scipy.optimize.nnls) after projecting out base and trend, which are
unconstrained (ordinary least squares given beta).  Bounds:
lambda_c in [0, max_lag_decay] (max_lag_decay <= 0.95), K_c in [0.01, 100],
S_c in [0.25, 5].  The fit starts `restarts` times: first from lambda =
max_lag_decay/2, K = 1, S = 1 for every channel, then from points drawn
uniformly (lambda) and log-uniformly (K in [0.1, 10], S in [0.5, 3]) with
numpy's default_rng(random_state); the start with the smallest residual sum
of squares wins (the first of equals).

Outputs: per-period contributions (base = base + trend*t, and beta_c *
s_c(a_{c,t}) per channel), and per channel: total spend, total contribution,
ROI = total contribution / total spend, and mROI = the derivative of the total
contribution with respect to the total spend when every period's spend of the
channel is scaled by the same factor (at the current spend):
sum_t beta_c*S_c*a^S_c*K_c^S_c/(a^S_c + K_c^S_c)^2 / sum_t x_{c,t}.
Contributions count effects inside the data's window only (the carry-over
of the last periods' spend past the end is not counted).

Predict: each row is the next period after the data (rows in order, the
first is period n), giving every channel's spend ({"tv": 100, ...}); the
adstock carries on from the fitted final state A_{c,n-1}; a row with
"carryover": false starts the adstock from zero at that row (then carries on
from there).  It returns predicted sales per row (base + trend*t + the
channels' effects).
"""

import json
import math
import re

import numpy as np

__all__ = ["adstock_saturation", "predict", "adstock", "hill", "sanitise"]

K_BOUNDS = (0.01, 100.0)
S_BOUNDS = (0.5, 3.0)
MAX_DECAY = 0.95


def adstock(x, lam, initial=0.0):
    """Geometric adstock A_t = x_t + lam*A_{t-1}, A_{-1} = initial."""
    from scipy.signal import lfilter

    x = np.asarray(x, float)
    return lfilter([1.0], [1.0, -lam], x, zi=[lam * initial])[0]


def hill(a, K, S):
    """Hill saturation a**S/(a**S + K**S) (0 at a = 0)."""
    a = np.asarray(a, float)
    aS = np.power(a, S)
    return aS / (aS + K ** S)


def sanitise(name):
    """A channel name as a metric suffix: lower case, runs of other characters as '_'."""
    s = re.sub(r"[^0-9A-Za-z]+", "_", str(name)).strip("_").lower()
    return s or "channel"


def _numeric(df, name, param):
    import pandas as pd

    if name not in df.columns:
        raise ValueError(
            f"parameter `{param}`: column {name!r} is not in the dataset (columns: {', '.join(map(str, df.columns))})"
        )
    col = df[name]
    values = pd.to_numeric(col, errors="coerce")
    bad = values.isna() & col.notna()
    if bad.any():
        raise ValueError(
            f"parameter `{param}`: column {name!r} is not numeric (e.g. {col[bad].iloc[0]!r}); choose a numeric column"
        )
    if values.isna().any():
        raise ValueError(
            f"parameter `{param}`: column {name!r} has empty cells; the periods must be consecutive, so fill them (e.g. 0 spend) instead of leaving them out"
        )
    values = values.astype(float).to_numpy()
    if not np.isfinite(values).all():
        raise ValueError(f"parameter `{param}`: column {name!r} has non-finite values")
    return values


def _order(df, time):
    """The row order (by `time`, else the file's) and the period labels."""
    import pandas as pd

    n = len(df)
    if not time:
        return np.arange(n), [str(i) for i in range(n)]
    if time not in df.columns:
        raise ValueError(f"parameter `time`: column {time!r} is not in the dataset")
    col = df[time]
    if col.isna().any():
        raise ValueError(f"parameter `time`: column {time!r} has empty cells")
    if pd.api.types.is_numeric_dtype(col):
        key = col.astype(float).to_numpy()
    else:
        try:
            key = pd.to_datetime(col.astype(str)).to_numpy().astype("datetime64[ns]").astype(np.int64)
        except (ValueError, TypeError, OverflowError):
            raise ValueError(
                f"parameter `time`: column {time!r} is neither numbers nor dates (e.g. {col.iloc[0]!r})"
            ) from None
    if len(np.unique(key)) != n:
        raise ValueError(f"parameter `time`: column {time!r} repeats a period; give one row per period")
    order = np.argsort(key, kind="mergesort")
    return order, [str(v) for v in col.to_numpy()[order]]


class _Problem:
    """The variable-projection problem: y, the spends, the unconstrained columns."""

    def __init__(self, y, X, trend):
        self.y = y
        self.X = X  # n x C spends
        self.n, self.C = X.shape
        self.means = X.mean(axis=0)
        cols = [np.ones(self.n)]
        if trend:
            cols.append(np.arange(self.n, dtype=float))
        self.U = np.column_stack(cols)
        self.Q, _ = np.linalg.qr(self.U)
        self.y_perp = y - self.Q @ (self.Q.T @ y)

    def unpack(self, theta):
        C = self.C
        return theta[:C], np.exp(theta[C:2 * C]), np.exp(theta[2 * C:])

    def saturated(self, theta):
        lam, K, S = self.unpack(theta)
        H = np.empty((self.n, self.C))
        for c in range(self.C):
            H[:, c] = hill(adstock(self.X[:, c], lam[c]) / self.means[c], K[c], S[c])
        return H

    def linear(self, H):
        """beta >= 0 and (base, trend) minimising the residual sum of squares."""
        from scipy.optimize import nnls

        H_perp = H - self.Q @ (self.Q.T @ H)
        beta, _ = nnls(H_perp, self.y_perp)
        u, *_ = np.linalg.lstsq(self.U, self.y - H @ beta, rcond=None)
        return beta, u

    def residuals(self, theta):
        H = self.saturated(theta)
        beta, u = self.linear(H)
        return self.y - self.U @ u - H @ beta


def fit(y, X, trend=False, max_lag_decay=0.9, restarts=5, random_state=0):
    """Fits the model to sales y (n) and spends X (n x C); returns the parameters."""
    from scipy.optimize import least_squares

    prob = _Problem(np.asarray(y, float), np.asarray(X, float), trend)
    C = prob.C
    lo = np.concatenate([np.zeros(C), np.full(C, math.log(K_BOUNDS[0])), np.full(C, math.log(S_BOUNDS[0]))])
    hi = np.concatenate([np.full(C, max_lag_decay), np.full(C, math.log(K_BOUNDS[1])), np.full(C, math.log(S_BOUNDS[1]))])
    rng = np.random.default_rng(random_state)
    starts = [np.concatenate([np.full(C, max_lag_decay / 2), np.zeros(C), np.zeros(C)])]
    for _ in range(restarts - 1):
        starts.append(
            np.concatenate(
                [
                    rng.uniform(0, max_lag_decay, C),
                    rng.uniform(math.log(0.1), math.log(10), C),
                    rng.uniform(math.log(0.5), math.log(3), C),
                ]
            )
        )
    best, best_cost, best_i = None, math.inf, -1
    for i, x0 in enumerate(starts):
        x0 = np.clip(x0, lo, hi)
        with np.errstate(all="ignore"):
            res = least_squares(prob.residuals, x0, bounds=(lo, hi), method="trf", max_nfev=200 * (3 * C + 1))
        if np.isfinite(res.cost) and res.cost < best_cost:
            best, best_cost, best_i = res, float(res.cost), i
    if best is None:
        raise ValueError("the fit failed from every start: check the data (constant sales? spends all zero?)")
    theta = best.x
    lam, K, S = prob.unpack(theta)
    H = prob.saturated(theta)
    beta, u = prob.linear(H)
    return {
        "lambda": lam,
        "K": K,
        "S": S,
        "beta": beta,
        "base": float(u[0]),
        "trend": float(u[1]) if trend else 0.0,
        "means": prob.means,
        "H": H,
        "rss": float(2 * best_cost),
        "best_start": best_i,
        "nfev": int(best.nfev),
        "status": int(best.status),
    }


def adstock_saturation(ctx):
    """`mmm.adstock_saturation`: the adstock + Hill saturation marketing-mix model."""
    p = ctx.params
    yname = p.get("y")
    channels = p.get("channels")
    if not yname:
        raise ValueError("parameter `y` (the sales column) is required")
    if isinstance(channels, str):
        channels = [channels]
    if not channels:
        raise ValueError("parameter `channels` (the spend columns, one per channel) is required")
    channels = [str(c) for c in channels]
    if len(set(channels)) != len(channels):
        raise ValueError("parameter `channels`: a column is named twice")
    if yname in channels:
        raise ValueError(f"parameter `channels`: {yname!r} is the sales column `y`, not a channel")
    time = p.get("time") or None
    if time is not None and (time == yname or time in channels):
        raise ValueError("parameter `time`: the time column cannot also be `y` or a channel")
    trend = bool(p.get("trend", False))
    max_lag_decay = float(p.get("max_lag_decay", 0.9))
    if not (0.0 <= max_lag_decay <= MAX_DECAY):
        raise ValueError(f"parameter `max_lag_decay` must be in [0, {MAX_DECAY}], not {max_lag_decay}")
    restarts = int(p.get("restarts", 5))
    if not 1 <= restarts <= 50:
        raise ValueError(f"parameter `restarts` must be in 1..50, not {restarts}")
    random_state = int(p.get("random_state", 0))
    if random_state < 0:
        raise ValueError(f"parameter `random_state` must be >= 0, not {random_state}")

    ctx.progress(0.02, "reading the dataset")
    df = ctx.read_csv()
    y_raw = _numeric(df, yname, "y")
    X_raw = np.column_stack([_numeric(df, c, "channels") for c in channels])
    order, labels = _order(df, time)
    y = y_raw[order]
    X = X_raw[order]
    for c, name in enumerate(channels):
        if (X[:, c] < 0).any():
            raise ValueError(f"parameter `channels`: column {name!r} has negative spend; spends must be >= 0")
        if X[:, c].sum() <= 0:
            raise ValueError(f"parameter `channels`: column {name!r} has no spend at all; leave it out")
    C = len(channels)
    n_params = 4 * C + 1 + (1 if trend else 0)
    if len(y) < n_params + 5:
        raise ValueError(
            f"{len(y)} periods are too few for {C} channel(s): the model has {n_params} parameters; give at least {n_params + 5} periods"
        )
    if np.ptp(y) == 0:
        raise ValueError(f"parameter `y`: column {yname!r} is constant; there is nothing to explain")

    ctx.progress(0.1, f"fitting ({restarts} starts)")
    res = fit(y, X, trend=trend, max_lag_decay=max_lag_decay, restarts=restarts, random_state=random_state)
    ctx.progress(0.85, "writing outputs")

    t = np.arange(len(y), dtype=float)
    base_t = res["base"] + res["trend"] * t
    contrib = res["H"] * res["beta"]
    fitted = base_t + contrib.sum(axis=1)
    resid = y - fitted
    rss = float(resid @ resid)
    rmse = math.sqrt(rss / len(y))
    r2 = 1.0 - rss / float(((y - y.mean()) ** 2).sum())

    per_channel = []
    for c, name in enumerate(channels):
        lam, K, S, beta, mean = (float(res[k][c]) for k in ("lambda", "K", "S", "beta", "means"))
        A = adstock(X[:, c], lam)
        a = A / mean
        spend = float(X[:, c].sum())
        total = float(contrib[:, c].sum())
        with np.errstate(all="ignore"):
            aS = np.power(a, S)
            marginal = beta * S * aS * K ** S / (aS + K ** S) ** 2
        per_channel.append(
            {
                "name": name,
                "metric": None,
                "lambda": lam,
                "K": K,
                "S": S,
                "beta": beta,
                "mean_spend": mean,
                "final_adstock": float(A[-1]),
                "total_spend": spend,
                "total_contribution": total,
                "roi": total / spend,
                "mroi": float(np.nansum(marginal)) / spend,
            }
        )
    used = set()
    for ch in per_channel:
        m = sanitise(ch["name"])
        k, cand = 2, m
        while cand in used:
            cand, k = f"{m}_{k}", k + 1
        used.add(cand)
        ch["metric"] = "roi_" + cand

    model = {
        "method": "mmm.adstock_saturation",
        "formula": "y_t = base + trend*t + sum_c beta_c * a^S_c/(a^S_c + K_c^S_c), a = adstock_c(t)/mean_spend_c, adstock_c(t) = x_c(t) + lambda_c*adstock_c(t-1)",
        "y": yname,
        "time": time,
        "trend_enabled": trend,
        "base": res["base"],
        "trend": res["trend"],
        "n_periods": int(len(y)),
        "first_period": labels[0],
        "last_period": labels[-1],
        "channels": per_channel,
        "r2": r2,
        "rmse": rmse,
        "rss": rss,
        "fit": {
            "algorithm": "variable projection: scipy.optimize.least_squares (trf) over lambda, log K, log S; beta by NNLS, base/trend by OLS",
            "max_lag_decay": max_lag_decay,
            "bounds": {"lambda": [0.0, max_lag_decay], "K": list(K_BOUNDS), "S": list(S_BOUNDS)},
            "restarts": restarts,
            "random_state": random_state,
            "best_start": res["best_start"],
            "nfev": res["nfev"],
            "status": res["status"],
        },
        "predict": "rows are the periods after the data, in order; each gives every channel's spend; adstock carries on from final_adstock unless a row says \"carryover\": false",
    }
    ctx.write_json("model.json", model)

    with open(ctx.output_path("contributions.csv"), "w", encoding="utf-8", newline="") as fh:
        import csv

        w = csv.writer(fh)
        w.writerow(["period", "actual", "fitted", "base"] + [f"contribution_{c}" for c in channels])
        for i in range(len(y)):
            w.writerow([labels[i], repr(float(y[i])), repr(float(fitted[i])), repr(float(base_t[i]))]
                       + [repr(float(v)) for v in contrib[i]])
    with open(ctx.output_path("roi.csv"), "w", encoding="utf-8", newline="") as fh:
        import csv

        w = csv.writer(fh)
        w.writerow(["channel", "total_spend", "total_contribution", "roi", "mroi", "lambda", "K", "S", "beta"])
        for ch in per_channel:
            w.writerow([ch["name"]] + [repr(ch[k]) for k in ("total_spend", "total_contribution", "roi", "mroi", "lambda", "K", "S", "beta")])
    _plot(ctx.output_path("plot.png"), labels, y, fitted, base_t, contrib, channels)

    ctx.metric("r2", r2)
    ctx.metric("rmse", rmse)
    for ch in per_channel:
        ctx.metric(ch["metric"], ch["roi"])
    ctx.progress(1.0, "done")


def _plot(path, labels, y, fitted, base_t, contrib, channels):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t = np.arange(len(y))
    fig, ax = plt.subplots(figsize=(10, 5))
    try:
        ax.stackplot(t, base_t, *contrib.T, labels=["base"] + list(channels), alpha=0.7)
        ax.plot(t, y, color="black", lw=1.2, label="actual")
        ax.plot(t, fitted, color="black", lw=1, ls="--", label="fitted")
        ticks = np.linspace(0, len(y) - 1, min(8, len(y))).astype(int)
        ax.set_xticks(ticks)
        ax.set_xticklabels([labels[i] for i in ticks], rotation=30, ha="right", fontsize=8)
        ax.set_ylabel("sales")
        ax.set_title("contributions (stacked) and actual sales")
        ax.legend(loc="upper left", fontsize=8, ncol=2)
        fig.tight_layout()
        fig.savefig(path, dpi=100)
    finally:
        plt.close(fig)


def predict(model, rows):
    """Predicted sales for the periods after the data: one float per row (see the module's doc)."""
    if isinstance(model, str):
        with open(model, encoding="utf-8") as fh:
            model = json.load(fh)
    chans = model["channels"]
    state = [float(ch["final_adstock"]) for ch in chans]
    t0 = int(model["n_periods"])
    out = []
    for i, row in enumerate(rows):
        carry = row.get("carryover", True)
        if not isinstance(carry, bool):
            raise ValueError(f"row {i}: \"carryover\" must be true or false, not {carry!r}")
        if not carry:
            state = [0.0] * len(chans)
        total = float(model["base"]) + float(model["trend"]) * (t0 + i)
        for c, ch in enumerate(chans):
            if ch["name"] not in row:
                raise KeyError(f"row {i}: no spend for channel {ch['name']!r}")
            value = row[ch["name"]]
            try:
                x = float(value)
            except (TypeError, ValueError):
                raise ValueError(f"row {i}: spend {value!r} of channel {ch['name']!r} is not a number") from None
            if not math.isfinite(x) or x < 0:
                raise ValueError(f"row {i}: spend of channel {ch['name']!r} must be a finite number >= 0, not {value!r}")
            state[c] = x + float(ch["lambda"]) * state[c]
            total += float(ch["beta"]) * float(hill(state[c] / float(ch["mean_spend"]), float(ch["K"]), float(ch["S"])))
        out.append(total)
    return out
