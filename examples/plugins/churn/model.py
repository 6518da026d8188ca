import numpy as np
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import accuracy_score, roc_auc_score
from sklearn.model_selection import train_test_split


def fit(ctx):
    table = ctx.read_csv()
    y = table[ctx.params["y"]]
    x = table.drop(columns=[ctx.params["y"]])
    x_fit, x_test, y_fit, y_test = train_test_split(
        x, y, test_size=ctx.params["test_size"], random_state=0, stratify=y
    )
    model = LogisticRegression(max_iter=1000).fit(x_fit, y_fit)
    ctx.progress(0.9, "fitted")
    ctx.metric("accuracy", accuracy_score(y_test, model.predict(x_test)))
    ctx.metric("roc_auc", roc_auc_score(y_test, model.predict_proba(x_test)[:, 1]))
    ctx.write_json("model.json", {
        "inputs": list(x.columns),
        "coefficients": dict(zip(x.columns, model.coef_[0].tolist())),
        "intercept": float(model.intercept_[0]),
    })


def predict(model, rows):
    x = np.array([[row[c] for c in model["inputs"]] for row in rows], dtype=float)
    w = np.array([model["coefficients"][c] for c in model["inputs"]])
    return 1 / (1 + np.exp(-(x @ w + model["intercept"])))
