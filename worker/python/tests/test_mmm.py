"""Tests of `mmm.adstock_saturation` (worker/python/methods/mmm.py).

Data: examples/mmm.csv and the seeded simulator examples/make_mmm.py (sales
from the method's own model with known parameters: geometric adstock, Hill
saturation of adstock over mean spend, Gaussian noise).  No published
reference exists for this model; the checks are (1) recovery of the known
parameters over 20 simulated series, (2) the linear part equal to
scipy.optimize.lsq_linear called directly, and the fit a minimum that
scipy.optimize.least_squares called directly on an independent
implementation of the objective cannot improve, (3) contributions, ROI,
mROI and predict against an independent computation of the model.
"""

import csv
import importlib.util
import io
import math
import os
import sys
import unittest

import numpy as np
import pandas as pd
from scipy import optimize

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # support.py, with or without tests/__init__.py
from support import EXAMPLES, FakeContext, close  # noqa: E402

import mmm  # noqa: E402

OUTPUTS = ("model.json", "contributions.csv", "roi.csv", "plot.png")
CHANNELS = ["tv", "radio", "online"]

_spec = importlib.util.spec_from_file_location("make_mmm", os.path.join(EXAMPLES, "make_mmm.py"))
make_mmm = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(make_mmm)


def csv_text(cols, order=None):
    names = list(cols)
    n = len(cols[names[0]])
    out = io.StringIO()
    out.write(",".join(names) + "\n")
    for i in (range(n) if order is None else order):
        out.write(",".join(v if isinstance(v, str) else repr(float(v)) for v in (cols[c][i] for c in names)) + "\n")
    return out.getvalue()


def effect(x, lam, K, S, beta, mean, initial=0.0):
    """The model's channel term, written out independently of mmm.py."""
    out = np.empty(len(x))
    carry = initial
    for i, v in enumerate(x):
        carry = v + lam * carry
        a = carry / mean
        out[i] = beta * a ** S / (a ** S + K ** S)
    return out


def read_table(path):
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


class Case(unittest.TestCase):
    def fit(self, params, csv_path=None, csv_text=None):
        ctx = FakeContext(params, csv_path=csv_path, csv_text=csv_text, outputs=OUTPUTS)
        self.addCleanup(ctx._tmp.cleanup)
        mmm.adstock_saturation(ctx)
        return ctx


class Recovery(Case):
    def test_recovers_known_effects_over_20_seeds(self):
        """20 seeded series (104 weeks, 3 channels; examples/make_mmm.py, noise sd 15
        against mean sales of about 1400): a seed passes when every channel's ROI
        is within 10 % (relative) of the true ROI and every adstock decay within
        0.1 of the true one.  What the method achieves: 18 of 20 seeds pass
        (tv's and online's ROI are within 6 % on every seed; radio's, the
        smallest channel, misses 10 % on two seeds, at 13 % and 22 %, where the
        data favour a concave curve), so the test asks for >= 18 of 20, and for
        every seed: ROI within 30 % and every decay within 0.1."""
        passed, worst_roi, worst_lam = 0, 0.0, 0.0
        for seed in range(20):
            cols, truth = make_mmm.simulate(seed)
            ctx = self.fit({"y": "sales", "channels": CHANNELS, "time": "week"}, csv_text=csv_text(cols))
            model = ctx.output_json("model.json")
            metrics = ctx.metrics()
            ok = True
            for ch in model["channels"]:
                t = truth["channels"][ch["name"]]
                roi_err = abs(ch["roi"] / t["roi"] - 1)
                lam_err = abs(ch["lambda"] - t["lambda"])
                self.assertEqual(metrics["roi_" + ch["name"]], ch["roi"])
                worst_roi, worst_lam = max(worst_roi, roi_err), max(worst_lam, lam_err)
                ok &= roi_err <= 0.10 and lam_err <= 0.1
            passed += ok
        self.assertGreaterEqual(passed, 18)
        self.assertLessEqual(worst_roi, 0.30)
        self.assertLessEqual(worst_lam, 0.1)


class ShippedData(Case):
    PARAMS = {"y": "sales", "channels": CHANNELS, "time": "week"}

    def setUp(self):
        self.df = pd.read_csv(os.path.join(EXAMPLES, "mmm.csv"))
        self.ctx = self.fit(self.PARAMS, csv_path=os.path.join(EXAMPLES, "mmm.csv"))
        self.model = self.ctx.output_json("model.json")

    def terms(self, model, df, scale=None):
        cols = []
        for ch in model["channels"]:
            x = df[ch["name"]].to_numpy(float) * (1 if scale is None else scale.get(ch["name"], 1))
            cols.append(effect(x, ch["lambda"], ch["K"], ch["S"], ch["beta"], ch["mean_spend"]))
        return np.column_stack(cols)

    def test_linear_part_equals_lsq_linear(self):
        """At the fitted (lambda, K, S), base and beta are scipy.optimize.lsq_linear's
        bounded least squares (base free, beta >= 0), called directly."""
        y = self.df["sales"].to_numpy(float)
        unit = self.terms(self.model, self.df) / np.array([ch["beta"] for ch in self.model["channels"]])
        design = np.column_stack([np.ones(len(y)), unit])
        ref = optimize.lsq_linear(design, y, bounds=([-np.inf, 0, 0, 0], np.inf), method="bvls", tol=1e-14)
        self.assertTrue(close(self.model["base"], ref.x[0], rel=1e-8))
        for ch, b in zip(self.model["channels"], ref.x[1:]):
            self.assertTrue(close(ch["beta"], b, rel=1e-8), (ch["name"], ch["beta"], b))

    def test_fit_is_a_minimum_least_squares_cannot_improve(self):
        """scipy.optimize.least_squares, called directly on an independent
        implementation of the variable-projection objective, started at the
        method's estimate, does not lower the residual sum of squares by more
        than 1e-6 (relative); and that sum is below the one at the true parameters."""
        y = self.df["sales"].to_numpy(float)
        X = self.df[CHANNELS].to_numpy(float)
        means = X.mean(axis=0)

        def residuals(theta):
            unit = np.column_stack(
                [effect(X[:, c], theta[c], math.exp(theta[3 + c]), math.exp(theta[6 + c]), 1.0, means[c]) for c in range(3)]
            )
            design = np.column_stack([np.ones(len(y)), unit])
            sol = optimize.lsq_linear(design, y, bounds=([-np.inf, 0, 0, 0], np.inf), method="bvls", tol=1e-14)
            return y - design @ sol.x

        chans = self.model["channels"]
        theta = np.array([c["lambda"] for c in chans] + [math.log(c["K"]) for c in chans] + [math.log(c["S"]) for c in chans])
        r0 = residuals(theta)
        rss = float(r0 @ r0)
        self.assertTrue(close(rss, self.model["rss"], rel=1e-9))
        lo = np.array([0.0] * 3 + [math.log(0.01)] * 3 + [math.log(0.5)] * 3)
        hi = np.array([0.9] * 3 + [math.log(100)] * 3 + [math.log(3)] * 3)
        ref = optimize.least_squares(residuals, theta, bounds=(lo, hi), method="trf")
        self.assertGreater(2 * ref.cost, rss * (1 - 1e-6))
        truth = np.array(
            [make_mmm.TRUTH[c]["lambda"] for c in CHANNELS]
            + [math.log(make_mmm.TRUTH[c]["K"]) for c in CHANNELS]
            + [math.log(make_mmm.TRUTH[c]["S"]) for c in CHANNELS]
        )
        rt = residuals(truth)
        self.assertLess(rss, float(rt @ rt))

    def test_outputs_contributions_roi_mroi(self):
        ctx, model, df = self.ctx, self.model, self.df
        y = df["sales"].to_numpy(float)
        terms = self.terms(model, df)
        fitted = model["base"] + terms.sum(axis=1)
        table = read_table(ctx.output("contributions.csv"))
        self.assertEqual(list(table[0]), ["period", "actual", "fitted", "base"] + [f"contribution_{c}" for c in CHANNELS])
        self.assertEqual([r["period"] for r in table], list(df["week"]))
        for i, r in enumerate(table):
            self.assertTrue(close(r["actual"], y[i]))
            self.assertTrue(close(r["fitted"], fitted[i]))
            self.assertTrue(close(r["base"], model["base"]))
            parts = [float(r[f"contribution_{c}"]) for c in CHANNELS]
            for got, want in zip(parts, terms[i]):
                self.assertTrue(close(got, want, rel=1e-9, abs_=1e-9))
            self.assertTrue(close(float(r["base"]) + sum(parts), float(r["fitted"])))
        rss = float(((y - fitted) ** 2).sum())
        metrics = ctx.metrics()
        self.assertTrue(close(metrics["rmse"], math.sqrt(rss / len(y))))
        self.assertTrue(close(metrics["r2"], 1 - rss / float(((y - y.mean()) ** 2).sum())))
        self.assertGreater(metrics["r2"], 0.95)
        roi = {r["channel"]: r for r in read_table(ctx.output("roi.csv"))}
        self.assertEqual(list(roi), CHANNELS)
        for c, name in enumerate(CHANNELS):
            spend = df[name].sum()
            total = terms[:, c].sum()
            self.assertTrue(close(roi[name]["total_spend"], spend))
            self.assertTrue(close(roi[name]["total_contribution"], total))
            self.assertTrue(close(roi[name]["roi"], total / spend))
            self.assertTrue(close(metrics[f"roi_{name}"], total / spend))
            # mROI: derivative of the total contribution when every period's spend is scaled
            h = 1e-5
            up = self.terms(model, df, {name: 1 + h})[:, c].sum()
            down = self.terms(model, df, {name: 1 - h})[:, c].sum()
            self.assertTrue(close(roi[name]["mroi"], (up - down) / (2 * h * spend), rel=1e-6))
        with open(ctx.output("plot.png"), "rb") as f:
            self.assertEqual(f.read(8), b"\x89PNG\r\n\x1a\n")
        self.assertEqual(model["last_period"], df["week"].iloc[-1])

    def test_rows_in_any_order_give_the_same_fit(self):
        cols = {c: list(self.df[c]) for c in self.df.columns}
        order = np.random.default_rng(3).permutation(len(self.df))
        ctx = self.fit(self.PARAMS, csv_text=csv_text(cols, order))
        model = ctx.output_json("model.json")
        for a, b in zip(model["channels"], self.model["channels"]):
            for k in ("lambda", "K", "S", "beta", "roi", "final_adstock"):
                self.assertTrue(close(a[k], b[k], rel=1e-9), (k, a[k], b[k]))
        self.assertEqual([r["period"] for r in read_table(ctx.output("contributions.csv"))], list(self.df["week"]))

    def test_predict_replays_and_continues(self):
        model = self.model
        # "carryover": false on the first row starts from zero adstock: the data's fit again
        rows = [{c: float(v) for c, v in zip(CHANNELS, r)} for r in self.df[CHANNELS].to_numpy()]
        rows[0]["carryover"] = False
        got = mmm.predict(model, rows)
        fitted = [float(r["fitted"]) for r in read_table(self.ctx.output("contributions.csv"))]
        for g, f in zip(got, fitted):
            self.assertTrue(close(g, f))
        # default: carries on from the fitted final adstock
        nxt = [{"tv": 100.0, "radio": 0.0, "online": 40.0}, {"tv": 0.0, "radio": 30.0, "online": 0.0}]
        want = np.full(2, model["base"])
        for ch in model["channels"]:
            x = np.concatenate([self.df[ch["name"]].to_numpy(float), [r[ch["name"]] for r in nxt]])
            want = want + effect(x, ch["lambda"], ch["K"], ch["S"], ch["beta"], ch["mean_spend"])[-2:]
        got = mmm.predict(model, nxt)
        for g, w in zip(got, want):
            self.assertTrue(close(g, w))
        self.assertEqual(mmm.predict(self.ctx.output("model.json"), nxt), got)
        with self.assertRaises(KeyError):
            mmm.predict(model, [{"tv": 1.0, "radio": 2.0}])
        with self.assertRaises(ValueError):
            mmm.predict(model, [{"tv": 1.0, "radio": 2.0, "online": "x"}])
        with self.assertRaises(ValueError):
            mmm.predict(model, [{"tv": -1.0, "radio": 2.0, "online": 1.0}])


class Options(Case):
    def test_trend_and_prediction_past_the_data(self):
        """With a linear trend in the simulated sales, trend=true recovers it, and
        predict continues the trend and the adstock past the data."""
        cols, truth = make_mmm.simulate(5, n=104, extra=6)
        n = 104
        cols["sales"] = cols["sales"] + 2.0 * np.arange(n + 6)
        train = {k: v[:n] for k, v in cols.items()}
        ctx = self.fit({"y": "sales", "channels": CHANNELS, "time": "week", "trend": True}, csv_text=csv_text(train))
        model = ctx.output_json("model.json")
        self.assertTrue(model["trend_enabled"])
        self.assertLess(abs(model["trend"] - 2.0), 0.2)
        for ch in model["channels"]:
            self.assertLess(abs(ch["lambda"] - truth["channels"][ch["name"]]["lambda"]), 0.1)
        rows = [{c: float(cols[c][i]) for c in CHANNELS} for i in range(n, n + 6)]
        got = mmm.predict(model, rows)
        t = np.arange(n + 6, dtype=float)
        want = model["base"] + model["trend"] * t
        for ch in model["channels"]:
            want = want + effect(np.asarray(cols[ch["name"]], float), ch["lambda"], ch["K"], ch["S"], ch["beta"], ch["mean_spend"])
        for g, w in zip(got, want[n:]):
            self.assertTrue(close(g, w))
        # and it predicts the simulated future sales to about the noise (sd 15)
        self.assertLess(float(np.sqrt(np.mean((np.array(got) - cols["sales"][n:]) ** 2))), 45)
        # without trend the fit is worse on trending data
        plain = self.fit({"y": "sales", "channels": CHANNELS, "time": "week"}, csv_text=csv_text(train))
        self.assertLess(ctx.metrics()["rmse"], plain.metrics()["rmse"])

    def test_max_lag_decay_bounds_lambda_and_seed_is_reproducible(self):
        path = os.path.join(EXAMPLES, "mmm.csv")
        params = {"y": "sales", "channels": CHANNELS, "max_lag_decay": 0.4, "restarts": 3, "random_state": 7}
        a = self.fit(params, csv_path=path).output_json("model.json")
        b = self.fit(params, csv_path=path).output_json("model.json")
        self.assertEqual(a, b)
        self.assertTrue(all(0 <= ch["lambda"] <= 0.4 for ch in a["channels"]))
        self.assertTrue(close(a["channels"][0]["lambda"], 0.4))  # tv's true decay is 0.6

    def test_metric_names_are_sanitised(self):
        cols, _ = make_mmm.simulate(1)
        renamed = {"week": cols["week"], "sales": cols["sales"], "TV Spend": cols["tv"],
                   "Radio (local)": cols["radio"], "online-display": cols["online"]}
        ctx = self.fit({"y": "sales", "channels": ["TV Spend", "Radio (local)", "online-display"]},
                       csv_text=csv_text(renamed))
        names = set(ctx.metrics())
        self.assertEqual(names, {"r2", "rmse", "roi_tv_spend", "roi_radio_local", "roi_online_display"})


class Errors(Case):
    PATH = os.path.join(EXAMPLES, "mmm.csv")

    def check(self, params, text=None, *needles):
        with self.assertRaises(ValueError) as cm:
            if text is None:
                self.fit(params, csv_path=self.PATH)
            else:
                self.fit(params, csv_text=text)
        for n in needles:
            self.assertIn(n, str(cm.exception))

    def test_errors(self):
        self.check({"y": "sales", "channels": []}, None, "channels")
        self.check({"y": "sales", "channels": ["tv", "press"]}, None, "press")
        self.check({"y": "sales", "channels": ["tv", "sales"]}, None, "sales")
        self.check({"y": "week", "channels": ["tv"]}, None, "'week'", "not numeric")
        self.check({"y": "sales", "channels": ["tv"], "max_lag_decay": 0.99}, None, "max_lag_decay")
        self.check({"y": "sales", "channels": ["tv"], "restarts": 0}, None, "restarts")
        self.check({"y": "sales", "channels": ["tv"], "random_state": -1}, None, "random_state")
        head = "week,sales,tv\n"
        self.check({"y": "sales", "channels": ["tv"]}, head + "1,10,1\n2,11,-2\n" * 10, "negative")
        self.check({"y": "sales", "channels": ["tv"]}, head + "1,10,1\n2,11,2\n", "too few")
        self.check({"y": "sales", "channels": ["tv"]}, head + "".join(f"{i},{10 + i % 3},\n" for i in range(20)), "empty")
        self.check({"y": "sales", "channels": ["tv"], "time": "week"},
                   head + "".join(f"{i % 10},{10 + i % 3},{i % 4}\n" for i in range(20)), "repeats")
        self.check({"y": "sales", "channels": ["tv"], "time": "week"},
                   head + "".join(f"w{i},{10 + i % 3},{i % 4}\n" for i in range(20)), "neither numbers nor dates")
        self.check({"y": "sales", "channels": ["tv"]}, head + "".join(f"{i},{10 + i % 3},0\n" for i in range(20)), "no spend")


if __name__ == "__main__":
    unittest.main()
