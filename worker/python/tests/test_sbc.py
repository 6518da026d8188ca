"""Tests of the `sbc` children (worker/python/methods/sbc.py).

The posteriors are checked against independent computations (the normal
mean's closed form; the regression's posterior mean is ridge regression with
penalty 1, as scikit-learn's Ridge computes it), and the ranks against what
SBC promises (Talts et al. 2018): uniform for the exact posterior, far from
uniform for an over- or under-confident one.
"""

import os
import sys
import unittest

import numpy as np
from scipy import stats
from sklearn.linear_model import Ridge

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from support import FakeContext  # noqa: E402

import sbc  # noqa: E402

DESIGN = "x1,x2\n" + "".join(f"{i % 7 - 3},{(i * 5) % 11 / 4}\n" for i in range(30))


def child(params, i, csv_text=DESIGN):
    ctx = FakeContext(params, csv_text=csv_text, outputs=["ranks.json"], task_index=i, task_count=params["simulations"])
    sbc.simulate(ctx)
    return ctx.output_json("ranks.json")


def uniformity_p(ranks, draws, bins):
    counts = np.bincount(np.asarray(ranks) * bins // (draws + 1), minlength=bins)
    return stats.chisquare(counts).pvalue


class PosteriorTest(unittest.TestCase):
    def test_normal_mean_posterior_is_the_closed_form(self):
        n, draws = 25, 200_000
        rng = np.random.default_rng([7, 3])
        truth, post = sbc.normal_mean(rng, n, draws, 1.0)
        # replay the same stream to get the data the child saw
        rng = np.random.default_rng([7, 3])
        mu = rng.normal(0.0, 1.0)
        y = rng.normal(mu, 1.0, size=n)
        self.assertEqual(truth["mu"], mu)
        self.assertAlmostEqual(np.mean(post["mu"]), y.sum() / (1 + n), delta=4 * (1 / (1 + n)) ** 0.5 / draws**0.5)
        self.assertAlmostEqual(np.std(post["mu"]), (1 / (1 + n)) ** 0.5, delta=0.01 * (1 / (1 + n)) ** 0.5)

    def test_regression_posterior_mean_is_ridge_with_penalty_one(self):
        X = np.column_stack([np.ones(30), np.arange(30) % 7 - 3.0, (np.arange(30) * 5 % 11) / 4])
        draws = 400_000
        rng = np.random.default_rng([1, 2])
        truth, post = sbc.linear_regression(rng, X, ["intercept", "x1", "x2"], draws, 1.0)
        rng = np.random.default_rng([1, 2])
        sigma2 = 1.0 / rng.gamma(sbc.A0, 1.0 / sbc.B0)
        beta = rng.normal(0.0, sigma2**0.5, size=3)
        y = X @ beta + rng.normal(0.0, sigma2**0.5, size=30)
        self.assertAlmostEqual(truth["sigma"], sigma2**0.5, places=12)
        ridge = Ridge(alpha=1.0, fit_intercept=False).fit(X, y).coef_
        for j, name in enumerate(["intercept", "x1", "x2"]):
            sd = np.std(post[name])
            self.assertAlmostEqual(np.mean(post[name]), ridge[j], delta=5 * sd / draws**0.5, msg=name)


class RanksTest(unittest.TestCase):
    def ranks(self, params, n):
        return [child(dict(params, simulations=n), i) for i in range(n)]

    def test_a_child_writes_its_ranks_and_is_reproducible(self):
        params = {"model": "linear_regression", "x": ["x1", "x2"], "simulations": 5, "seed": 11}
        a, b = child(params, 3), child(params, 3)
        self.assertEqual(a, b)
        self.assertEqual(set(a["ranks"]), {"intercept", "x1", "x2", "sigma"})
        self.assertEqual((a["simulation"], a["draws"], a["bins"]), (3, 99, 10))
        self.assertTrue(all(0 <= r <= 99 for r in a["ranks"].values()))
        self.assertNotEqual(child(params, 4)["truth"], a["truth"])

    def test_exact_posteriors_give_uniform_ranks(self):
        for params in ({"model": "normal_mean"}, {"model": "linear_regression", "x": ["x1", "x2"]}):
            docs = self.ranks(dict(params, seed=3), 300)
            for name in docs[0]["ranks"]:
                p = uniformity_p([d["ranks"][name] for d in docs], 99, 10)
                self.assertGreater(p, 0.001, f"{params['model']} {name}")

    def test_a_wrong_spread_is_flagged(self):
        for scale in (0.5, 2.0):
            docs = self.ranks({"model": "normal_mean", "posterior_scale": scale, "seed": 3}, 300)
            p = uniformity_p([d["ranks"]["mu"] for d in docs], 99, 10)
            self.assertLess(p, 1e-6, f"posterior_scale {scale}")

    def test_bad_params_are_errors_in_words(self):
        with self.assertRaisesRegex(ValueError, "draws \\+ 1 = 100"):
            child({"simulations": 2, "draws": 99, "bins": 7}, 0)
        with self.assertRaisesRegex(ValueError, "`model`"):
            child({"simulations": 2, "model": "gauss"}, 0)
        with self.assertRaisesRegex(ValueError, "`x`: column 'nope'"):
            child({"simulations": 2, "model": "linear_regression", "x": ["nope"]}, 0)
        with self.assertRaisesRegex(ValueError, "`x`"):
            child({"simulations": 2, "model": "linear_regression"}, 0)


if __name__ == "__main__":
    unittest.main()
