"""Tests of worker/python/methods/dl.py (dl.mlp_classifier, dl.cnn_classifier and their predict).

Datasets: examples/digits.csv (UCI optical handwritten digits, 8x8 images; see examples/digits.md)
and examples/iris.csv (Fisher 1936; examples/iris.md). References called directly here:
scikit-learn's MLPClassifier on the same training rows (accuracy within 0.05 of ours), and the
saved weights run through numpy (MLP) and torch.nn.functional (CNN) to check `predict`.

The property the stop/checkpoint tests prove: a run stopped after some batches (the FakeContext
answers `stop_requested()` True after N polls, as the platform's SIGTERM) and resumed from its
checkpoint ends with exactly the weights and history of an uninterrupted run with the same seed.
"""

import contextlib
import io
import json
import os
import subprocess
import sys
import unittest
import warnings
from unittest import mock

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # support.py, with or without tests/__init__.py
from support import EXAMPLES, FakeContext  # noqa: E402

import dl  # noqa: E402
import mapi  # noqa: E402

DIGITS = os.path.join(EXAMPLES, "digits.csv")
IRIS = os.path.join(EXAMPLES, "iris.csv")
PIXELS = [f"p{i}" for i in range(64)]
OUT = ["model.pt", "metrics.json", "plot.png"]
PNG = b"\x89PNG\r\n\x1a\n"
HISTORY_KEYS = ("epoch", "loss", "accuracy", "val_loss", "val_accuracy")
N_BATCHES = 43  # digits: 1,347 training rows (test_size 0.25) in batches of 32


def digits():
    df = pd.read_csv(DIGITS)
    return df[PIXELS].to_numpy(dtype=float), df["digit"].to_numpy()


def rows_of(X, names):
    return [{n: float(v) for n, v in zip(names, r)} for r in X]


def load_pt(path):
    return torch.load(path, map_location="cpu", weights_only=True)


def without_seconds(history):
    return [{k: h[k] for k in HISTORY_KEYS} for h in history]


class Checks(unittest.TestCase):
    def fit(self, method, params, path=DIGITS, text=None, **kw):
        ctx = FakeContext(params, csv_path=path, csv_text=text, outputs=OUT, **kw)
        self.addCleanup(ctx._tmp.cleanup)
        method(ctx)
        return ctx

    def stopped(self, method, params, stop_after, **kw):
        """A run the platform stops after `stop_after` polls: it must raise Stopped with a checkpoint."""
        ctx = FakeContext(params, csv_path=DIGITS, outputs=OUT, stop_after=stop_after, **kw)
        self.addCleanup(ctx._tmp.cleanup)
        with self.assertRaises(mapi.Stopped):
            method(ctx)
        self.assertEqual(ctx.stop_polls, stop_after + 1, "asks before every batch and stops at once")
        data = ctx.last_checkpoint()
        self.assertIsNotNone(data, "a stop saves a checkpoint")
        self.assertFalse(os.path.exists(os.path.join(ctx.output_dir, "model.pt")), "a stopped run writes no model")
        return data

    def assertSameFit(self, a, b):
        """Bit-for-bit the same network and history (per-epoch seconds aside)."""
        ma, mb = load_pt(a.output("model.pt")), load_pt(b.output("model.pt"))
        self.assertEqual(list(ma["state_dict"]), list(mb["state_dict"]))
        for k in ma["state_dict"]:
            self.assertTrue(torch.equal(ma["state_dict"][k], mb["state_dict"][k]), f"tensor {k} differs")
        ha, hb = a.output_json("metrics.json"), b.output_json("metrics.json")
        self.assertEqual(without_seconds(ha["history"]), without_seconds(hb["history"]))
        for key in ("holdout_accuracy", "holdout_loss", "confusion_matrix", "train_accuracy"):
            self.assertEqual(ha[key], hb[key], key)


# ---------------------------------------------------------------------------------------------


class DigitsTest(Checks):
    """The default fits on digits, shared by the accuracy and predict tests."""

    @classmethod
    def setUpClass(cls):
        cls.contexts = []
        cls.fits = {}
        for name, method in (("cnn", dl.cnn_classifier), ("mlp", dl.mlp_classifier)):
            ctx = FakeContext({"y": "digit"}, csv_path=DIGITS, outputs=OUT)
            cls.contexts.append(ctx)
            method(ctx)
            cls.fits[name] = ctx
        X, y = digits()
        cls.X, cls.y = X, y
        cls.train, cls.test = dl.holdout_split(y, 0.25, 0)

    @classmethod
    def tearDownClass(cls):
        for ctx in cls.contexts:
            ctx._tmp.cleanup()

    def test_split_is_stratified_and_seeded(self):
        y, train, test = self.y, self.train, self.test
        self.assertEqual(len(test), 450)  # ceil(0.25 * 1797)
        self.assertEqual(sorted(np.concatenate([train, test]).tolist()), list(range(len(y))))
        expected = 450 * np.bincount(y) / len(y)
        self.assertTrue(np.all(np.abs(np.bincount(y[test], minlength=10) - expected) < 1))
        again = dl.holdout_split(y, 0.25, 0)[1]
        self.assertTrue(np.array_equal(again, test))
        self.assertFalse(np.array_equal(dl.holdout_split(y, 0.25, 1)[1], test))
        for name in ("cnn", "mlp"):
            m = self.fits[name].output_json("metrics.json")
            self.assertEqual((m["n_rows"], m["n_train"], m["n_test"]), (1797, 1347, 450))
            self.assertEqual(np.sum(m["confusion_matrix"], axis=1).tolist(), np.bincount(y[test]).tolist())

    def test_accuracy_on_digits_and_against_sklearn(self):
        from sklearn.exceptions import ConvergenceWarning
        from sklearn.neural_network import MLPClassifier
        from sklearn.preprocessing import StandardScaler

        cnn = self.fits["cnn"].output_json("metrics.json")
        mlp = self.fits["mlp"].output_json("metrics.json")
        self.assertEqual((cnn["method"], len(cnn["history"])), ("dl.cnn_classifier", 20))
        self.assertEqual((mlp["method"], len(mlp["history"])), ("dl.mlp_classifier", 30))
        self.assertGreaterEqual(cnn["holdout_accuracy"], 0.95)
        self.assertGreaterEqual(mlp["holdout_accuracy"], 0.93)
        self.assertEqual(cnn["holdout_accuracy"], cnn["history"][-1]["val_accuracy"])
        self.assertEqual(cnn["architecture"], {"kind": "cnn", "channels": 1, "height": 8, "width": 8, "filters": 16, "classes": 10})
        self.assertEqual(mlp["classes"], list(range(10)))
        self.assertEqual(mlp["inputs"], PIXELS)

        # The reference: scikit-learn's MLP with the same layers, Adam settings and epochs on the
        # same training rows, standardised the same way, no L2 penalty (ours has none).
        X, y, tr, te = self.X, self.y, self.train, self.test
        scale = StandardScaler().fit(X[tr])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            ref = MLPClassifier(
                hidden_layer_sizes=(64, 64), solver="adam", learning_rate_init=0.001, batch_size=32,
                max_iter=30, alpha=0.0, tol=0.0, n_iter_no_change=10_000, random_state=0,
            ).fit(scale.transform(X[tr]), y[tr])
        ref_acc = ref.score(scale.transform(X[te]), y[te])
        self.assertGreaterEqual(ref_acc, 0.93)
        self.assertLess(abs(mlp["holdout_accuracy"] - ref_acc), 0.05, (mlp["holdout_accuracy"], ref_acc))

        # the scaling saved is the training rows' mean and population std (constant columns: 1)
        model = load_pt(self.fits["mlp"].output("model.pt"))
        self.assertEqual(model["scaling"]["kind"], "standardize")
        self.assertTrue(np.allclose(model["scaling"]["mean"].numpy(), scale.mean_, rtol=1e-12, atol=0))
        self.assertTrue(np.allclose(model["scaling"]["std"].numpy(), scale.scale_, rtol=1e-12, atol=0))
        cnn_model = load_pt(self.fits["cnn"].output("model.pt"))
        self.assertAlmostEqual(float(cnn_model["scaling"]["mean"]), X[tr].mean(), places=12)
        self.assertAlmostEqual(float(cnn_model["scaling"]["std"]), X[tr].std(), places=12)

    def test_outputs(self):
        for name in ("cnn", "mlp"):
            ctx = self.fits[name]
            m = ctx.output_json("metrics.json")
            self.assertEqual(m["backend"], "gpu" if torch.cuda.is_available() else "cpu")
            self.assertEqual(m["torch_version"], torch.__version__)
            self.assertFalse(m["resumed"])
            self.assertIsNone(m["resumed_from_epoch"])
            self.assertEqual([h["epoch"] for h in m["history"]], list(range(1, len(m["history"]) + 1)))
            self.assertTrue(all(h["seconds"] > 0 for h in m["history"]))
            self.assertAlmostEqual(m["mean_epoch_seconds"], np.mean([h["seconds"] for h in m["history"]]))
            self.assertEqual(np.sum(m["confusion_matrix"]), 450)
            self.assertAlmostEqual(np.trace(m["confusion_matrix"]) / 450, m["holdout_accuracy"])
            with open(ctx.output("plot.png"), "rb") as f:
                self.assertEqual(f.read(8), PNG)
            # per-epoch metric events: one per epoch, in order, as in the history
            self.assertEqual(ctx.metric_values("epoch"), [h["epoch"] for h in m["history"]])
            for key in ("loss", "accuracy", "val_loss", "val_accuracy"):
                self.assertEqual(ctx.metric_values(key), [h[key] for h in m["history"]], key)
            self.assertEqual(ctx.progress_messages()[1:3], [f"epoch 1/{len(m['history'])}", f"epoch 2/{len(m['history'])}"])
            # with the default 30 s interval, a short run saves one checkpoint (after epoch 1)
            self.assertEqual(len(ctx.checkpoints), 1)

    def test_predict_matches_the_holdout_and_an_independent_forward_pass(self):
        te = self.test
        rows = rows_of(self.X[te], PIXELS)
        for name in ("cnn", "mlp"):
            path = self.fits[name].output("model.pt")
            m = self.fits[name].output_json("metrics.json")
            got = dl.predict(path, rows)
            self.assertEqual(len(got), len(te))
            pred = np.array([g["class"] for g in got])
            self.assertTrue(all(type(g["class"]) is int for g in got))
            self.assertAlmostEqual(float(np.mean(pred == self.y[te])), m["holdout_accuracy"], places=12)
            cm = np.zeros((10, 10), dtype=int)
            np.add.at(cm, (self.y[te], pred), 1)
            self.assertEqual(cm.tolist(), m["confusion_matrix"])
            for g in got[:20]:
                self.assertEqual(sorted(g["probabilities"], key=int), [str(c) for c in range(10)])
                self.assertAlmostEqual(sum(g["probabilities"].values()), 1.0, places=9)
                self.assertEqual(g["probability"], g["probabilities"][str(g["class"])])
                self.assertEqual(g["probability"], max(g["probabilities"].values()))

            # the saved weights run by hand give the same probabilities
            model = load_pt(path)
            self.assertEqual(model["format"], dl.MODEL_FORMAT)
            self.assertEqual(model["method"], m["method"])
            self.assertEqual(model["classes"], list(range(10)))
            self.assertEqual(model["inputs"], PIXELS)
            self.assertTrue(all(v.device.type == "cpu" for v in model["state_dict"].values()))
            ref = self.forward(model, self.X[te])
            proba = np.array([[g["probabilities"][str(c)] for c in range(10)] for g in got])
            self.assertTrue(np.allclose(proba, ref, atol=1e-5), np.abs(proba - ref).max())
            top2 = np.sort(ref, axis=1)[:, -2:]
            clear = top2[:, 1] - top2[:, 0] > 1e-4
            self.assertTrue(np.array_equal(pred[clear], ref.argmax(axis=1)[clear]))
        self.assertIn(os.path.abspath(path), dl._MODELS)  # loaded once, kept for the next request

    @staticmethod
    def forward(model, X):
        sd = {k: v.double() for k, v in model["state_dict"].items()}
        sc = model["scaling"]
        if model["architecture"]["kind"] == "mlp":
            h = (X - sc["mean"].numpy()) / sc["std"].numpy()
            layers = sorted({int(k.split(".")[0]) for k in sd})
            for i, j in enumerate(layers):
                h = h @ sd[f"{j}.weight"].numpy().T + sd[f"{j}.bias"].numpy()
                if i < len(layers) - 1:
                    h = np.maximum(h, 0)
            z = h
        else:
            h = torch.from_numpy((X - float(sc["mean"])) / float(sc["std"])).view(-1, 1, 8, 8)
            h = F.max_pool2d(F.relu(F.conv2d(h, sd["0.weight"], sd["0.bias"], padding=1)), 2)
            h = F.max_pool2d(F.relu(F.conv2d(h, sd["3.weight"], sd["3.bias"], padding=1)), 2)
            z = F.linear(h.flatten(1), sd["7.weight"], sd["7.bias"]).numpy()
        z = z - z.max(axis=1, keepdims=True)
        e = np.exp(z)
        return e / e.sum(axis=1, keepdims=True)

    def test_predict_in_a_model_server(self):
        # As the model server runs it (`python3 -I -B`), with the methods' folder alone on the path
        # (no mapi.py, no tests), a fresh interpreter loading model.pt itself.
        path = self.fits["cnn"].output("model.pt")
        rows = rows_of(self.X[self.test[:5]], PIXELS)
        code = (
            "import json, sys; sys.path.insert(0, sys.argv[1]); import dl; "
            "print(json.dumps(dl.predict(sys.argv[2], json.loads(sys.stdin.read()))))"
        )
        done = subprocess.run(
            [sys.executable, "-I", "-B", "-c", code, os.path.dirname(os.path.abspath(dl.__file__)), path],
            input=json.dumps(rows), capture_output=True, text=True, timeout=120,
        )
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertEqual(json.loads(done.stdout), dl.predict(path, rows))

    def test_predict_errors(self):
        path = self.fits["mlp"].output("model.pt")
        self.assertEqual(dl.predict(path, []), [])
        row = {n: 0.0 for n in PIXELS}
        short = dict(row)
        del short["p5"]
        with self.assertRaises(ValueError) as e:
            dl.predict(path, [row, short])
        self.assertIn("'p5'", str(e.exception))
        self.assertIn("row 1", str(e.exception))
        with self.assertRaises(ValueError) as e:
            dl.predict(path, [dict(row, p7="dark")])
        self.assertIn("'p7'", str(e.exception))
        self.assertIn("row 0", str(e.exception))
        with self.assertRaises(ValueError):
            dl.predict(path, [dict(row, p7=float("nan"))])
        with self.assertRaises(ValueError):
            dl.predict({"not": "a path"}, [row])


class IrisTest(Checks):
    def test_text_labels(self):
        ctx = self.fit(dl.mlp_classifier, {"y": "species", "epochs": 60})
        m = ctx.output_json("metrics.json")
        species = ["setosa", "versicolor", "virginica"]
        self.assertEqual(m["classes"], species)
        self.assertEqual((m["n_train"], m["n_test"]), (112, 38))
        self.assertGreaterEqual(m["holdout_accuracy"], 0.9)
        df = pd.read_csv(IRIS)
        x = ["sepal_length", "sepal_width", "petal_length", "petal_width"]
        got = dl.predict(ctx.output("model.pt"), rows_of(df[x].to_numpy(), x))
        self.assertTrue(all(g["class"] in species for g in got))
        self.assertEqual(sorted(got[0]["probabilities"]), species)
        self.assertGreaterEqual(np.mean([g["class"] == s for g, s in zip(got, df["species"])]), 0.9)
        self.assertEqual(load_pt(ctx.output("model.pt"))["classes"], species)

    def fit(self, method, params, path=IRIS, **kw):
        return super().fit(method, params, path=path, **kw)

    def test_no_holdout(self):
        ctx = self.fit(dl.mlp_classifier, {"y": "species", "epochs": 3, "test_size": 0, "standardize": False})
        m = ctx.output_json("metrics.json")
        self.assertEqual((m["n_train"], m["n_test"]), (150, 0))
        self.assertIsNone(m["holdout_accuracy"])
        self.assertIsNone(m["confusion_matrix"])
        self.assertTrue(all(h["val_loss"] is None and h["val_accuracy"] is None for h in m["history"]))
        self.assertEqual(ctx.metric_values("val_loss"), [])
        self.assertEqual(len(ctx.metric_values("loss")), 3)
        self.assertEqual(load_pt(ctx.output("model.pt"))["scaling"], {"kind": "none"})


class ReproducibleTest(Checks):
    def test_same_seed_same_run_other_seed_other_run(self):
        params = {"y": "digit", "epochs": 2, "hidden_units": 32}
        a = self.fit(dl.mlp_classifier, params)
        b = self.fit(dl.mlp_classifier, params)
        c = self.fit(dl.mlp_classifier, dict(params, random_state=7))
        self.assertSameFit(a, b)
        ha = without_seconds(a.output_json("metrics.json")["history"])
        hc = without_seconds(c.output_json("metrics.json")["history"])
        self.assertNotEqual(ha, hc)
        self.assertNotEqual(ha[0]["loss"], hc[0]["loss"])
        cnn_a = self.fit(dl.cnn_classifier, {"y": "digit", "epochs": 1, "filters": 4})
        cnn_b = self.fit(dl.cnn_classifier, {"y": "digit", "epochs": 1, "filters": 4})
        self.assertSameFit(cnn_a, cnn_b)


class StopAndResumeTest(Checks):
    MLP = {"y": "digit", "epochs": 3, "hidden_units": 32}
    CNN = {"y": "digit", "epochs": 2, "filters": 4}

    def test_stopped_and_resumed_equals_uninterrupted(self):
        whole = self.fit(dl.mlp_classifier, self.MLP)
        # mid-epoch: epoch 2, batch 18 of 43 is next
        data = self.stopped(dl.mlp_classifier, self.MLP, N_BATCHES + 17)
        resumed = self.fit(dl.mlp_classifier, self.MLP, resume=data)
        self.assertSameFit(whole, resumed)
        m = resumed.output_json("metrics.json")
        self.assertTrue(m["resumed"])
        self.assertEqual((m["resumed_from_epoch"], m["resumed_from_batch"]), (2, 17))
        self.assertIn("resuming from epoch 2, batch 18 of 43", resumed.progress_messages())
        # the resumed attempt reports the epochs it finished, 2 and 3
        self.assertEqual(resumed.metric_values("epoch"), [2, 3])
        self.assertEqual(resumed.metric_values("loss"), [h["loss"] for h in m["history"][1:]])
        self.assertEqual(resumed.stop_polls, N_BATCHES - 17 + N_BATCHES)

        # stopped twice, the second time at an epoch's first batch, and on another dl.backend
        first = self.stopped(dl.mlp_classifier, self.MLP, 5)
        second = self.stopped(dl.mlp_classifier, dict(self.MLP, **{"dl.backend": "cpu"}), N_BATCHES - 5, resume=first)
        last = self.fit(dl.mlp_classifier, dict(self.MLP, **{"dl.backend": "auto"}), resume=second)
        self.assertEqual(last.output_json("metrics.json")["resumed_from_epoch"], 2)
        self.assertEqual(last.output_json("metrics.json")["resumed_from_batch"], 0)
        self.assertSameFit(whole, last)

    def test_cnn_stopped_and_resumed_equals_uninterrupted(self):
        whole = self.fit(dl.cnn_classifier, self.CNN)
        data = self.stopped(dl.cnn_classifier, self.CNN, 30)
        resumed = self.fit(dl.cnn_classifier, self.CNN, resume=data)
        self.assertSameFit(whole, resumed)
        self.assertEqual(resumed.output_json("metrics.json")["resumed_from_epoch"], 1)

    def test_end_of_epoch_checkpoints_resume_a_crashed_run(self):
        with mock.patch.object(dl, "CHECKPOINT_SECONDS", 0.0):
            whole = self.fit(dl.mlp_classifier, self.MLP)
        self.assertEqual(len(whole.checkpoints), 3, "one per epoch when the interval is 0")
        self.assertEqual(whole.last_checkpoint(), whole.checkpoints[-1])
        after_one = self.fit(dl.mlp_classifier, self.MLP, resume=whole.checkpoints[0])
        self.assertSameFit(whole, after_one)
        self.assertEqual(after_one.output_json("metrics.json")["resumed_from_epoch"], 2)
        # a checkpoint of the finished run: nothing left to train, the same outputs
        done = self.fit(dl.mlp_classifier, self.MLP, resume=whole.checkpoints[-1])
        self.assertSameFit(whole, done)
        self.assertEqual(done.metric_values("loss"), [])
        # checkpoints load with weights_only and hold tensors and JSON only
        ck = torch.load(io.BytesIO(whole.checkpoints[0]), weights_only=True)
        self.assertEqual(ck["format"], dl.CHECKPOINT_FORMAT)
        self.assertIsInstance(ck["meta"], str)

    def test_checkpoint_of_another_run_is_ignored(self):
        # (dl also prints why it ignores a checkpoint on stderr: kept out of the test output)
        quiet = contextlib.redirect_stderr(io.StringIO())
        quiet.__enter__()
        self.addCleanup(quiet.__exit__, None, None, None)
        whole = self.fit(dl.mlp_classifier, self.MLP)
        other_params = self.stopped(dl.mlp_classifier, dict(self.MLP, learning_rate=0.002), 50)
        ignored = self.fit(dl.mlp_classifier, self.MLP, resume=other_params)
        m = ignored.output_json("metrics.json")
        self.assertFalse(m["resumed"])
        self.assertIn("other parameters", m["checkpoint_ignored"])
        self.assertEqual(ignored.metric_values("epoch"), [1, 2, 3], "starts from epoch 1")
        self.assertTrue(any("ignoring the checkpoint" in s for s in ignored.progress_messages()))
        self.assertSameFit(whole, ignored)

        with open(DIGITS, encoding="utf-8") as f:
            fewer_rows = "".join(f.readlines()[:-1])
        ctx = FakeContext(self.MLP, csv_text=fewer_rows, outputs=OUT, resume=self.stopped(dl.mlp_classifier, self.MLP, 50))
        self.addCleanup(ctx._tmp.cleanup)
        dl.mlp_classifier(ctx)
        self.assertIn("other data", ctx.output_json("metrics.json")["checkpoint_ignored"])
        self.assertEqual(ctx.metric_values("epoch"), [1, 2, 3])

        junk = self.fit(dl.mlp_classifier, dict(self.MLP, epochs=1), resume=b"not a checkpoint")
        self.assertIn("cannot be read", junk.output_json("metrics.json")["checkpoint_ignored"])


class BackendTest(Checks):
    P = {"y": "species", "epochs": 1}

    def test_cpu(self):
        ctx = self.fit(dl.mlp_classifier, dict(self.P, **{"dl.backend": "cpu"}), path=IRIS)
        m = ctx.output_json("metrics.json")
        self.assertEqual((m["backend"], m["device"]), ("cpu", "cpu"))

    def test_gpu(self):
        """Where PyTorch sees CUDA the run uses it and says so; elsewhere asking for it is refused."""
        if torch.cuda.is_available():
            ctx = self.fit(dl.mlp_classifier, dict(self.P, **{"dl.backend": "gpu"}), path=IRIS)
            self.assertEqual(ctx.output_json("metrics.json")["backend"], "gpu")
            return
        for method in (dl.mlp_classifier, dl.cnn_classifier):
            with self.assertRaises(ValueError) as e:
                self.fit(method, dict(self.P, **{"dl.backend": "gpu"}), path=IRIS)
            self.assertIn("dl.backend", str(e.exception))
            self.assertIn("no CUDA device", str(e.exception))

    def test_unknown_backend(self):
        with self.assertRaises(ValueError) as e:
            self.fit(dl.mlp_classifier, dict(self.P, **{"dl.backend": "bogus"}), path=IRIS)
        for word in ("dl.backend", "auto", "gpu", "cpu", "bogus"):
            self.assertIn(word, str(e.exception))


class InputErrorsTest(Checks):
    def assertFails(self, method, params, *words, path=DIGITS, text=None):
        with self.assertRaises(ValueError) as e:
            self.fit(method, params, path=path, text=text)
        for w in words:
            self.assertIn(w, str(e.exception))

    def test_errors(self):
        mlp, cnn = dl.mlp_classifier, dl.cnn_classifier
        self.assertFails(mlp, {}, "parameter y is required")
        self.assertFails(mlp, {"y": None}, "parameter y is required")
        self.assertFails(cnn, {"y": "label"}, "'label'", "not in the dataset")
        text = "a,b,c\n" + "".join(f"{i},{'xy'[i % 2]},{i % 2}\n" for i in range(20))
        self.assertFails(mlp, {"y": "c"}, "'b'", "not numeric", text=text)
        self.assertFails(mlp, {"y": "c", "x": ["a"]}, "'a'", "missing", text="a,c\n1,0\n,1\n3,0\n4,1\n")
        self.assertFails(mlp, {"y": "a"}, "non-integer", text="a,b\n0.5,1\n1.5,2\n")
        self.assertFails(mlp, {"y": "digit", "x": ["digit", "p1"]}, "must not contain")
        self.assertFails(mlp, {"y": "digit", "epochs": 0}, "epochs")
        self.assertFails(mlp, {"y": "digit", "learning_rate": 0}, "learning_rate")
        self.assertFails(mlp, {"y": "digit", "hidden_layers": 9}, "hidden_layers")
        self.assertFails(mlp, {"y": "digit", "standardize": "yes"}, "standardize")
        self.assertFails(mlp, {"y": "digit", "test_size": 0.95}, "test_size")
        # image shapes that do not fit the x columns
        self.assertFails(cnn, {"y": "digit", "x": PIXELS[:63]}, "63", "perfect square")
        self.assertFails(cnn, {"y": "digit", "channels": 2}, "64", "32", "perfect square")
        self.assertFails(cnn, {"y": "digit", "image_height": 4, "image_width": 4}, "16", "64")
        self.assertFails(cnn, {"y": "digit", "image_height": 5}, "image_height=5", "64")
        self.assertFails(cnn, {"y": "digit", "filters": 0}, "filters")

    def test_rectangular_and_multichannel_images(self):
        # 64 pixels as 2 channels of 4x8 (pooled to 2x4, then 1x2), and a 1-pixel-high strip (no pooling)
        ctx = self.fit(dl.cnn_classifier, {"y": "digit", "epochs": 1, "channels": 2, "image_height": 4, "filters": 2})
        arch = ctx.output_json("metrics.json")["architecture"]
        self.assertEqual((arch["channels"], arch["height"], arch["width"]), (2, 4, 8))
        ctx = self.fit(dl.cnn_classifier, {"y": "digit", "epochs": 1, "image_height": 1, "image_width": 64, "filters": 2})
        got = dl.predict(ctx.output("model.pt"), rows_of(digits()[0][:3], PIXELS))
        self.assertEqual(len(got), 3)


if __name__ == "__main__":
    unittest.main()
