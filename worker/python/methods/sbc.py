"""Simulation-based calibration: one simulation per child of an `sbc` run.

SBC (Talts, Betancourt, Simpson, Vehtari and Gelman, "Validating Bayesian
inference algorithms with simulation-based calibration", 2018) checks an
inference: draw parameters theta~ from the prior, simulate data y from the
model at theta~, draw L samples from the posterior given y, and count how
many samples fall below theta~.  When the posterior is right, that rank is
uniform on 0..L for every parameter; a histogram of the ranks over many
simulations that is U-shaped, peaked or skewed shows an over-confident,
under-confident or biased inference.  The platform folds the children's
ranks into histograms and a chi-square test of uniformity.

Models (both conjugate, so their posteriors are exact and drawn directly):

    normal_mean        mu ~ N(0, 1); y_i ~ N(mu, 1), i = 1..n, n = the
                       dataset's rows.  Posterior N(m, s^2) with
                       s^2 = 1/(1 + n), m = s^2 * sum(y).
    linear_regression  sigma^2 ~ InvGamma(a0 = 3, b0 = 2);
                       beta | sigma^2 ~ N(0, sigma^2 * I) on the design
                       X = [1, x...] (columns `x` of the dataset);
                       y ~ N(X beta, sigma^2 I).  Posterior
                       normal-inverse-gamma: V = (I + X'X)^-1, m = V X'y,
                       a = a0 + n/2, b = b0 + (y'y - m'V^-1 m)/2.

`posterior_scale` multiplies the spread of each posterior draw around the
posterior mean (the location draws' deviations; sigma is drawn unchanged),
so values other than 1 stand in for a wrong inference the test should flag.

Child i draws from numpy's PCG64 stream seeded with (seed, i), so a child's
ranks do not depend on how many children run or in which order.
"""

import math

import numpy as np

__all__ = ["simulate", "normal_mean", "linear_regression"]

MODELS = ("normal_mean", "linear_regression")
A0, B0 = 3.0, 2.0  # the inverse-gamma prior of sigma^2 in linear_regression


def _int(p, name, default, lo, hi):
    v = p.get(name, default)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v != int(v) or not lo <= v <= hi:
        raise ValueError(f"parameter `{name}` must be an integer in {lo}..{hi}, not {v!r}")
    return int(v)


def normal_mean(rng, n, draws, scale):
    """One simulation: ({"mu": truth}, {"mu": posterior draws})."""
    mu = rng.normal(0.0, 1.0)
    y = rng.normal(mu, 1.0, size=n)
    s2 = 1.0 / (1.0 + n)
    m = s2 * float(np.sum(y))
    post = m + scale * math.sqrt(s2) * rng.standard_normal(draws)
    return {"mu": float(mu)}, {"mu": post}


def linear_regression(rng, X, names, draws, scale):
    """One simulation on the design X (n x p, intercept first)."""
    n, p = X.shape
    sigma2 = 1.0 / rng.gamma(A0, 1.0 / B0)
    beta = rng.normal(0.0, math.sqrt(sigma2), size=p)
    y = X @ beta + rng.normal(0.0, math.sqrt(sigma2), size=n)
    prec = np.eye(p) + X.T @ X
    V = np.linalg.inv(prec)
    V = (V + V.T) / 2.0
    m = V @ (X.T @ y)
    a = A0 + n / 2.0
    b = B0 + 0.5 * float(y @ y - m @ prec @ m)
    s2 = 1.0 / rng.gamma(a, 1.0 / b, size=draws)
    L = np.linalg.cholesky(V)
    z = rng.standard_normal((draws, p))
    betas = m + scale * np.sqrt(s2)[:, None] * (z @ L.T)
    truth = {name: float(beta[j]) for j, name in enumerate(names)}
    truth["sigma"] = math.sqrt(sigma2)
    post = {name: betas[:, j] for j, name in enumerate(names)}
    post["sigma"] = np.sqrt(s2)
    return truth, post


def _design(df, columns):
    if not columns:
        raise ValueError("parameter `x`: linear_regression needs the design's columns, e.g. [\"x1\", \"x2\"]")
    cols = []
    for c in columns:
        if c not in df.columns:
            raise ValueError(f"parameter `x`: column {c!r} is not in the dataset")
        v = np.asarray(df[c], dtype=float)
        if not np.all(np.isfinite(v)):
            raise ValueError(f"parameter `x`: column {c!r} has empty or non-numeric cells")
        cols.append(v)
    X = np.column_stack([np.ones(len(df))] + cols)
    if len(df) <= X.shape[1]:
        raise ValueError(f"the dataset's {len(df)} rows are too few for {X.shape[1]} coefficients")
    return X, ["intercept"] + [str(c) for c in columns]


def simulate(ctx):
    """Child ctx.task_index of an `sbc` run: writes ranks.json."""
    p = ctx.params
    model = p.get("model", "normal_mean")
    if model not in MODELS:
        raise ValueError(f"parameter `model` must be one of {', '.join(MODELS)}, not {model!r}")
    sims = _int(p, "simulations", 20, 2, 1000)
    draws = _int(p, "draws", 99, 9, 9999)
    bins = _int(p, "bins", 10, 2, 100)
    seed = _int(p, "seed", 0, 0, 2**32 - 1)
    if (draws + 1) % bins:
        raise ValueError(
            f"parameters `draws` and `bins`: a rank takes draws + 1 = {draws + 1} values, which {bins} bins "
            "do not split evenly; choose draws + 1 a multiple of bins (99 draws and 10 bins, say)"
        )
    scale = float(p.get("posterior_scale", 1.0))
    if not (math.isfinite(scale) and scale > 0):
        raise ValueError(f"parameter `posterior_scale` must be a positive number, not {scale!r}")
    i = int(getattr(ctx, "task_index", 0))
    if not 0 <= i < sims:
        raise ValueError(f"child {i} is outside 0..{sims - 1} (parameter `simulations` = {sims})")
    df = ctx.read_csv()
    rng = np.random.default_rng([seed, i])
    ctx.progress(0.1, f"simulation {i + 1} of {sims}")
    if model == "normal_mean":
        if len(df) < 1:
            raise ValueError("the dataset has no rows: normal_mean simulates as many observations as it has")
        truth, post = normal_mean(rng, len(df), draws, scale)
    else:
        X, names = _design(df, p.get("x") or [])
        truth, post = linear_regression(rng, X, names, draws, scale)
    ranks = {name: int(np.sum(post[name] < truth[name])) for name in truth}
    ctx.write_json(
        "ranks.json",
        {"simulation": i, "model": model, "draws": draws, "bins": bins, "truth": truth, "ranks": ranks},
    )
    ctx.progress(1.0, "done")
