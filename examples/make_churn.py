"""Writes examples/churn.csv: a synthetic customer table (300 rows) whose
`churned` column follows a known logistic model, for the plugin walkthrough.
Deterministic: the same file on every machine (`python3 examples/make_churn.py`)."""

import math
import random

rng = random.Random(20261206)
rows = []
for _ in range(300):
    tenure = rng.randint(1, 72)
    charges = round(rng.uniform(20, 120), 2)
    calls = rng.randint(0, 8)
    z = 0.5 - 0.06 * tenure + 0.02 * charges + 0.45 * calls - 2.0
    churned = 1 if rng.random() < 1 / (1 + math.exp(-z)) else 0
    rows.append((tenure, charges, calls, churned))
with open("examples/churn.csv", "w", encoding="utf-8") as f:
    f.write("tenure_months,monthly_charges,support_calls,churned\n")
    for r in rows:
        f.write(",".join(str(x) for x in r) + "\n")
