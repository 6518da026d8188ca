"""Writes examples/its_series.csv: a simulated monthly series, January 2015 to
December 2020 (72 months), with an intervention from January 2018 that lowers
the level by 8 and the slope by 0.7 per month; AR(1) errors (phi = 0.5, innovation
sd 2).  Deterministic (`python3 examples/make_its_series.py`).

    y_t = 100 + 0.5*t - 8*D_t - 0.7*(t - 36)*D_t + e_t,   D_t = 1 for t >= 36
    e_t = 0.5*e_{t-1} + a_t,  a_t ~ N(0, 2^2)

`simulate(seed)` returns the rows, so the tests can draw further series."""

import os
import random

LEVEL_CHANGE = -8.0
SLOPE_CHANGE = -0.7
SEED = 20240612
T0 = 36  # January 2018


def simulate(seed, n=72, level_change=LEVEL_CHANGE, slope_change=SLOPE_CHANGE, phi=0.5, sd=2.0):
    rng = random.Random(seed)
    e = rng.gauss(0.0, sd) / (1 - phi * phi) ** 0.5
    rows = []
    for t in range(n):
        if t > 0:
            e = phi * e + rng.gauss(0.0, sd)
        d = 1 if t >= T0 else 0
        y = 100 + 0.5 * t + level_change * d + slope_change * (t - T0) * d + e
        month = f"{2015 + t // 12}-{t % 12 + 1:02d}"
        rows.append((month, t, round(y, 4)))
    return rows


def write(path, rows):
    with open(path, "w", encoding="utf-8") as f:
        f.write("month,t,y\n")
        for r in rows:
            f.write(",".join(str(v) for v in r) + "\n")


if __name__ == "__main__":
    write(os.path.join(os.path.dirname(os.path.abspath(__file__)), "its_series.csv"), simulate(SEED))
