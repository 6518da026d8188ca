"""Writes examples/did_panel.csv: a simulated panel for difference-in-differences,
40 units (20 treated) observed in 6 periods, the treatment starting in period 3,
with a true effect of 3.0.  Deterministic (`python3 examples/make_did_panel.py`).

    y = 10 + 2*treated + 0.5*period + 0.8*x + u_unit + 3.0*treated*post + e
    u_unit ~ N(0, 1.5^2) (shared by a unit's rows: errors are clustered by unit)
    e ~ N(0, 1), x ~ N(5, 2^2)

`simulate(seed)` returns the rows, so the tests can draw further panels."""

import os
import random

EFFECT = 3.0
SEED = 20240611


def simulate(seed, n_units=40, n_periods=6, first_post=3, effect=EFFECT):
    rng = random.Random(seed)
    rows = []
    for unit in range(1, n_units + 1):
        treated = 1 if unit <= n_units // 2 else 0
        u = rng.gauss(0.0, 1.5)
        for period in range(n_periods):
            post = 1 if period >= first_post else 0
            x = round(rng.gauss(5.0, 2.0), 3)
            e = rng.gauss(0.0, 1.0)
            y = 10 + 2 * treated + 0.5 * period + 0.8 * x + u + effect * treated * post + e
            rows.append((f"u{unit:02d}", period, treated, post, x, round(y, 4)))
    return rows


def write(path, rows):
    with open(path, "w", encoding="utf-8") as f:
        f.write("unit,period,treated,post,x,y\n")
        for r in rows:
            f.write(",".join(str(v) for v in r) + "\n")


if __name__ == "__main__":
    write(os.path.join(os.path.dirname(os.path.abspath(__file__)), "did_panel.csv"), simulate(SEED))
