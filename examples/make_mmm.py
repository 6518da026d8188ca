"""Writes examples/mmm.csv: 104 weeks of synthetic sales and three channels'
spend (tv, radio, online), the sales following the model of
`mmm.adstock_saturation` (geometric adstock, Hill saturation of the adstock
over the channel's mean spend) with the known parameters TRUTH below plus
Gaussian noise.  `simulate(seed)` is what the method's tests use (20 seeds).
Deterministic: the same file on every machine (`/usr/bin/python3 examples/make_mmm.py`)."""

import datetime
import os

import numpy as np

CHANNELS = ("tv", "radio", "online")
# per channel: adstock decay lambda, half-saturation K (in units of mean spend), shape S, effect beta
TRUTH = {
    "base": 1000.0,
    "noise_sd": 15.0,
    "tv": {"lambda": 0.6, "K": 3.0, "S": 2.0, "beta": 500.0},
    "radio": {"lambda": 0.3, "K": 1.5, "S": 1.0, "beta": 250.0},
    "online": {"lambda": 0.1, "K": 1.0, "S": 1.5, "beta": 300.0},
}
SEED = 20261206


def _adstock(x, lam):
    out = np.empty_like(x)
    carry = 0.0
    for i, v in enumerate(x):
        carry = v + lam * carry
        out[i] = carry
    return out


def spends(rng, n):
    """Spend patterns: tv in 4-week flights (on half of the time), radio and
    online in 2-week bursts (on 60 % of the time), online with a yearly season."""
    tv = np.repeat(rng.random(-(-n // 4)) < 0.5, 4)[:n] * rng.uniform(80, 160, n)
    radio = np.repeat(rng.random(-(-n // 2)) < 0.6, 2)[:n] * rng.uniform(20, 60, n)
    season = 1 + 0.3 * np.sin(np.arange(n) * 2 * np.pi / 52)
    online = np.repeat(rng.random(-(-n // 2)) < 0.6, 2)[:n] * rng.uniform(20, 80, n) * season
    return {"tv": tv, "radio": radio, "online": online}


def simulate(seed, n=104, extra=0):
    """Sales and spends for n + extra weeks; the truth's contributions over the first n.

    Returns (columns: dict name -> array of n + extra, truth: dict with per channel
    lambda, K, S, beta, the contributions over the first n weeks and ROI there).
    The scaling by mean spend uses the first n weeks (what a fit on them sees)."""
    rng = np.random.default_rng(seed)
    x = spends(rng, n + extra)
    sales = np.full(n + extra, TRUTH["base"])
    truth = {"base": TRUTH["base"], "channels": {}}
    for name in CHANNELS:
        p = TRUTH[name]
        mean = x[name][:n].mean()
        a = _adstock(x[name], p["lambda"]) / mean
        effect = p["beta"] * a ** p["S"] / (a ** p["S"] + p["K"] ** p["S"])
        sales = sales + effect
        contribution = float(effect[:n].sum())
        truth["channels"][name] = dict(p, contribution=contribution, roi=contribution / float(x[name][:n].sum()))
    sales = sales + rng.normal(0, TRUTH["noise_sd"], n + extra)
    start = datetime.date(2023, 1, 2)
    weeks = [(start + datetime.timedelta(weeks=i)).isoformat() for i in range(n + extra)]
    cols = {"week": weeks, "sales": sales}
    cols.update(x)
    return cols, truth


def write_csv(path, cols, order=None):
    names = list(cols)
    n = len(cols[names[0]])
    order = range(n) if order is None else order
    with open(path, "w", encoding="utf-8") as f:
        f.write(",".join(names) + "\n")
        for i in order:
            f.write(",".join(v if isinstance(v, str) else f"{v:.2f}" for v in (cols[c][i] for c in names)) + "\n")


if __name__ == "__main__":
    cols, _ = simulate(SEED)
    write_csv(os.path.join(os.path.dirname(os.path.abspath(__file__)), "mmm.csv"), cols)
