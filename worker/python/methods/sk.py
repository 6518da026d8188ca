"""scikit-learn methods of the base-ml family: logistic regression, random forest and
gradient boosting on a table of numeric inputs, with one `predict` serving all three.

Shared behaviour:

- `y` names the target column; `x` the input columns (default: every other column). Inputs
  must be numeric with no missing or infinite values (a text column must be encoded first).
- The rows are split once into a training part and a hold-out part (`test_size`, a fraction;
  0 = no hold-out), stratified by class for classification, shuffled with `random_state`
  (scikit-learn's `train_test_split`). The model is fitted on the training part only, and the
  hold-out metrics (`accuracy`, `log_loss`, `roc_auc` or `r2`, `rmse`, `mae`) come from the
  hold-out part; the same metrics on the training part are reported as `train_*`.
- `cv_folds` > 0 also cross-validates the same estimator on the training part: stratified
  K-fold for classification (accuracy), K-fold for regression (r2, rmse), shuffled with
  `random_state`; reported as `cv_<metric>_mean` and `cv_<metric>_std` (population std, ddof 0).
- `task` (random forest, gradient boosting): `classification`, `regression` or `auto`. The
  `auto` rule: classification when y is text or boolean, or when every y value is an integer and
  there are at most 10 distinct values; otherwise regression. Set it explicitly when the rule
  guesses wrong (e.g. a count target with few values that should be regressed).

Models: logistic regression writes `model.json` (plain coefficients, readable and safe to
load); the ensembles write `model.pkl`, a pickle of a dict {"estimator", "inputs", "task",
"classes", "method", "sklearn_version"}.

`predict(model, rows)` returns, per row, for classification one shape whatever the number of
classes: {"class": label, "probability": probability of that (predicted) class,
"probabilities": {str(label): probability, ...}} (for a binary model the positive class is the
second label in sorted order, e.g. 1 of 0/1); for regression a float.
"""

import json
import math
import numbers
import os
import pickle
import warnings

import numpy as np

from checks import integer as _integer, number as _number, table as _table

AUTO_MAX_CLASSES = 10  # `task=auto`: integer y with at most this many distinct values -> classification
MAX_CLASSES = 100  # more distinct labels than this is not a classification problem we fit

LOGREG_DEFAULTS = {
    "x": None,
    "C": 1.0,
    "penalty": "l2",
    "standardize": False,
    "test_size": 0.25,
    "cv_folds": 0,
    "random_state": 0,
    "max_iter": 1000,
}
FOREST_DEFAULTS = {
    "task": "auto",
    "x": None,
    "n_estimators": 100,
    "max_depth": 0,
    "min_samples_leaf": 1,
    "test_size": 0.25,
    "cv_folds": 0,
    "random_state": 0,
}
BOOSTING_DEFAULTS = {
    "task": "auto",
    "x": None,
    "learning_rate": 0.1,
    "n_estimators": 100,
    "max_depth": 3,
    "min_samples_leaf": 1,
    "test_size": 0.25,
    "cv_folds": 0,
    "random_state": 0,
}


# ---------------------------------------------------------------------------------------------
# Parameters


def _params(ctx, defaults):
    p = dict(defaults)
    p.update({k: v for k, v in (ctx.params or {}).items() if v is not None})
    if "y" not in p or not p["y"]:
        raise ValueError("parameter y is required: name the column to predict")
    return p


def _cv_folds(p):
    v = _integer(p, "cv_folds", 0, 20)
    if v == 1:
        raise ValueError("parameter cv_folds must be 0 (no cross-validation) or between 2 and 20, not 1")
    return v


# ---------------------------------------------------------------------------------------------
# Data


def _is_numeric(series):
    import pandas as pd

    return pd.api.types.is_numeric_dtype(series)


def _resolve_task(task, y, ycol):
    import pandas as pd

    if task not in ("auto", "classification", "regression"):
        raise ValueError(f"parameter task must be auto, classification or regression, not {task!r}")
    numeric = _is_numeric(y) and not pd.api.types.is_bool_dtype(y)
    if task == "auto":
        if not numeric:
            return "classification"
        values = y.to_numpy(dtype=float)
        if np.all(np.isfinite(values)) and np.all(values == np.round(values)) and y.nunique() <= AUTO_MAX_CLASSES:
            return "classification"
        return "regression"
    if task == "regression":
        if not numeric:
            raise ValueError(
                f"task=regression needs a numeric y, but column {ycol!r} holds labels such as {y.iloc[0]!r}: "
                f"use task=classification"
            )
        if not np.isfinite(y.to_numpy(dtype=float)).all():
            raise ValueError(f"target column {ycol!r} (y) has infinite values: remove those rows")
    return task


def _class_labels(y, ycol):
    """y as an array of class labels (integer-valued floats become integers), and the sorted classes."""
    import pandas as pd

    if pd.api.types.is_bool_dtype(y):
        labels = y.to_numpy()
    elif _is_numeric(y):
        values = y.to_numpy(dtype=float)
        bad = ~np.isfinite(values) | (values != np.round(values))
        if bad.any():
            raise ValueError(
                f"target column {ycol!r} (y) holds non-integer numbers such as {values[bad][0]!r}: "
                f"classification needs class labels (integers or text); for a continuous target use regression"
            )
        labels = y.to_numpy() if pd.api.types.is_integer_dtype(y) else values.astype(np.int64)
    else:
        labels = y.astype(str).to_numpy(dtype=object)
    classes = np.unique(labels)
    if len(classes) < 2:
        raise ValueError(f"target column {ycol!r} (y) has a single class ({classes[0]!r}): at least 2 are needed")
    if len(classes) > MAX_CLASSES:
        raise ValueError(
            f"target column {ycol!r} (y) has {len(classes)} distinct values, more than {MAX_CLASSES} classes: "
            f"for a continuous target use regression"
        )
    return labels, classes


def _split(X, y, test_size, random_state, classification, ycol):
    """train_test_split (stratified for classification), with errors a user can act on."""
    from sklearn.model_selection import train_test_split

    n = len(y)
    if test_size == 0:
        return X, None, y, None
    n_test = math.ceil(test_size * n)
    n_train = n - n_test
    if classification:
        classes, counts = np.unique(y, return_counts=True)
        k = len(classes)
        if counts.min() < 2:
            raise ValueError(
                f"class {classes[counts.argmin()]!r} of y ({ycol!r}) has a single row: a stratified hold-out "
                f"needs at least 2 rows of each class; remove that row or set test_size=0"
            )
        if n_test < k or n_train < k:
            raise ValueError(
                f"test_size={test_size} splits the {n} rows into {n_train} training and {n_test} hold-out rows, "
                f"but each part needs at least one row of each of the {k} classes: change test_size (0 = no hold-out)"
            )
    elif n_test < 2 or n_train < 2:
        raise ValueError(
            f"test_size={test_size} splits the {n} rows into {n_train} training and {n_test} hold-out rows: "
            f"each part needs at least 2; change test_size (0 = no hold-out)"
        )
    X_train, X_test, y_train, y_test = train_test_split(
        X, y, test_size=test_size, random_state=random_state, stratify=y if classification else None
    )
    if classification and len(np.unique(y_train)) < len(np.unique(y)):
        raise ValueError(
            f"test_size={test_size} leaves a class of y ({ycol!r}) out of the training part: lower test_size"
        )
    return X_train, X_test, y_train, y_test


def _cv_splitter(folds, y_train, random_state, classification, ycol):
    from sklearn.model_selection import KFold, StratifiedKFold

    if classification:
        classes, counts = np.unique(y_train, return_counts=True)
        if counts.min() < folds:
            raise ValueError(
                f"cv_folds={folds} needs at least {folds} training rows of each class, but class "
                f"{classes[counts.argmin()]!r} of y ({ycol!r}) has {counts.min()}: lower cv_folds"
            )
        return StratifiedKFold(n_splits=folds, shuffle=True, random_state=random_state)
    if len(y_train) < 2 * folds:
        raise ValueError(
            f"cv_folds={folds} needs at least {2 * folds} training rows (2 per fold), there are {len(y_train)}: "
            f"lower cv_folds"
        )
    return KFold(n_splits=folds, shuffle=True, random_state=random_state)


def _cross_validate(estimator, X_train, y_train, folds, random_state, classification, ycol):
    """Per-fold scores, mean and std: {"folds": k, metric: {"folds": [...], "mean", "std"}}."""
    from sklearn.model_selection import cross_validate

    if folds == 0:
        return None
    cv = _cv_splitter(folds, y_train, random_state, classification, ycol)
    if classification:
        scoring = {"accuracy": "accuracy"}
        sign = {"accuracy": 1.0}
    else:
        scoring = {"r2": "r2", "rmse": "neg_root_mean_squared_error"}
        sign = {"r2": 1.0, "rmse": -1.0}
    res = cross_validate(estimator, X_train, y_train, cv=cv, scoring=scoring, error_score="raise")
    out = {"folds": folds}
    for name in scoring:
        scores = sign[name] * np.asarray(res["test_" + name], dtype=float)
        out[name] = {"folds": scores.tolist(), "mean": float(np.mean(scores)), "std": float(np.std(scores))}
    return out


# ---------------------------------------------------------------------------------------------
# Metrics


def classification_metrics(estimator, X, y, classes):
    """accuracy, log_loss and roc_auc (binary: of the second class; multiclass: macro one-vs-rest;
    left out when a class is missing from y)."""
    from sklearn.metrics import accuracy_score, log_loss, roc_auc_score

    proba = estimator.predict_proba(X)
    pred = estimator.predict(X)
    m = {
        "accuracy": float(accuracy_score(y, pred)),
        "log_loss": float(log_loss(y, proba, labels=classes)),
    }
    present = np.unique(y)
    if len(present) == len(classes):
        if len(classes) == 2:
            m["roc_auc"] = float(roc_auc_score((y == classes[1]).astype(int), proba[:, 1]))
        else:
            m["roc_auc"] = float(roc_auc_score(y, proba, multi_class="ovr", average="macro", labels=classes))
    return m


def regression_metrics(estimator, X, y):
    """r2, rmse, mae."""
    from sklearn.metrics import mean_absolute_error, mean_squared_error, r2_score

    pred = estimator.predict(X)
    return {
        "r2": float(r2_score(y, pred)),
        "rmse": float(math.sqrt(mean_squared_error(y, pred))),
        "mae": float(mean_absolute_error(y, pred)),
    }


def _report(ctx, train, holdout, cv):
    for name, value in (holdout or {}).items():
        if math.isfinite(value):
            ctx.metric(name, value)
    for name, value in train.items():
        if math.isfinite(value):
            ctx.metric("train_" + name, value)
    if cv:
        for name, s in cv.items():
            if name == "folds":
                continue
            for stat in ("mean", "std"):
                if math.isfinite(s[stat]):
                    ctx.metric(f"cv_{name}_{stat}", s[stat])


def _plain(values):
    """Labels as plain Python values (for JSON)."""
    return [v.item() if hasattr(v, "item") else v for v in values]


# ---------------------------------------------------------------------------------------------
# Plots


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _plot_importance(path, inputs, importances, title):
    plt = _pyplot()
    order = np.argsort(importances, kind="stable")  # ascending: the largest bar on top
    fig, ax = plt.subplots(figsize=(6.4, max(2.4, 0.35 * len(inputs) + 1.2)))
    try:
        ax.barh([inputs[i] for i in order], [importances[i] for i in order], color="#4C72B0")
        ax.set_xlabel("importance (mean decrease in impurity)")
        ax.set_title(title)
        fig.tight_layout()
        fig.savefig(path, format="png", dpi=100)
    finally:
        plt.close(fig)


def _plot_roc(path, y, p_pos, positive, title):
    from sklearn.metrics import roc_auc_score, roc_curve

    plt = _pyplot()
    fpr, tpr, _ = roc_curve((y == positive).astype(int), p_pos)
    auc = roc_auc_score((y == positive).astype(int), p_pos)
    fig, ax = plt.subplots(figsize=(5.2, 5.0))
    try:
        ax.plot(fpr, tpr, color="#4C72B0", label=f"ROC (AUC = {auc:.3f})")
        ax.plot([0, 1], [0, 1], color="#999999", linestyle="--", linewidth=1)
        ax.set_xlim(0, 1)
        ax.set_ylim(0, 1.01)
        ax.set_xlabel("false positive rate")
        ax.set_ylabel(f"true positive rate (class {positive!r})")
        ax.set_title(title)
        ax.legend(loc="lower right")
        fig.tight_layout()
        fig.savefig(path, format="png", dpi=100)
    finally:
        plt.close(fig)


def _plot_confusion(path, y, pred, classes, title):
    from sklearn.metrics import confusion_matrix

    plt = _pyplot()
    cm = confusion_matrix(y, pred, labels=classes)
    k = len(classes)
    fig, ax = plt.subplots(figsize=(max(4.0, 0.6 * k + 2.5), max(3.6, 0.6 * k + 2.0)))
    try:
        ax.imshow(cm, cmap="Blues")
        ax.set_xticks(range(k))
        ax.set_yticks(range(k))
        ax.set_xticklabels([str(c) for c in classes], rotation=45 if k > 4 else 0, ha="right" if k > 4 else "center")
        ax.set_yticklabels([str(c) for c in classes])
        top = cm.max() if cm.size else 0
        for i in range(k):
            for j in range(k):
                ax.text(j, i, str(cm[i, j]), ha="center", va="center", color="white" if cm[i, j] > top / 2 else "black")
        ax.set_xlabel("predicted class")
        ax.set_ylabel("true class")
        ax.set_title(title)
        fig.tight_layout()
        fig.savefig(path, format="png", dpi=100)
    finally:
        plt.close(fig)


# ---------------------------------------------------------------------------------------------
# sklearn.logistic_regression


def make_logistic(C, penalty, standardize, max_iter, random_state):
    """The estimator `logistic_regression` fits (lbfgs; multinomial for more than two classes)."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import Pipeline
    from sklearn.preprocessing import StandardScaler

    if penalty == "l2":
        est = LogisticRegression(penalty="l2", C=C, max_iter=max_iter, random_state=random_state)
    else:
        est = LogisticRegression(penalty=None, max_iter=max_iter, random_state=random_state)
    if standardize:
        return Pipeline([("scale", StandardScaler()), ("logreg", est)])
    return est


def logistic_regression(ctx):
    """sklearn.logistic_regression: binary or multinomial logistic regression (lbfgs)."""
    from sklearn.exceptions import ConvergenceWarning

    p = _params(ctx, LOGREG_DEFAULTS)
    C = _number(p, "C", 0.0, 1e12, lo_open=True)
    penalty = p["penalty"]
    if penalty not in ("l2", "none"):
        raise ValueError(f"parameter penalty must be l2 or none, not {penalty!r}")
    if penalty == "none" and C != 1.0:
        raise ValueError("parameter C only applies to penalty=l2: leave C at 1 with penalty=none")
    standardize = p["standardize"]
    if not isinstance(standardize, bool):
        raise ValueError(f"parameter standardize must be true or false, not {standardize!r}")
    test_size = _number(p, "test_size", 0.0, 0.9)
    folds = _cv_folds(p)
    random_state = _integer(p, "random_state", 0, 2**32 - 1)
    max_iter = _integer(p, "max_iter", 1, 1_000_000)

    ctx.progress(0.05, "reading the dataset")
    df, ycol, inputs, X = _table(ctx, p)
    y, classes = _class_labels(df[ycol], ycol)
    X_train, X_test, y_train, y_test = _split(X, y, test_size, random_state, True, ycol)

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ConvergenceWarning)
        ctx.progress(0.2, "cross-validating" if folds else "fitting")
        cv = _cross_validate(
            make_logistic(C, penalty, standardize, max_iter, random_state), X_train, y_train, folds, random_state, True, ycol
        )
        ctx.progress(0.5, "fitting")
        est = make_logistic(C, penalty, standardize, max_iter, random_state)
        est.fit(X_train, y_train)
    not_converged = any(issubclass(w.category, ConvergenceWarning) for w in caught)

    logreg = est[-1] if standardize else est
    coef = logreg.coef_  # (1, k) for two classes (the second class), (n_classes, k) otherwise
    intercept = logreg.intercept_
    if standardize:
        mean, scale = est[0].mean_, est[0].scale_
        coef_orig = coef / scale
        intercept_orig = intercept - (coef * (mean / scale)).sum(axis=1)
    else:
        coef_orig, intercept_orig = coef, intercept
    classes_l = _plain(logreg.classes_)
    row_classes = classes_l[1:] if len(classes_l) == 2 else classes_l

    ctx.progress(0.8, "measuring")
    train = classification_metrics(est, X_train, y_train, logreg.classes_)
    holdout = classification_metrics(est, X_test, y_test, logreg.classes_) if X_test is not None else None

    model = {
        "method": "sklearn.logistic_regression",
        "task": "classification",
        "kind": "binary" if len(classes_l) == 2 else "multinomial",
        "inputs": inputs,
        "classes": classes_l,
        "coefficient_classes": row_classes,
        "coefficients": coef.tolist(),
        "intercepts": intercept.tolist(),
        "standardize": {"mean": est[0].mean_.tolist(), "scale": est[0].scale_.tolist()} if standardize else None,
        "sklearn_version": _sklearn_version(),
    }
    ctx.write_json("model.json", model)
    with open(ctx.output_path("coefficients.csv"), "w", encoding="utf-8", newline="") as f:
        import csv

        w = csv.writer(f)
        w.writerow(["class", "term", "coefficient", "coefficient_original_scale"])
        for r, label in enumerate(row_classes):
            w.writerow([label, "(intercept)", repr(float(intercept[r])), repr(float(intercept_orig[r]))])
            for j, name in enumerate(inputs):
                w.writerow([label, name, repr(float(coef[r, j])), repr(float(coef_orig[r, j]))])
    metrics = _metrics_doc(
        "sklearn.logistic_regression", "classification", None, ycol, inputs, len(y), len(y_train),
        test_size, random_state, classes_l, train, holdout, cv,
    )
    metrics["converged"] = not not_converged
    metrics["n_iter"] = [int(v) for v in np.ravel(logreg.n_iter_)]
    ctx.write_json("metrics.json", metrics)
    _report(ctx, train, holdout, cv)

    ctx.progress(0.9, "plotting")
    Xp, yp, part = (X_test, y_test, "hold-out") if X_test is not None else (X_train, y_train, "training")
    if len(classes_l) == 2 and len(np.unique(yp)) == 2:
        _plot_roc(ctx.output_path("plot.png"), yp, est.predict_proba(Xp)[:, 1], logreg.classes_[1],
                  f"Logistic regression\nROC curve, {part} rows")
    else:
        _plot_confusion(ctx.output_path("plot.png"), yp, est.predict(Xp), logreg.classes_,
                        f"Logistic regression\nconfusion matrix, {part} rows")
    ctx.progress(1.0, "done")


def _sklearn_version():
    import sklearn

    return sklearn.__version__


def _metrics_doc(method, task, chosen, ycol, inputs, n, n_train, test_size, random_state, classes, train, holdout, cv):
    doc = {
        "method": method,
        "task": task,
        "y": ycol,
        "inputs": inputs,
        "n_rows": n,
        "n_train": n_train,
        "n_test": n - n_train,
        "test_size": test_size,
        "random_state": random_state,
    }
    if chosen is not None:
        doc["task_chosen_by"] = chosen
    if classes is not None:
        doc["classes"] = classes
        if len(classes) == 2:
            doc["positive_class"] = classes[1]
    doc["holdout"] = holdout
    doc["train"] = train
    doc["cv"] = cv
    return doc


# ---------------------------------------------------------------------------------------------
# sklearn.random_forest and sklearn.gradient_boosting


def make_forest(task, n_estimators, max_depth, min_samples_leaf, random_state):
    """The estimator `random_forest` fits (scikit-learn's defaults otherwise; max_depth 0 = none)."""
    from sklearn.ensemble import RandomForestClassifier, RandomForestRegressor

    cls = RandomForestClassifier if task == "classification" else RandomForestRegressor
    return cls(
        n_estimators=n_estimators,
        max_depth=None if max_depth == 0 else max_depth,
        min_samples_leaf=min_samples_leaf,
        random_state=random_state,
    )


def make_boosting(task, learning_rate, n_estimators, max_depth, min_samples_leaf, random_state):
    """The estimator `gradient_boosting` fits (scikit-learn's defaults otherwise)."""
    from sklearn.ensemble import GradientBoostingClassifier, GradientBoostingRegressor

    cls = GradientBoostingClassifier if task == "classification" else GradientBoostingRegressor
    return cls(
        learning_rate=learning_rate,
        n_estimators=n_estimators,
        max_depth=max_depth,
        min_samples_leaf=min_samples_leaf,
        random_state=random_state,
    )


def _fit_ensemble(ctx, p, method, make, title):
    test_size = _number(p, "test_size", 0.0, 0.9)
    folds = _cv_folds(p)
    random_state = _integer(p, "random_state", 0, 2**32 - 1)

    ctx.progress(0.05, "reading the dataset")
    df, ycol, inputs, X = _table(ctx, p)
    task = _resolve_task(p["task"], df[ycol], ycol)
    chosen = "auto" if p["task"] == "auto" else "param"
    classification = task == "classification"
    if classification:
        try:
            y, classes = _class_labels(df[ycol], ycol)
        except ValueError as e:
            raise ValueError(f"{e} (task={p['task']})") from None
    else:
        y, classes = df[ycol].to_numpy(dtype=float), None
    X_train, X_test, y_train, y_test = _split(X, y, test_size, random_state, classification, ycol)

    ctx.progress(0.15, "cross-validating" if folds else "fitting")
    cv = _cross_validate(make(task), X_train, y_train, folds, random_state, classification, ycol)
    ctx.progress(0.5, "fitting")
    est = make(task)
    est.fit(X_train, y_train)

    ctx.progress(0.8, "measuring")
    if classification:
        train = classification_metrics(est, X_train, y_train, est.classes_)
        holdout = classification_metrics(est, X_test, y_test, est.classes_) if X_test is not None else None
        classes_l = _plain(est.classes_)
    else:
        train = regression_metrics(est, X_train, y_train)
        holdout = regression_metrics(est, X_test, y_test) if X_test is not None else None
        classes_l = None

    bundle = {
        "method": method,
        "estimator": est,
        "inputs": inputs,
        "task": task,
        "classes": classes_l,
        "sklearn_version": _sklearn_version(),
    }
    with open(ctx.output_path("model.pkl"), "wb") as f:
        pickle.dump(bundle, f, protocol=pickle.HIGHEST_PROTOCOL)
    importances = [float(v) for v in est.feature_importances_]
    order = sorted(range(len(inputs)), key=lambda j: -importances[j])  # stable: ties keep input order
    with open(ctx.output_path("feature_importance.csv"), "w", encoding="utf-8", newline="") as f:
        import csv

        w = csv.writer(f)
        w.writerow(["feature", "importance"])
        for j in order:
            w.writerow([inputs[j], repr(importances[j])])
    metrics = _metrics_doc(
        method, task, chosen, ycol, inputs, len(y), len(y_train), test_size, random_state, classes_l, train, holdout, cv
    )
    ctx.write_json("metrics.json", metrics)
    _report(ctx, train, holdout, cv)

    ctx.progress(0.9, "plotting")
    _plot_importance(ctx.output_path("plot.png"), inputs, importances, f"{title} ({task})\nfeature importance")
    ctx.progress(1.0, "done")


def random_forest(ctx):
    """sklearn.random_forest: RandomForestClassifier / RandomForestRegressor."""
    p = _params(ctx, FOREST_DEFAULTS)
    n_estimators = _integer(p, "n_estimators", 1, 2000)
    max_depth = _integer(p, "max_depth", 0, 1000)
    min_samples_leaf = _integer(p, "min_samples_leaf", 1, 100_000)
    random_state = _integer(p, "random_state", 0, 2**32 - 1)
    _fit_ensemble(
        ctx, p, "sklearn.random_forest",
        lambda task: make_forest(task, n_estimators, max_depth, min_samples_leaf, random_state),
        "Random forest",
    )


def gradient_boosting(ctx):
    """sklearn.gradient_boosting: GradientBoostingClassifier / GradientBoostingRegressor."""
    p = _params(ctx, BOOSTING_DEFAULTS)
    learning_rate = _number(p, "learning_rate", 0.0, 10.0, lo_open=True)
    n_estimators = _integer(p, "n_estimators", 1, 2000)
    max_depth = _integer(p, "max_depth", 1, 100)
    min_samples_leaf = _integer(p, "min_samples_leaf", 1, 100_000)
    random_state = _integer(p, "random_state", 0, 2**32 - 1)
    _fit_ensemble(
        ctx, p, "sklearn.gradient_boosting",
        lambda task: make_boosting(task, learning_rate, n_estimators, max_depth, min_samples_leaf, random_state),
        "Gradient boosting",
    )


# ---------------------------------------------------------------------------------------------
# predict


def _matrix(rows, inputs):
    if not isinstance(rows, (list, tuple)):
        raise ValueError("rows must be a list of objects mapping input columns to numbers")
    X = np.empty((len(rows), len(inputs)), dtype=float)
    for i, row in enumerate(rows):
        if not isinstance(row, dict):
            raise ValueError(f"row {i} must be an object mapping input columns to numbers, not {type(row).__name__}")
        for j, name in enumerate(inputs):
            if name not in row:
                raise KeyError(f"row {i} has no value for input column {name!r}; the model's inputs are {inputs}")
            v = row[name]
            if not isinstance(v, numbers.Real):
                raise ValueError(f"input column {name!r} of row {i} must be a number, not {v!r}")
            v = float(v)
            if not math.isfinite(v):
                raise ValueError(f"input column {name!r} of row {i} must be a finite number, not {v!r}")
            X[i, j] = v
    return X


def _classified(labels, proba, classes):
    index = {c: k for k, c in enumerate(classes)}
    out = []
    for label, p in zip(labels, proba):
        out.append(
            {
                "class": label,
                "probability": float(p[index[label]]),
                "probabilities": {str(c): float(p[k]) for k, c in enumerate(classes)},
            }
        )
    return out


def _predict_linear(model, rows):
    from scipy.special import expit, softmax

    inputs = list(model["inputs"])
    classes = list(model["classes"])
    X = _matrix(rows, inputs)
    if len(rows) == 0:
        return []
    scaling = model.get("standardize")
    if scaling:
        X = (X - np.asarray(scaling["mean"], dtype=float)) / np.asarray(scaling["scale"], dtype=float)
    coef = np.asarray(model["coefficients"], dtype=float)
    z = X @ coef.T + np.asarray(model["intercepts"], dtype=float)
    if len(classes) == 2:
        p1 = expit(z[:, 0])
        proba = np.column_stack([1.0 - p1, p1])
    else:
        proba = softmax(z, axis=1)
    labels = [classes[k] for k in np.argmax(proba, axis=1)]
    return _classified(labels, proba, classes)


_BUNDLES = {}


def _load_bundle(path):
    st = os.stat(path)
    key = (os.path.abspath(path), st.st_mtime_ns, st.st_size)
    bundle = _BUNDLES.get(key)
    if bundle is None:
        with open(path, "rb") as f:
            bundle = pickle.load(f)
        if not isinstance(bundle, dict) or "estimator" not in bundle:
            raise ValueError(f"{path} is not a model written by the sklearn methods")
        _BUNDLES.clear()
        _BUNDLES[key] = bundle
    return bundle


def predict(model, rows):
    """Predicts rows (dicts of the model's input columns to numbers) with a model of
    sklearn.logistic_regression (model.json, parsed) or sklearn.random_forest /
    sklearn.gradient_boosting (the path of model.pkl).

    Classification: per row {"class": label, "probability": p of that class,
    "probabilities": {str(label): p}}; regression: a float."""
    if isinstance(model, (str, os.PathLike)):
        path = os.fspath(model)
        if path.endswith(".json"):
            with open(path, encoding="utf-8") as f:
                model = json.load(f)
        else:
            bundle = _load_bundle(path)
            inputs = list(bundle["inputs"])
            X = _matrix(rows, inputs)
            if len(rows) == 0:
                return []
            est = bundle["estimator"]
            if bundle["task"] == "regression":
                return [float(v) for v in est.predict(X)]
            return _classified(_plain(est.predict(X)), est.predict_proba(X), _plain(est.classes_))
    if isinstance(model, dict):
        return _predict_linear(model, rows)
    raise ValueError("model must be the parsed model.json of sklearn.logistic_regression or the path of a model.pkl")
