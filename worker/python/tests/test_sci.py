"""Tests of `sci.curve_fit` (worker/python/methods/sci.py).

References: NIST Statistical Reference Datasets, nonlinear regression
(https://www.itl.nist.gov/div898/strd/nls/nls_main.shtml), certified values of
Misra1a, Misra1d (the same data as Misra1a), DanWood and Rat42, shipped as
examples/misra1a.csv, examples/danwood.csv and examples/rat42.csv (sources in
the sibling .md files).
"""

import csv
import io
import json
import math
import os
import unittest
import warnings

import sys

import numpy as np
import pandas as pd
from scipy import optimize

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # support.py, with or without tests/__init__.py
from support import EXAMPLES, FakeContext, close  # noqa: E402

import sci  # noqa: E402

OUTPUTS = ("model.json", "parameters.csv", "fitted.csv", "plot.png")


class Case(unittest.TestCase):
    def fit(self, params, csv_path=None, csv_text=None):
        """Runs the method on a FakeContext (its temporary folder removed after the test)."""
        ctx = FakeContext(params, csv_path=csv_path, csv_text=csv_text, outputs=OUTPUTS)
        self.addCleanup(ctx._tmp.cleanup)
        sci.curve_fit(ctx)
        return ctx


def read_table(path):
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def direct(family, x, y, p0, sigma=None):
    """scipy.optimize.curve_fit called directly, as the method documents it."""
    f = sci.family_function(family)
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        return optimize.curve_fit(f, x, y, p0=p0, sigma=sigma, absolute_sigma=False, maxfev=10000)


def load(name):
    df = pd.read_csv(os.path.join(EXAMPLES, name))
    return df["x"].to_numpy(float), df["y"].to_numpy(float)


def parsed(text, *columns):
    """The columns as the method reads them (pandas' CSV parser, as ctx.read_csv)."""
    df = pd.read_csv(io.StringIO(text))
    return [df[c].to_numpy(float) for c in columns]


def synthetic(family, truth, x, noise, seed):
    """A seeded dataset from a known curve (for the families NIST has no dataset of)."""
    rng = np.random.default_rng(seed)
    y = sci.family_function(family)(x, *truth) + rng.normal(0, noise, x.size)
    text = "x,y\n" + "".join(f"{a!r},{b!r}\n" for a, b in zip(x, y))
    return text, parsed(text, "x", "y")


SYNTHETIC = {
    # family: (true parameters, x, noise sd)
    "exponential": ([2.0, 0.35], np.linspace(0, 10, 40), 0.5),
    "hill": ([100.0, 5.0, 2.5], np.geomspace(0.1, 100, 30), 1.5),
    "gompertz": ([50.0, 8.0, 0.6], np.linspace(0, 15, 35), 0.6),
    "logistic": ([10.0, 1.2, 4.0], np.linspace(0, 10, 30), 0.2),
    "michaelis_menten": ([5.0, 2.0], np.linspace(0.2, 20, 25), 0.05),
    "power": ([3.0, 0.7], np.linspace(0.5, 30, 30), 0.2),
    "exponential_association": ([20.0, 0.3], np.linspace(0, 20, 30), 0.3),
}


class SameAsScipy(Case):
    """The method's fit equals scipy.optimize.curve_fit's on the same data and start."""

    def test_misra1a_given_start(self):
        x, y = load("misra1a.csv")
        ctx = self.fit({"x": "x", "y": "y", "family": "exponential_association", "start": "500, 0.0001"},
                  csv_path=os.path.join(EXAMPLES, "misra1a.csv"))
        popt, pcov = direct("exponential_association", x, y, [500, 1e-4])
        model = ctx.output_json("model.json")
        self.assertEqual(model["parameter_names"], ["a", "b"])
        for name, ref in zip(("a", "b"), popt):
            self.assertTrue(close(model["parameters"][name], ref), (name, model["parameters"][name], ref))
            self.assertTrue(close(ctx.metrics()[name], ref))
        for i in range(2):
            for j in range(2):
                self.assertTrue(close(model["covariance"][i][j], pcov[i, j]))
        table = read_table(ctx.output("parameters.csv"))
        self.assertEqual([r["name"] for r in table], ["a", "b"])
        tq = 2.1788128296634177  # t(0.975, 12)
        for r, ref, var in zip(table, popt, np.diag(pcov)):
            self.assertTrue(close(r["estimate"], ref))
            self.assertTrue(close(r["std_error"], math.sqrt(var)))
            self.assertTrue(close(r["ci95_lower"], ref - tq * math.sqrt(var), rel=1e-9))
            self.assertTrue(close(r["ci95_upper"], ref + tq * math.sqrt(var), rel=1e-9))
        fitted = read_table(ctx.output("fitted.csv"))
        yhat = sci.family_function("exponential_association")(x, *popt)
        self.assertEqual(len(fitted), 14)
        for r, a, b, c in zip(fitted, x, y, yhat):
            self.assertTrue(close(r["x"], a) and close(r["y"], b))
            self.assertTrue(close(r["fitted"], c))
            self.assertTrue(close(r["residual"], b - c, rel=1e-7, abs_=1e-10))
        rss = float(((y - yhat) ** 2).sum())
        m = ctx.metrics()
        self.assertTrue(close(m["rmse"], math.sqrt(rss / 14)))
        self.assertTrue(close(m["r2"], 1 - rss / float(((y - y.mean()) ** 2).sum())))
        with open(ctx.output("plot.png"), "rb") as f:
            self.assertEqual(f.read(8), b"\x89PNG\r\n\x1a\n")
        # predict on the model as JSON reproduces the fitted values
        got = sci.predict(json.loads(json.dumps(model)), [{"x": v} for v in x])
        for g, want in zip(got, yhat):
            self.assertTrue(close(g, want))

    def test_every_family_default_start(self):
        """Default (grid) start: same as curve_fit from that start, and near the truth."""
        for i, (family, (truth, xs, noise)) in enumerate(SYNTHETIC.items()):
            with self.subTest(family=family):
                text, (xs, y) = synthetic(family, truth, xs, noise, seed=100 + i)
                ctx = self.fit({"x": "x", "y": "y", "family": family}, csv_text=text)
                model = ctx.output_json("model.json")
                self.assertEqual(model["start_source"], "grid guess")
                guess = sci.initial_guess(family, xs, y)
                self.assertEqual(model["start"], guess)
                popt, pcov = direct(family, xs, y, guess)
                for name, ref, want in zip(model["parameter_names"], popt, truth):
                    got = model["parameters"][name]
                    self.assertTrue(close(got, ref), (name, got, ref))
                    self.assertLess(abs(got - want) / abs(want), 0.15, (name, got, want))
                se = [r["std_error"] for r in model["table"]]
                for s, var in zip(se, np.diag(pcov)):
                    self.assertTrue(close(s, math.sqrt(var)))

    def test_sigma_weights(self):
        xs = np.linspace(0.2, 20, 25)
        rng = np.random.default_rng(7)
        sigma = 0.02 + 0.02 * xs
        y = 5 * xs / (2 + xs) + rng.normal(0, sigma)
        text = "conc,rate,sd\n" + "".join(f"{a!r},{b!r},{c!r}\n" for a, b, c in zip(xs, y, sigma))
        xs, y, sigma = parsed(text, "conc", "rate", "sd")
        ctx = self.fit({"x": "conc", "y": "rate", "sigma": "sd", "family": "michaelis_menten", "start": "4,1"},
                  csv_text=text)
        popt, pcov = direct("michaelis_menten", xs, y, [4, 1], sigma=sigma)
        model = ctx.output_json("model.json")
        self.assertTrue(model["weighted"])
        for k, name in enumerate(("vmax", "km")):
            self.assertTrue(close(model["parameters"][name], popt[k]))
            self.assertTrue(close(model["table"][k]["std_error"], math.sqrt(pcov[k, k])))
        unweighted = direct("michaelis_menten", xs, y, [4, 1])[0]
        self.assertFalse(close(unweighted[1], popt[1], rel=1e-6))  # the weights matter

    def test_rows_with_empty_cells_are_left_out(self):
        text = "x,y\n77.6,10.07\n,3\n114.9,14.73\n141.1,\n190.8,23.93\n239.9,29.61\n289.0,35.18\n"
        ctx = self.fit({"x": "x", "y": "y", "family": "exponential_association", "start": "250,0.0005"},
                  csv_text=text)
        x = np.array([77.6, 114.9, 190.8, 239.9, 289.0])
        y = np.array([10.07, 14.73, 23.93, 29.61, 35.18])
        popt, _ = direct("exponential_association", x, y, [250, 5e-4])
        model = ctx.output_json("model.json")
        self.assertEqual(model["n"], 5)
        self.assertTrue(close(model["parameters"]["b"], popt[1]))


class NistCertified(Case):
    """NIST StRD nonlinear regression certified values
    (https://www.itl.nist.gov/div898/strd/nls/nls_main.shtml): estimates to at
    least 6 significant digits (relative error < 1e-6) from NIST's start 1 and
    start 2 and from the method's own guess; certified standard deviations to
    4 digits (< 1e-4) and residual sums of squares to 9 digits."""

    def check(self, csv_name, family, starts, certified, sds, rss):
        for start in starts + [None]:
            with self.subTest(data=csv_name, family=family, start=start):
                params = {"x": "x", "y": "y", "family": family}
                if start is not None:
                    params["start"] = ",".join(repr(float(v)) for v in start)
                ctx = self.fit(params, csv_path=os.path.join(EXAMPLES, csv_name))
                model = ctx.output_json("model.json")
                for row, want in zip(model["table"], certified):
                    self.assertLess(abs(row["estimate"] - want) / abs(want), 1e-6, (row, want))
                for row, want in zip(model["table"], sds):
                    if want is not None:
                        self.assertLess(abs(row["std_error"] - want) / want, 1e-4, (row, want))
                self.assertLess(abs(model["rss"] - rss) / rss, 1e-9)

    def test_misra1a_exponential_association(self):
        # Misra1a: y = b1*(1 - exp(-b2*x)); start 1 (500, 1e-4), start 2 (250, 5e-4)
        self.check("misra1a.csv", "exponential_association", [[500, 1e-4], [250, 5e-4]],
                   [2.3894212918e02, 5.5015643181e-04], [2.7070075241e00, 7.2668688436e-06],
                   1.2455138894e-01)

    def test_misra1d_michaelis_menten(self):
        # Misra1d (same data as Misra1a): y = b1*b2*x/(1 + b2*x) = vmax*x/(km + x)
        # with vmax = b1, km = 1/b2 (so sd(km) = sd(b2)/b2**2, exactly, for the
        # linearised covariance); starts 1 (500, 1e-4) and 2 (450, 3e-4).
        b1, b2, sd1, sd2 = 4.3736970754e02, 3.0227324449e-04, 3.6489174345e00, 2.9334354479e-06
        self.check("misra1a.csv", "michaelis_menten", [[500, 1 / 1e-4], [450, 1 / 3e-4]],
                   [b1, 1 / b2], [sd1, sd2 / b2 ** 2], 5.6419295283e-02)

    def test_danwood_power(self):
        # DanWood: y = b1*x**b2; start 1 (1, 5), start 2 (0.7, 4)
        self.check("danwood.csv", "power", [[1, 5], [0.7, 4]],
                   [7.6886226176e-01, 3.8604055871e00], [1.8281973860e-02, 5.1726610913e-02],
                   4.3173084083e-03)

    def test_rat42_logistic(self):
        # Rat42: y = b1/(1 + exp(b2 - b3*x)) = L/(1 + exp(-k*(x - x0))) with L = b1,
        # k = b3, x0 = b2/b3 (NIST gives no covariance, so x0's sd is not checked);
        # start 1 (100, 1, 0.1), start 2 (75, 2.5, 0.07).
        b1, b2, b3 = 7.2462237576e01, 2.6180768402e00, 6.7359200066e-02
        self.check("rat42.csv", "logistic", [[100, 0.1, 1 / 0.1], [75, 0.07, 2.5 / 0.07]],
                   [b1, b3, b2 / b3], [1.7340283401e00, 3.4465663377e-03, None], 8.0565229338e00)


class Errors(Case):
    MISRA = os.path.join(EXAMPLES, "misra1a.csv")

    def test_unknown_family_lists_the_families(self):
        with self.assertRaises(ValueError) as cm:
            self.fit({"x": "x", "y": "y", "family": "cubic"}, csv_path=self.MISRA)
        for name in sci.FAMILIES:
            self.assertIn(name, str(cm.exception))

    def test_non_numeric_column(self):
        with self.assertRaises(ValueError) as cm:
            self.fit({"x": "x", "y": "y", "family": "power"}, csv_text="x,y\n1,2\n2,abc\n3,4\n4,5\n")
        self.assertIn("'y'", str(cm.exception))
        self.assertIn("not numeric", str(cm.exception))

    def test_missing_column(self):
        with self.assertRaises(ValueError) as cm:
            self.fit({"x": "pressure", "y": "y", "family": "power"}, csv_path=self.MISRA)
        self.assertIn("pressure", str(cm.exception))

    def test_no_convergence_says_to_give_start(self):
        with self.assertRaises(ValueError) as cm:
            self.fit({"x": "x", "y": "y", "family": "exponential", "start": "1, 1000"}, csv_path=self.MISRA)
        self.assertIn("did not converge", str(cm.exception))
        self.assertIn("`start`", str(cm.exception))

    def test_bad_start(self):
        with self.assertRaises(ValueError) as cm:
            self.fit({"x": "x", "y": "y", "family": "logistic", "start": "1,2"}, csv_path=self.MISRA)
        self.assertIn("`start`", str(cm.exception))
        with self.assertRaises(ValueError):
            self.fit({"x": "x", "y": "y", "family": "logistic", "start": "1,2,x"}, csv_path=self.MISRA)

    def test_too_few_rows_and_negative_x(self):
        with self.assertRaises(ValueError):
            self.fit({"x": "x", "y": "y", "family": "logistic"}, csv_text="x,y\n1,2\n2,3\n3,3.5\n")
        with self.assertRaises(ValueError) as cm:
            self.fit({"x": "x", "y": "y", "family": "power"}, csv_text="x,y\n-1,2\n2,3\n3,3.5\n4,4\n")
        self.assertIn("x >= 0", str(cm.exception))

    def test_non_positive_sigma(self):
        with self.assertRaises(ValueError) as cm:
            self.fit({"x": "x", "y": "y", "sigma": "s", "family": "power"},
                csv_text="x,y,s\n1,2,1\n2,3,0\n3,3.5,1\n4,4,1\n")
        self.assertIn("sigma", str(cm.exception))

    def test_predict_errors(self):
        ctx = self.fit({"x": "x", "y": "y", "family": "exponential_association"}, csv_path=self.MISRA)
        model = ctx.output_json("model.json")
        with self.assertRaises(KeyError):
            sci.predict(model, [{"pressure_kpa": 3}])
        with self.assertRaises(ValueError):
            sci.predict(model, [{"x": "abc"}])
        # a model file path works as well as the parsed JSON
        self.assertEqual(sci.predict(ctx.output("model.json"), [{"x": 100.0}]),
                         sci.predict(model, [{"x": 100.0}]))


if __name__ == "__main__":
    unittest.main()
