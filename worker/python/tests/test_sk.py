"""Tests of worker/python/methods/sk.py (sklearn.logistic_regression, sklearn.random_forest,
sklearn.gradient_boosting and their predict): each method is fitted on a shipped dataset and
compared with scikit-learn called directly here on the same data, split and parameters.

Datasets: examples/churn.csv (binary, synthetic, examples/make_churn.py), examples/longley.csv
(NIST StRD Longley data, regression), examples/iris.csv (Fisher 1936, multiclass; see
examples/iris.md). Independent reference: the unpenalised logistic fit of churn is also
compared with statsmodels' Logit maximum-likelihood estimate.
"""

import csv
import json
import os
import pickle
import sys
import unittest

import numpy as np
import pandas as pd

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # support.py, with or without tests/__init__.py
from support import EXAMPLES, FakeContext, close  # noqa: E402

import sk  # noqa: E402

from sklearn.ensemble import (  # noqa: E402
    GradientBoostingClassifier,
    GradientBoostingRegressor,
    RandomForestClassifier,
    RandomForestRegressor,
)
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import (
    accuracy_score,
    log_loss,
    mean_absolute_error,
    mean_squared_error,
    r2_score,
    roc_auc_score,
)
from sklearn.model_selection import KFold, StratifiedKFold, cross_val_score, train_test_split
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import StandardScaler

CHURN = os.path.join(EXAMPLES, "churn.csv")
LONGLEY = os.path.join(EXAMPLES, "longley.csv")
IRIS = os.path.join(EXAMPLES, "iris.csv")
CHURN_X = ["tenure_months", "monthly_charges", "support_calls"]
IRIS_X = ["sepal_length", "sepal_width", "petal_length", "petal_width"]
LONGLEY_X = ["gnp_deflator", "gnp", "unemployed", "armed_forces", "population", "year"]

LOGREG_OUT = ["model.json", "coefficients.csv", "metrics.json", "plot.png"]
ENSEMBLE_OUT = ["model.pkl", "feature_importance.csv", "metrics.json", "plot.png"]
PNG = b"\x89PNG\r\n\x1a\n"


def data(path, y, x, stratify=True, test_size=0.25, random_state=0):
    """(X_train, X_test, y_train, y_test) as the methods split them (and the full X, y)."""
    df = pd.read_csv(path)
    X = df[x].to_numpy(dtype=float)
    yv = df[y].to_numpy()
    if test_size == 0:
        return X, None, yv, None
    return train_test_split(X, yv, test_size=test_size, random_state=random_state, stratify=yv if stratify else None)


def rows_of(X, names):
    return [{n: float(v) for n, v in zip(names, r)} for r in X]


class Checks(unittest.TestCase):
    def fit(self, method, params, path=None, text=None, outputs=LOGREG_OUT):
        """Runs a method on a FakeContext whose temporary folder goes when the test ends."""
        ctx = FakeContext(params, csv_path=path, csv_text=text, outputs=outputs)
        self.addCleanup(ctx._tmp.cleanup)
        method(ctx)
        return ctx

    def assertClose(self, a, b, rel=1e-9, msg=None):
        self.assertTrue(close(a, b, rel=rel), msg or f"{a!r} != {b!r} (rel {rel})")

    def assertAllClose(self, a, b, rel=1e-9):
        a = np.asarray(a, dtype=float)
        b = np.asarray(b, dtype=float)
        self.assertEqual(a.shape, b.shape)
        for u, v in zip(a.ravel(), b.ravel()):
            self.assertClose(u, v, rel)

    def assertPng(self, ctx):
        with open(ctx.output("plot.png"), "rb") as f:
            self.assertEqual(f.read(8), PNG)

    def assertClassMetrics(self, got, est, X, y, prefix=""):
        proba = est.predict_proba(X)
        classes = est.classes_
        self.assertClose(got[prefix + "accuracy"], accuracy_score(y, est.predict(X)))
        self.assertClose(got[prefix + "log_loss"], log_loss(y, proba, labels=classes))
        if len(classes) == 2:
            auc = roc_auc_score(y, proba[:, 1])
        else:
            auc = roc_auc_score(y, proba, multi_class="ovr", average="macro", labels=classes)
        self.assertClose(got[prefix + "roc_auc"], auc)

    def assertRegMetrics(self, got, est, X, y, prefix=""):
        pred = est.predict(X)
        self.assertClose(got[prefix + "r2"], r2_score(y, pred))
        self.assertClose(got[prefix + "rmse"], np.sqrt(mean_squared_error(y, pred)))
        self.assertClose(got[prefix + "mae"], mean_absolute_error(y, pred))

    def assertClassPredictions(self, got, est, X):
        proba = est.predict_proba(X)
        labels = est.predict(X)
        classes = list(est.classes_)
        self.assertEqual(len(got), len(X))
        for g, label, p in zip(got, labels, proba):
            self.assertEqual(g["class"], label.item() if hasattr(label, "item") else label)
            self.assertClose(g["probability"], p[classes.index(label)])
            self.assertEqual(sorted(g["probabilities"]), sorted(str(c) for c in classes))
            for k, c in enumerate(classes):
                self.assertClose(g["probabilities"][str(c)], p[k])
        json.dumps(got)  # JSON-able


# ---------------------------------------------------------------------------------------------


class LogisticRegressionTest(Checks):
    def test_churn_binary_matches_sklearn(self):
        ctx = self.fit(sk.logistic_regression, {"y": "churned", "C": 0.5, "cv_folds": 5, "random_state": 3}, CHURN)
        Xtr, Xte, ytr, yte = data(CHURN, "churned", CHURN_X, random_state=3)
        est = LogisticRegression(C=0.5, max_iter=1000, random_state=3).fit(Xtr, ytr)

        model = ctx.output_json("model.json")
        self.assertEqual(model["inputs"], CHURN_X)
        self.assertEqual(model["classes"], [0, 1])
        self.assertEqual(model["coefficient_classes"], [1])
        self.assertIsNone(model["standardize"])
        self.assertAllClose(model["coefficients"], est.coef_)
        self.assertAllClose(model["intercepts"], est.intercept_)

        m = ctx.metrics()
        self.assertClassMetrics(m, est, Xte, yte)
        self.assertClassMetrics(m, est, Xtr, ytr, prefix="train_")
        cv = cross_val_score(
            LogisticRegression(C=0.5, max_iter=1000, random_state=3), Xtr, ytr,
            cv=StratifiedKFold(n_splits=5, shuffle=True, random_state=3), scoring="accuracy",
        )
        self.assertClose(m["cv_accuracy_mean"], cv.mean())
        self.assertClose(m["cv_accuracy_std"], cv.std())

        doc = ctx.output_json("metrics.json")
        self.assertEqual((doc["n_train"], doc["n_test"]), (225, 75))
        self.assertEqual(doc["positive_class"], 1)
        self.assertTrue(doc["converged"])
        self.assertAllClose(doc["cv"]["accuracy"]["folds"], cv)
        self.assertClose(doc["holdout"]["accuracy"], m["accuracy"])

        with open(ctx.output("coefficients.csv"), encoding="utf-8") as f:
            table = list(csv.DictReader(f))
        self.assertEqual([r["term"] for r in table], ["(intercept)"] + CHURN_X)
        self.assertEqual({r["class"] for r in table}, {"1"})
        self.assertAllClose([float(r["coefficient"]) for r in table], np.r_[est.intercept_, est.coef_[0]])
        self.assertAllClose([float(r["coefficient_original_scale"]) for r in table], np.r_[est.intercept_, est.coef_[0]])
        self.assertPng(ctx)

        # predict with the model as the endpoint gets it (parsed JSON) on the hold-out rows
        got = sk.predict(model, rows_of(Xte, CHURN_X))
        self.assertClassPredictions(got, est, Xte)
        for g, p in zip(got, est.predict_proba(Xte)):
            self.assertClose(g["probabilities"]["1"], p[1])

    def test_churn_unpenalised_matches_sklearn_and_statsmodels_logit(self):
        import statsmodels.api as sm

        ctx = self.fit(sk.logistic_regression, {"y": "churned", "penalty": "none", "test_size": 0.0}, CHURN)
        X, _, y, _ = data(CHURN, "churned", CHURN_X, test_size=0)
        est = LogisticRegression(penalty=None, max_iter=1000, random_state=0).fit(X, y)
        model = ctx.output_json("model.json")
        got = np.r_[model["intercepts"], model["coefficients"][0]]
        self.assertAllClose(got, np.r_[est.intercept_, est.coef_[0]])
        # Independent reference: the maximum-likelihood estimate of statsmodels' Logit (Newton).
        mle = sm.Logit(y, sm.add_constant(X)).fit(disp=0, method="newton", tol=1e-12, maxiter=100).params
        self.assertAllClose(got, mle, rel=1e-4)
        # no hold-out: only training metrics
        m = ctx.metrics()
        self.assertNotIn("accuracy", m)
        self.assertClassMetrics(m, est, X, y, prefix="train_")
        doc = ctx.output_json("metrics.json")
        self.assertIsNone(doc["holdout"])
        self.assertEqual((doc["n_train"], doc["n_test"]), (300, 0))
        self.assertPng(ctx)

    def test_iris_multinomial_matches_sklearn(self):
        ctx = self.fit(sk.logistic_regression, {"y": "species", "C": 2.0, "cv_folds": 4}, IRIS)
        Xtr, Xte, ytr, yte = data(IRIS, "species", IRIS_X)
        est = LogisticRegression(C=2.0, max_iter=1000, random_state=0).fit(Xtr, ytr)
        model = ctx.output_json("model.json")
        self.assertEqual(model["kind"], "multinomial")
        self.assertEqual(model["classes"], ["setosa", "versicolor", "virginica"])
        self.assertEqual(model["coefficient_classes"], model["classes"])
        self.assertAllClose(model["coefficients"], est.coef_)
        self.assertAllClose(model["intercepts"], est.intercept_)
        m = ctx.metrics()
        self.assertClassMetrics(m, est, Xte, yte)
        cv = cross_val_score(
            LogisticRegression(C=2.0, max_iter=1000, random_state=0), Xtr, ytr,
            cv=StratifiedKFold(n_splits=4, shuffle=True, random_state=0), scoring="accuracy",
        )
        self.assertClose(m["cv_accuracy_mean"], cv.mean())
        self.assertClose(m["cv_accuracy_std"], cv.std())
        with open(ctx.output("coefficients.csv"), encoding="utf-8") as f:
            table = list(csv.DictReader(f))
        self.assertEqual(len(table), 3 * 5)
        self.assertEqual([r["class"] for r in table[::5]], model["classes"])
        self.assertPng(ctx)
        self.assertClassPredictions(sk.predict(model, rows_of(Xte, IRIS_X)), est, Xte)

    def test_iris_standardized_matches_pipeline(self):
        ctx = self.fit(sk.logistic_regression, {"y": "species", "standardize": True, "random_state": 7}, IRIS)
        Xtr, Xte, ytr, yte = data(IRIS, "species", IRIS_X, random_state=7)
        pipe = Pipeline(
            [("scale", StandardScaler()), ("logreg", LogisticRegression(max_iter=1000, random_state=7))]
        ).fit(Xtr, ytr)
        model = ctx.output_json("model.json")
        self.assertAllClose(model["standardize"]["mean"], pipe[0].mean_)
        self.assertAllClose(model["standardize"]["scale"], pipe[0].scale_)
        self.assertAllClose(model["coefficients"], pipe[-1].coef_)
        self.assertAllClose(model["intercepts"], pipe[-1].intercept_)
        self.assertClassMetrics(ctx.metrics(), pipe, Xte, yte)
        self.assertClassPredictions(sk.predict(model, rows_of(Xte, IRIS_X)), pipe, Xte)
        # the original-scale coefficients give the pipeline's decision function on raw inputs
        with open(ctx.output("coefficients.csv"), encoding="utf-8") as f:
            table = list(csv.DictReader(f))
        orig = np.array([float(r["coefficient_original_scale"]) for r in table]).reshape(3, 5)
        self.assertAllClose(orig[:, 0] + Xte @ orig[:, 1:].T, pipe.decision_function(Xte), rel=1e-9)

    def test_predict_reads_model_json_path(self):
        ctx = self.fit(sk.logistic_regression, {"y": "churned"}, CHURN)
        rows = [{"tenure_months": 5, "monthly_charges": 99.5, "support_calls": 6, "extra": "ignored"}]
        self.assertEqual(sk.predict(ctx.output("model.json"), rows), sk.predict(ctx.output_json("model.json"), rows))
        self.assertEqual(sk.predict(ctx.output_json("model.json"), []), [])

    def test_errors(self):
        with self.assertRaisesRegex(ValueError, "'nope'"):
            self.fit(sk.logistic_regression, {"y": "nope"}, CHURN)
        with self.assertRaisesRegex(ValueError, "C only applies"):
            self.fit(sk.logistic_regression, {"y": "churned", "penalty": "none", "C": 3.0}, CHURN)
        with self.assertRaisesRegex(ValueError, "penalty"):
            self.fit(sk.logistic_regression, {"y": "churned", "penalty": "l1"}, CHURN)
        with self.assertRaisesRegex(ValueError, "non-integer.*regression"):
            self.fit(sk.logistic_regression, {"y": "monthly_charges"}, CHURN)
        with self.assertRaisesRegex(ValueError, "single class"):
            self.fit(sk.logistic_regression, {"y": "c"}, text="a,c\n1,1\n2,1\n3,1\n4,1\n")
        with self.assertRaisesRegex(ValueError, "cv_folds=20.*lower cv_folds"):
            self.fit(sk.logistic_regression, {"y": "species", "cv_folds": 20, "test_size": 0.8}, IRIS)
        with self.assertRaisesRegex(ValueError, "x must not contain"):
            self.fit(sk.logistic_regression, {"y": "churned", "x": ["churned", "support_calls"]}, CHURN)


# ---------------------------------------------------------------------------------------------


class EnsembleCases:
    """Shared by the random forest and gradient boosting tests: `method`, `classifier(**kw)`,
    `regressor(**kw)` and `params` (the method's own parameters) set by the subclass."""

    def fit_pkl(self, ctx):
        with open(ctx.output("model.pkl"), "rb") as f:
            return pickle.load(f)

    def check_importance(self, ctx, est, inputs):
        with open(ctx.output("feature_importance.csv"), encoding="utf-8") as f:
            table = list(csv.DictReader(f))
        got = {r["feature"]: float(r["importance"]) for r in table}
        self.assertEqual(sorted(got), sorted(inputs))
        for name, v in zip(inputs, est.feature_importances_):
            self.assertClose(got[name], v)
        values = [float(r["importance"]) for r in table]
        self.assertEqual(values, sorted(values, reverse=True))

    def test_churn_binary_matches_sklearn(self):
        ctx = self.fit(self.method, dict(self.params, y="churned", cv_folds=3, random_state=5), CHURN, outputs=ENSEMBLE_OUT)
        Xtr, Xte, ytr, yte = data(CHURN, "churned", CHURN_X, random_state=5)
        est = self.classifier(random_state=5).fit(Xtr, ytr)
        bundle = self.fit_pkl(ctx)
        self.assertEqual(bundle["task"], "classification")
        self.assertEqual(bundle["inputs"], CHURN_X)
        self.assertEqual(bundle["classes"], [0, 1])
        np.testing.assert_array_equal(bundle["estimator"].predict(Xte), est.predict(Xte))
        np.testing.assert_array_equal(bundle["estimator"].predict_proba(Xte), est.predict_proba(Xte))
        m = ctx.metrics()
        self.assertClassMetrics(m, est, Xte, yte)
        self.assertClassMetrics(m, est, Xtr, ytr, prefix="train_")
        cv = cross_val_score(
            self.classifier(random_state=5), Xtr, ytr,
            cv=StratifiedKFold(n_splits=3, shuffle=True, random_state=5), scoring="accuracy",
        )
        self.assertClose(m["cv_accuracy_mean"], cv.mean())
        self.assertClose(m["cv_accuracy_std"], cv.std())
        self.assertEqual(ctx.output_json("metrics.json")["task_chosen_by"], "auto")
        self.check_importance(ctx, est, CHURN_X)
        self.assertPng(ctx)
        got = sk.predict(ctx.output("model.pkl"), rows_of(Xte, CHURN_X))
        self.assertClassPredictions(got, est, Xte)

    def test_iris_multiclass_matches_sklearn(self):
        ctx = self.fit(self.method, dict(self.params, y="species", task="classification"), IRIS, outputs=ENSEMBLE_OUT)
        Xtr, Xte, ytr, yte = data(IRIS, "species", IRIS_X)
        est = self.classifier(random_state=0).fit(Xtr, ytr)
        self.assertEqual(self.fit_pkl(ctx)["classes"], ["setosa", "versicolor", "virginica"])
        self.assertClassMetrics(ctx.metrics(), est, Xte, yte)
        self.check_importance(ctx, est, IRIS_X)
        got = sk.predict(ctx.output("model.pkl"), rows_of(Xte, IRIS_X))
        self.assertEqual([g["class"] for g in got], list(est.predict(Xte)))
        self.assertClassPredictions(got, est, Xte)

    def test_longley_regression_matches_sklearn(self):
        ctx = self.fit(self.method, dict(self.params, y="employed", cv_folds=3), LONGLEY, outputs=ENSEMBLE_OUT)
        Xtr, Xte, ytr, yte = data(LONGLEY, "employed", LONGLEY_X, stratify=False)
        ytr, yte = ytr.astype(float), yte.astype(float)
        est = self.regressor(random_state=0).fit(Xtr, ytr)
        bundle = self.fit_pkl(ctx)
        self.assertEqual(bundle["task"], "regression")  # the auto rule: 16 distinct integers > 10
        self.assertIsNone(bundle["classes"])
        np.testing.assert_array_equal(bundle["estimator"].predict(Xte), est.predict(Xte))
        m = ctx.metrics()
        self.assertRegMetrics(m, est, Xte, yte)
        self.assertRegMetrics(m, est, Xtr, ytr, prefix="train_")
        folds = KFold(n_splits=3, shuffle=True, random_state=0)
        r2 = cross_val_score(self.regressor(random_state=0), Xtr, ytr, cv=folds, scoring="r2")
        rmse = -cross_val_score(self.regressor(random_state=0), Xtr, ytr, cv=folds, scoring="neg_root_mean_squared_error")
        self.assertClose(m["cv_r2_mean"], r2.mean())
        self.assertClose(m["cv_r2_std"], r2.std())
        self.assertClose(m["cv_rmse_mean"], rmse.mean())
        self.assertClose(m["cv_rmse_std"], rmse.std())
        self.check_importance(ctx, est, LONGLEY_X)
        self.assertPng(ctx)
        got = sk.predict(ctx.output("model.pkl"), rows_of(Xte, LONGLEY_X))
        self.assertEqual(got, [float(v) for v in est.predict(Xte)])
        self.assertTrue(all(type(v) is float for v in got))

    def test_task_rule_and_explicit_task(self):
        # support_calls: integers 0..8 -> auto says classification; task=regression overrides it
        auto = self.fit(self.method, dict(self.params, y="support_calls", test_size=0.0), CHURN, outputs=ENSEMBLE_OUT)
        self.assertEqual(auto.output_json("metrics.json")["task"], "classification")
        self.assertEqual(self.fit_pkl(auto)["classes"], list(range(9)))
        reg = self.fit(self.method, dict(self.params, y="support_calls", task="regression"), CHURN, outputs=ENSEMBLE_OUT)
        doc = reg.output_json("metrics.json")
        self.assertEqual((doc["task"], doc["task_chosen_by"]), ("regression", "param"))
        self.assertIn("r2", reg.metrics())
        with self.assertRaisesRegex(ValueError, "task=regression needs a numeric y.*'species'"):
            self.fit(self.method, dict(self.params, y="species", task="regression"), IRIS, outputs=ENSEMBLE_OUT)
        with self.assertRaisesRegex(ValueError, "non-integer"):
            self.fit(self.method, dict(self.params, y="monthly_charges", task="classification"), CHURN, outputs=ENSEMBLE_OUT)

    def test_deterministic_given_random_state(self):
        a = self.fit(self.method, dict(self.params, y="churned", random_state=11), CHURN, outputs=ENSEMBLE_OUT)
        b = self.fit(self.method, dict(self.params, y="churned", random_state=11), CHURN, outputs=ENSEMBLE_OUT)
        c = self.fit(self.method, dict(self.params, y="churned", random_state=12), CHURN, outputs=ENSEMBLE_OUT)
        X = pd.read_csv(CHURN)[CHURN_X].to_numpy(dtype=float)
        pa, pb, pc = (self.fit_pkl(ctx)["estimator"].predict_proba(X) for ctx in (a, b, c))
        np.testing.assert_array_equal(pa, pb)
        self.assertEqual(a.metrics(), b.metrics())
        self.assertFalse(np.array_equal(pa, pc))

    def test_predict_errors(self):
        ctx = self.fit(self.method, dict(self.params, y="churned"), CHURN, outputs=ENSEMBLE_OUT)
        path = ctx.output("model.pkl")
        with self.assertRaisesRegex(KeyError, "support_calls"):
            sk.predict(path, [{"tenure_months": 3, "monthly_charges": 50.0}])
        with self.assertRaisesRegex(ValueError, "monthly_charges"):
            sk.predict(path, [{"tenure_months": 3, "monthly_charges": "fifty", "support_calls": 1}])
        with self.assertRaisesRegex(ValueError, "tenure_months"):
            sk.predict(path, [{"tenure_months": None, "monthly_charges": 5, "support_calls": 1}])
        self.assertEqual(sk.predict(path, []), [])


class RandomForestTest(EnsembleCases, Checks):
    method = staticmethod(sk.random_forest)
    params = {"n_estimators": 60, "max_depth": 6, "min_samples_leaf": 2}

    def classifier(self, random_state):
        return RandomForestClassifier(n_estimators=60, max_depth=6, min_samples_leaf=2, random_state=random_state)

    def regressor(self, random_state):
        return RandomForestRegressor(n_estimators=60, max_depth=6, min_samples_leaf=2, random_state=random_state)

    def test_defaults_match_sklearn_defaults(self):
        ctx = self.fit(self.method, {"y": "churned"}, CHURN, outputs=ENSEMBLE_OUT)
        Xtr, Xte, ytr, yte = data(CHURN, "churned", CHURN_X)
        est = RandomForestClassifier(n_estimators=100, max_depth=None, min_samples_leaf=1, random_state=0).fit(Xtr, ytr)
        np.testing.assert_array_equal(self.fit_pkl(ctx)["estimator"].predict_proba(Xte), est.predict_proba(Xte))


class GradientBoostingTest(EnsembleCases, Checks):
    method = staticmethod(sk.gradient_boosting)
    params = {"learning_rate": 0.05, "n_estimators": 80, "max_depth": 2}

    def classifier(self, random_state):
        return GradientBoostingClassifier(learning_rate=0.05, n_estimators=80, max_depth=2, random_state=random_state)

    def regressor(self, random_state):
        return GradientBoostingRegressor(learning_rate=0.05, n_estimators=80, max_depth=2, random_state=random_state)

    def test_defaults_match_sklearn_defaults(self):
        ctx = self.fit(self.method, {"y": "churned"}, CHURN, outputs=ENSEMBLE_OUT)
        Xtr, Xte, ytr, yte = data(CHURN, "churned", CHURN_X)
        est = GradientBoostingClassifier(learning_rate=0.1, n_estimators=100, max_depth=3, random_state=0).fit(Xtr, ytr)
        np.testing.assert_array_equal(self.fit_pkl(ctx)["estimator"].predict_proba(Xte), est.predict_proba(Xte))


# ---------------------------------------------------------------------------------------------


class SharedValidationTest(Checks):
    def test_text_input_column_is_named(self):
        # y = petal_width: the default x takes every other column, species (text) included
        with self.assertRaisesRegex(ValueError, "'species'.*encode"):
            self.fit(sk.random_forest, {"y": "petal_width"}, IRIS, outputs=ENSEMBLE_OUT)
        with self.assertRaisesRegex(ValueError, "'plan'.*encode"):
            self.fit(sk.logistic_regression, {"y": "c"}, text="a,plan,c\n1,gold,0\n2,basic,1\n3,gold,0\n4,basic,1\n")
        # listing x explicitly leaves the text column out
        ctx = self.fit(sk.random_forest, {"y": "petal_width", "x": IRIS_X[:3], "n_estimators": 5}, IRIS, outputs=ENSEMBLE_OUT)
        self.assertEqual(self.load(ctx)["inputs"], IRIS_X[:3])

    def load(self, ctx):
        with open(ctx.output("model.pkl"), "rb") as f:
            return pickle.load(f)

    def test_missing_values_and_columns(self):
        text = "a,b,c\n1,2,0\n2,,1\n3,4,0\n4,5,1\n5,6,0\n6,7,1\n"
        with self.assertRaisesRegex(ValueError, "'b' has 1 missing"):
            self.fit(sk.gradient_boosting, {"y": "c"}, text=text, outputs=ENSEMBLE_OUT)
        with self.assertRaisesRegex(ValueError, "parameter x: column 'z'"):
            self.fit(sk.gradient_boosting, {"y": "c", "x": ["a", "z"]}, text=text, outputs=ENSEMBLE_OUT)
        with self.assertRaisesRegex(ValueError, "parameter y is required"):
            self.fit(sk.gradient_boosting, {}, text=text, outputs=ENSEMBLE_OUT)

    def test_split_is_stratified(self):
        # The method's hold-out metrics are those of the stratified split and not of a plain
        # shuffled split with the same random_state (which differs from it on churn).
        ctx = self.fit(sk.random_forest, {"y": "churned", "n_estimators": 20, "random_state": 1}, CHURN, outputs=ENSEMBLE_OUT)
        got = ctx.metrics()["log_loss"]
        for stratify, same in ((True, True), (False, False)):
            Xtr, Xte, ytr, yte = data(CHURN, "churned", CHURN_X, stratify=stratify, random_state=1)
            est = RandomForestClassifier(n_estimators=20, random_state=1).fit(Xtr, ytr)
            self.assertEqual(close(got, log_loss(yte, est.predict_proba(Xte))), same)
        y = pd.read_csv(CHURN)["churned"].to_numpy()
        _, _, _, yte = data(CHURN, "churned", CHURN_X, random_state=1)
        self.assertLessEqual(abs(yte.mean() - y.mean()), 1 / 75)
        self.assertEqual(ctx.output_json("metrics.json")["n_test"], 75)

    def test_split_too_small(self):
        text = "a,c\n1,0\n2,1\n3,0\n4,1\n5,2\n6,2\n"
        with self.assertRaisesRegex(ValueError, "test_size=0.1.*classes"):
            self.fit(sk.logistic_regression, {"y": "c", "test_size": 0.1}, text=text)
        with self.assertRaisesRegex(ValueError, "class 7 .*single row"):
            self.fit(sk.logistic_regression, {"y": "c"}, text=text + "7,7\n")
        with self.assertRaisesRegex(ValueError, "cv_folds"):
            self.fit(sk.random_forest, {"y": "employed", "cv_folds": 7}, LONGLEY, outputs=ENSEMBLE_OUT)
        with self.assertRaisesRegex(ValueError, "cv_folds"):
            self.fit(sk.random_forest, {"y": "employed", "cv_folds": 1}, LONGLEY, outputs=ENSEMBLE_OUT)

    def test_predict_linear_errors(self):
        ctx = self.fit(sk.logistic_regression, {"y": "species"}, IRIS)
        model = ctx.output_json("model.json")
        row = {"sepal_length": 5.0, "sepal_width": 3.0, "petal_length": 1.5, "petal_width": 0.2}
        self.assertEqual(sk.predict(model, [row])[0]["class"], "setosa")
        with self.assertRaisesRegex(KeyError, "petal_width"):
            sk.predict(model, [{k: v for k, v in row.items() if k != "petal_width"}])
        with self.assertRaisesRegex(ValueError, "sepal_width"):
            sk.predict(model, [dict(row, sepal_width="3.0")])
        with self.assertRaisesRegex(ValueError, "sepal_length"):
            sk.predict(model, [dict(row, sepal_length=float("nan"))])


class IrisDataTest(unittest.TestCase):
    def test_shipped_iris_is_fishers(self):
        # Fisher (1936) / R datasets::iris: colSums 876.5, 458.6, 563.7, 179.9; rows 35 and 38 as
        # in Fisher's paper (the UCI copy has 4.9,3.1,1.5,0.1 and 4.9,3.1,1.5,0.1 there).
        df = pd.read_csv(IRIS)
        self.assertEqual(list(df.columns), IRIS_X + ["species"])
        self.assertEqual(df.shape, (150, 5))
        np.testing.assert_allclose(df[IRIS_X].sum().to_numpy(), [876.5, 458.6, 563.7, 179.9], rtol=0, atol=1e-9)
        self.assertEqual(df.iloc[34, :4].tolist(), [4.9, 3.1, 1.5, 0.2])
        self.assertEqual(df.iloc[37, :4].tolist(), [4.9, 3.6, 1.4, 0.1])
        self.assertEqual(df["species"].value_counts().to_dict(), {"setosa": 50, "versicolor": 50, "virginica": 50})


if __name__ == "__main__":
    unittest.main()
