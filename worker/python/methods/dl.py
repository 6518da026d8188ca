"""Deep-learning classifiers in PyTorch: dl.mlp_classifier (a multilayer perceptron on numeric
columns) and dl.cnn_classifier (a small convolutional network on pixel columns), with one
`predict` serving both.

This module runs on the base-dl image: it imports only the standard library, numpy, pandas,
torch and matplotlib.

Shared behaviour:

- `y` names the class column (text or integer labels); `x` the input columns (default: every
  other column), numeric with no missing or infinite values.
- Hold-out: `test_size` of the rows (rounded up; 0 = none) is held out, stratified by class: each
  class gives its share of the hold-out rows (largest remainders get the odd rows), drawn with
  numpy's `default_rng([random_state, 0])` (`holdout_split`). The network is fitted on the
  training rows only.
- Scaling, from the training rows only: the MLP standardises each input column (`standardize`,
  population std; a constant column gets std 1); the CNN subtracts the mean of all training pixels
  and divides by their std (one number each; 1 when every pixel is the same).
- Training: `torch.manual_seed(random_state)` before the weights are made (on the CPU, then moved
  to the device), Adam (`learning_rate`) on the mean cross-entropy of each mini-batch of
  `batch_size` rows; the rows of epoch e are visited in the order of a permutation drawn from
  `default_rng([random_state, e])`, so any position in the run can be reproduced without saving a
  random state. No dropout or other randomness: a seed fixes the whole run (on a GPU, cuDNN is
  asked for deterministic kernels).
- Per epoch: `loss` is the mean training loss over the epoch's rows and `accuracy` the share of
  the epoch's training rows that the network classified correctly in the batch they were trained
  in (the weights change during the epoch: it is not a re-evaluation of the training rows at the
  end of it); `val_loss` and `val_accuracy` are measured on the hold-out rows at the end of the
  epoch. Each epoch reports `ctx.progress(e/E, "epoch e/E")` and the metrics `epoch`, `loss`,
  `accuracy`, `val_loss`, `val_accuracy` (with a hold-out) and `epoch_seconds`.
- Stop and checkpoints: `ctx.stop_requested()` is asked before every batch. At the end of an
  epoch a checkpoint is saved when none was in this attempt yet or the last one is at least
  `CHECKPOINT_SECONDS` old; when a stop is asked, the exact position (epoch, next batch, weights,
  Adam's state, the history and the current epoch's partial sums) is saved and `mapi.Stopped`
  raised. A later attempt continues from its checkpoint when the checkpoint was made by the same
  method with the same parameters (`dl.backend` aside: a run may move between GPU and CPU) on the
  same data; otherwise it is ignored (with a progress message) and training starts at epoch 1.
  A resumed run ends with exactly the weights and history of an uninterrupted one on the same
  device.
- `dl.backend`: `auto` (CUDA when PyTorch finds a device, else the CPU), `gpu` (CUDA, an error
  without it) or `cpu`; metrics.json records the backend used (`gpu` or `cpu`).

Outputs: `model.pt` (a `torch.save` of a dict readable with `torch.load(..., weights_only=True)`:
"format", "method", "architecture", "state_dict" (CPU tensors), "classes" (the labels in the
order of the network's outputs, as their original values), "inputs", "y", "scaling" (its numbers
as float64 tensors) and "torch_version"); `metrics.json` (the run's settings, the per-epoch
history, the final hold-out accuracy, loss and confusion matrix (null without a hold-out), the
accuracy of the final network on the training rows, the backend and device, mean epoch seconds,
whether the run resumed and from which epoch and batch); `plot.png` (loss and accuracy per
epoch, training and hold-out).

`predict(model, rows)` takes the path of a model.pt and rows (dicts of the model's input columns
to numbers) and returns per row {"class": label, "probability": p of that class,
"probabilities": {str(label): p, ...}}.
"""

import hashlib
import io
import json
import math
import numbers
import os
import sys
import threading
import time

import numpy as np

from checks import integer as _integer, number as _number, table as _checked_table

#: Least seconds between two end-of-epoch checkpoints of an attempt (a stop always saves one).
CHECKPOINT_SECONDS = 30.0
#: Version of the checkpoint layout; a checkpoint of another version is ignored.
CHECKPOINT_FORMAT = 1
#: Version of model.pt's layout.
MODEL_FORMAT = 1
#: Most distinct labels of y.
MAX_CLASSES = 1000
#: Activation values one evaluation chunk may hold (rows per chunk follow from the architecture).
EVAL_VALUES = 1 << 24

BACKENDS = ("auto", "gpu", "cpu")

COMMON_DEFAULTS = {
    "x": None,
    "batch_size": 32,
    "learning_rate": 0.001,
    "test_size": 0.25,
    "random_state": 0,
    "dl.backend": "auto",
}
MLP_DEFAULTS = dict(COMMON_DEFAULTS, epochs=30, hidden_units=64, hidden_layers=2, standardize=True)
CNN_DEFAULTS = dict(COMMON_DEFAULTS, epochs=20, image_height=0, image_width=0, channels=1, filters=16)


# ---------------------------------------------------------------------------------------------
# Parameters


def _params(ctx, defaults):
    p = dict(defaults)
    p.update({k: v for k, v in (ctx.params or {}).items() if v is not None})
    if not p.get("y"):
        raise ValueError("parameter y is required: name the column of class labels")
    if not isinstance(p["y"], str):
        raise ValueError(f"parameter y must be a column name, not {p['y']!r}")
    return p


def _boolean(p, name):
    v = p[name]
    if not isinstance(v, bool):
        raise ValueError(f"parameter {name} must be true or false, not {v!r}")
    return v


def _common(p):
    return {
        "epochs": _integer(p, "epochs", 1, 10_000),
        "batch_size": _integer(p, "batch_size", 1, 65_536),
        "learning_rate": _number(p, "learning_rate", 0.0, 10.0, lo_open=True),
        "test_size": _number(p, "test_size", 0.0, 0.9),
        "random_state": _integer(p, "random_state", 0, 2**32 - 1),
    }


def _device(backend):
    """The torch device `dl.backend` asks for."""
    import torch

    if not isinstance(backend, str) or backend not in BACKENDS:
        raise ValueError(f"parameter dl.backend must be auto, gpu or cpu, not {backend!r}")
    if backend == "cpu":
        return torch.device("cpu")
    if torch.cuda.is_available():
        return torch.device("cuda")
    if backend == "gpu":
        raise ValueError(
            "dl.backend is gpu but PyTorch here finds no CUDA device: set dl.backend to cpu or auto "
            "(auto uses a GPU when there is one), or run the model on the GPU class"
        )
    return torch.device("cpu")


# ---------------------------------------------------------------------------------------------
# Data


def _table(ctx, p):
    """(y column, x columns, X as float64, labels): inputs checked numeric and complete."""
    df, ycol, xcols, X = _checked_table(ctx, p)
    return ycol, [str(c) for c in xcols], X, _labels(df[ycol], ycol)


def _labels(y, ycol):
    """y as class labels: integers stay integers (integer-valued floats become integers), text stays text."""
    import pandas as pd

    if pd.api.types.is_bool_dtype(y):
        return y.to_numpy(dtype=bool)
    if pd.api.types.is_numeric_dtype(y):
        values = y.to_numpy(dtype=float)
        bad = ~np.isfinite(values) | (values != np.round(values))
        if bad.any():
            raise ValueError(
                f"target column {ycol!r} (y) holds non-integer numbers such as {values[bad][0]!r}: a classifier "
                f"needs class labels (integers or text)"
            )
        return y.to_numpy(dtype=np.int64)
    return y.astype(str).to_numpy(dtype=object)


def _plain(values):
    """Labels as plain Python values (JSON and weights-only pickles)."""
    return [v.item() if hasattr(v, "item") else v for v in values]


def holdout_split(labels, test_size, random_state, ycol="y"):
    """(train rows, hold-out rows): sorted row indices of a stratified hold-out.

    ceil(test_size * n) rows are held out; class c gets floor(share_c) of them, share_c being
    n_test * n_c / n, and the rows still unassigned go one each to the classes with the largest
    remainders (ties: class order). The rows of each class are drawn in class order with
    `numpy.random.default_rng([random_state, 0])`. test_size 0: every row trains, no hold-out."""
    labels = np.asarray(labels)
    n = len(labels)
    if test_size == 0:
        return np.arange(n), np.arange(0)
    classes, codes, counts = np.unique(labels, return_inverse=True, return_counts=True)
    k = len(classes)
    n_test = math.ceil(test_size * n)
    if counts.min() < 2:
        raise ValueError(
            f"class {_plain([classes[counts.argmin()]])[0]!r} of y ({ycol!r}) has a single row: a stratified "
            f"hold-out needs at least 2 rows of each class; remove that row or set test_size=0"
        )
    share = n_test * counts / n
    take = np.floor(share).astype(np.int64)
    left = n_test - int(take.sum())
    if left:
        order = sorted(range(k), key=lambda c: (-(share[c] - take[c]), c))
        for c in order[:left]:
            take[c] += 1
    full = np.flatnonzero(take >= counts)
    if len(full) or n_test >= n:
        c = full[0] if len(full) else int(np.argmax(take))
        raise ValueError(
            f"test_size={test_size} would hold out every row of class {_plain([classes[c]])[0]!r} of y ({ycol!r}), "
            f"leaving none to train on: lower test_size (0 = no hold-out)"
        )
    rng = np.random.default_rng([random_state, 0])
    held = []
    for c in range(k):
        rows = np.flatnonzero(codes == c)
        held.append(rng.permutation(rows)[: take[c]])
    test = np.sort(np.concatenate(held))
    train = np.setdiff1d(np.arange(n), test)
    return train, test


# ---------------------------------------------------------------------------------------------
# Networks


def _build(arch):
    """The network an architecture description names (weights from torch's current seed)."""
    import torch.nn as nn

    if arch["kind"] == "mlp":
        layers, width = [], arch["inputs"]
        for _ in range(arch["hidden_layers"]):
            layers += [nn.Linear(width, arch["hidden_units"]), nn.ReLU()]
            width = arch["hidden_units"]
        layers.append(nn.Linear(width, arch["classes"]))
        return nn.Sequential(*layers)
    if arch["kind"] == "cnn":
        c, h, w, f = arch["channels"], arch["height"], arch["width"], arch["filters"]
        layers = []
        for cin, cout in ((c, f), (f, 2 * f)):
            layers += [nn.Conv2d(cin, cout, kernel_size=3, padding=1), nn.ReLU()]
            if min(h, w) >= 2:
                layers.append(nn.MaxPool2d(2))
                h, w = h // 2, w // 2
        layers += [nn.Flatten(), nn.Linear(2 * f * h * w, arch["classes"])]
        return nn.Sequential(*layers)
    raise ValueError(f"unknown architecture {arch.get('kind')!r}")


def _eval_rows(arch):
    """Rows per evaluation chunk: about EVAL_VALUES activation values, 1..4096 rows."""
    if arch["kind"] == "mlp":
        per_row = max(arch["inputs"], arch["hidden_units"], arch["classes"])
    else:
        per_row = max(arch["channels"], arch["filters"]) * arch["height"] * arch["width"]
    return int(min(4096, max(1, EVAL_VALUES // max(1, per_row))))


def _image_shape(p, n_inputs):
    channels = _integer(p, "channels", 1, 16)
    h = _integer(p, "image_height", 0, 4096)
    w = _integer(p, "image_width", 0, 4096)
    if h == 0 and w == 0:
        if n_inputs % channels:
            raise ValueError(
                f"x has {n_inputs} columns, not a multiple of channels={channels}: each channel needs the same "
                f"number of pixels"
            )
        side = math.isqrt(n_inputs // channels)
        if side * side != n_inputs // channels:
            raise ValueError(
                f"x has {n_inputs} columns, so {n_inputs // channels} pixels per channel (channels={channels}), "
                f"which is not a perfect square: set image_height and image_width (height x width x channels "
                f"must be {n_inputs})"
            )
        h = w = side
    elif h == 0 or w == 0:
        known, name = (w, "image_width") if h == 0 else (h, "image_height")
        per = n_inputs / channels / known
        if per != int(per) or per < 1:
            raise ValueError(
                f"x has {n_inputs} columns, which channels={channels} and {name}={known} do not divide into "
                f"whole rows: set both image_height and image_width (height x width x channels must be {n_inputs})"
            )
        h, w = (int(per), w) if h == 0 else (h, int(per))
    if channels * h * w != n_inputs:
        raise ValueError(
            f"an image of channels={channels} x image_height={h} x image_width={w} has {channels * h * w} pixels, "
            f"but x has {n_inputs} columns: they must be equal"
        )
    return channels, h, w


def _scale(X, scaling):
    """X (float64 rows) scaled as the model's `scaling` says, as float32."""
    kind = scaling["kind"]
    if kind == "none":
        return X.astype(np.float32)
    mean = np.asarray(scaling["mean"], dtype=np.float64)
    std = np.asarray(scaling["std"], dtype=np.float64)
    return ((X - mean) / std).astype(np.float32)


def _fit_scaling(kind, X_train):
    if kind == "none":
        return {"kind": "none"}
    if kind == "standardize":
        mean = X_train.mean(axis=0)
        std = X_train.std(axis=0)
        std[std == 0] = 1.0
        return {"kind": kind, "mean": mean, "std": std}
    mean = float(X_train.mean())
    std = float(X_train.std())
    return {"kind": kind, "mean": np.float64(mean), "std": np.float64(std if std > 0 else 1.0)}


def _as_input(X, arch, torch, device):
    t = torch.from_numpy(np.ascontiguousarray(X)).to(device)
    if arch["kind"] == "cnn":
        t = t.view(-1, arch["channels"], arch["height"], arch["width"])
    return t


# ---------------------------------------------------------------------------------------------
# Checkpoints


def _serialise(obj):
    import torch

    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


def _identity(method, settings, X, labels):
    """Hashes of what a checkpoint must agree on: the parameters (less dl.backend) and the data."""
    params = hashlib.sha256(json.dumps([method, settings], sort_keys=True, default=str).encode()).hexdigest()
    h = hashlib.sha256()
    h.update(json.dumps([list(X.shape), [str(type(v).__name__) for v in labels[:1]]]).encode())
    h.update(np.ascontiguousarray(X, dtype=np.float64).tobytes())
    h.update("\x1f".join(str(v) for v in labels).encode())
    return {"params": params, "data": h.hexdigest()}


def _read_checkpoint(data, identity):
    """(checkpoint, None) when `data` is a checkpoint of this run, else (None, why not)."""
    import torch

    try:
        ck = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
        meta = json.loads(ck["meta"])
        if ck.get("format") != CHECKPOINT_FORMAT:
            return None, f"it has format {ck.get('format')!r}, not {CHECKPOINT_FORMAT}"
    except Exception as e:  # noqa: BLE001 - any unreadable checkpoint is ignored, and says why
        return None, f"it cannot be read as a checkpoint ({type(e).__name__})"
    if meta.get("identity", {}).get("params") != identity["params"]:
        return None, "it was made with other parameters or by another method"
    if meta.get("identity", {}).get("data") != identity["data"]:
        return None, "it was made on other data"
    ck["meta"] = meta
    return ck, None


# ---------------------------------------------------------------------------------------------
# Training


class _Run:
    """One attempt's training: the model, Adam, the position and the history."""

    def __init__(self, ctx, method, arch, settings, identity, device, X_train, y_train, X_test, y_test):
        import torch

        self.torch = torch
        self.ctx = ctx
        self.method = method
        self.arch = arch
        self.settings = settings
        self.identity = identity
        self.device = device
        self.epochs = settings["epochs"]
        self.batch_size = settings["batch_size"]
        self.seed = settings["random_state"]
        self.X_train = _as_input(X_train, arch, torch, device)
        self.y_train = torch.from_numpy(y_train).to(device)
        self.X_test = _as_input(X_test, arch, torch, device) if X_test is not None else None
        self.y_test = torch.from_numpy(y_test).to(device) if y_test is not None else None
        self.n_train = len(y_train)
        self.n_batches = -(-self.n_train // self.batch_size)

        torch.manual_seed(self.seed)
        self.model = _build(arch).to(device)
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=settings["learning_rate"])
        self.epoch, self.batch = 1, 0
        self.history = []
        self._zero_partial()
        self.resumed = None
        self.ignored = None
        self.last_checkpoint = None
        self.can_checkpoint = True

    def _zero_partial(self):
        torch = self.torch
        self.loss_sum = torch.zeros((), dtype=torch.float64, device=self.device)
        self.correct = torch.zeros((), dtype=torch.int64, device=self.device)
        self.seen = 0
        self.seconds = 0.0

    # -- checkpoints

    def state(self):
        meta = {
            "method": self.method,
            "identity": self.identity,
            "epoch": self.epoch,
            "batch": self.batch,
            "history": self.history,
            "partial": {
                "loss_sum": float(self.loss_sum.item()),
                "correct": int(self.correct.item()),
                "seen": self.seen,
                "seconds": self.seconds,
            },
        }
        optim = self.optimizer.state_dict()["state"]
        return {
            "format": CHECKPOINT_FORMAT,
            # Floats do not survive torch 1.13's weights-only loader: everything but tensors goes as JSON.
            "meta": json.dumps(meta),
            "model": {k: v.detach().cpu() for k, v in self.model.state_dict().items()},
            "optimizer": {int(i): {k: v.detach().cpu() for k, v in s.items()} for i, s in optim.items()},
        }

    def save(self):
        if not self.can_checkpoint:
            return False
        try:
            self.ctx.checkpoint(_serialise(self.state()))
        except RuntimeError as e:  # a context with nowhere to keep one: carry on without
            print(f"dl: no checkpoint saved ({e}); continuing without checkpoints", file=sys.stderr)
            self.can_checkpoint = False
            return False
        self.last_checkpoint = time.monotonic()
        return True

    def resume(self, data):
        torch = self.torch
        ck, why = _read_checkpoint(data, self.identity)
        if ck is None:
            self.ignored = why
            message = f"ignoring the checkpoint of an earlier attempt: {why}; training from epoch 1"
            print(f"dl: {message}", file=sys.stderr)
            self.ctx.progress(0.0, message)
            return
        meta = ck["meta"]
        self.model.load_state_dict(ck["model"])
        optim = self.optimizer.state_dict()
        optim["state"] = ck["optimizer"]
        self.optimizer.load_state_dict(optim)
        self.epoch, self.batch = int(meta["epoch"]), int(meta["batch"])
        self.history = meta["history"]
        part = meta["partial"]
        self.loss_sum = torch.tensor(part["loss_sum"], dtype=torch.float64, device=self.device)
        self.correct = torch.tensor(part["correct"], dtype=torch.int64, device=self.device)
        self.seen = int(part["seen"])
        self.seconds = float(part["seconds"])
        self.resumed = {"epoch": self.epoch, "batch": self.batch}
        done = min(self.epoch - 1, self.epochs)
        self.ctx.progress(done / self.epochs, f"resuming from epoch {self.epoch}, batch {self.batch + 1} of {self.n_batches}")

    # -- the loop

    def evaluate(self, X, y):
        """(mean loss, accuracy, predicted class indices on the CPU)."""
        torch = self.torch
        F = torch.nn.functional
        chunk = _eval_rows(self.arch)
        loss_sum = torch.zeros((), dtype=torch.float64, device=self.device)
        preds = []
        self.model.eval()
        with torch.no_grad():
            for s in range(0, len(y), chunk):
                out = self.model(X[s : s + chunk])
                loss_sum += F.cross_entropy(out, y[s : s + chunk], reduction="sum").double()
                preds.append(out.argmax(dim=1))
        self.model.train()
        pred = torch.cat(preds)
        n = len(y)
        return float(loss_sum.item()) / n, int((pred == y).sum().item()) / n, pred.cpu().numpy()

    def train(self):
        import mapi  # the platform's helper; imported here, as a model server has no mapi.py

        torch = self.torch
        F = torch.nn.functional
        ctx = self.ctx
        self.model.train()
        while self.epoch <= self.epochs:
            e = self.epoch
            order = np.random.default_rng([self.seed, e]).permutation(self.n_train)
            order = torch.from_numpy(order).to(self.device)
            started = time.perf_counter()
            while self.batch < self.n_batches:
                if ctx.stop_requested():
                    self.seconds += time.perf_counter() - started
                    saved = self.save()
                    raise mapi.Stopped(
                        f"stopped at epoch {e}, batch {self.batch + 1} of {self.n_batches}"
                        + (" (checkpoint saved)" if saved else "")
                    )
                rows = order[self.batch * self.batch_size : (self.batch + 1) * self.batch_size]
                xb, yb = self.X_train[rows], self.y_train[rows]
                self.optimizer.zero_grad(set_to_none=True)
                out = self.model(xb)
                loss = F.cross_entropy(out, yb)
                loss.backward()
                self.optimizer.step()
                with torch.no_grad():
                    self.loss_sum += loss.detach().double() * len(rows)
                    self.correct += (out.argmax(dim=1) == yb).sum()
                self.seen += len(rows)
                self.batch += 1
            loss = float(self.loss_sum.item()) / self.seen
            if not math.isfinite(loss):
                raise ValueError(
                    f"training diverged in epoch {e} (the mean loss is {loss}): lower learning_rate "
                    f"(now {self.settings['learning_rate']})"
                )
            record = {"epoch": e, "loss": loss, "accuracy": int(self.correct.item()) / self.seen,
                      "val_loss": None, "val_accuracy": None}
            if self.X_test is not None:
                record["val_loss"], record["val_accuracy"], _ = self.evaluate(self.X_test, self.y_test)
            record["seconds"] = self.seconds + (time.perf_counter() - started)
            self.history.append(record)
            self.epoch, self.batch = e + 1, 0
            self._zero_partial()

            ctx.progress(e / self.epochs, f"epoch {e}/{self.epochs}")
            ctx.metric("epoch", e)
            for name in ("loss", "accuracy", "val_loss", "val_accuracy"):
                if record[name] is not None:
                    ctx.metric(name, record[name])
            ctx.metric("epoch_seconds", record["seconds"])
            if self.last_checkpoint is None or time.monotonic() - self.last_checkpoint >= CHECKPOINT_SECONDS:
                self.save()


def _device_name(device):
    import torch

    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return "cpu"


def _confusion(y, pred, k):
    cm = np.zeros((k, k), dtype=np.int64)
    np.add.at(cm, (y, pred), 1)
    return cm.tolist()


def _fit(ctx, method, p, settings, make_arch, scaling_kind, title):
    """The shared body of both methods, once their own parameters are checked."""
    import torch

    device = _device(p["dl.backend"])
    ctx.progress(0.0, "reading the dataset")
    ycol, inputs, X, labels = _table(ctx, p)
    classes, codes = np.unique(labels, return_inverse=True)
    if len(classes) < 2:
        raise ValueError(f"target column {ycol!r} (y) has a single class ({_plain(classes)[0]!r}): at least 2 are needed")
    if len(classes) > MAX_CLASSES:
        raise ValueError(f"target column {ycol!r} (y) has {len(classes)} distinct labels, more than {MAX_CLASSES} classes")
    classes_l = _plain(classes)
    codes = codes.astype(np.int64)
    arch = make_arch(len(inputs), len(classes))
    train_rows, test_rows = holdout_split(labels, settings["test_size"], settings["random_state"], ycol)
    scaling = _fit_scaling(scaling_kind, X[train_rows])
    Xs = _scale(X, scaling)
    has_test = len(test_rows) > 0

    identity = _identity(method, dict(settings, y=ycol, x=inputs, architecture=arch), X, labels)
    if device.type == "cuda":
        torch.backends.cudnn.deterministic = True
        torch.backends.cudnn.benchmark = False
    run = _Run(
        ctx, method, arch, settings, identity, device,
        Xs[train_rows], codes[train_rows],
        Xs[test_rows] if has_test else None, codes[test_rows] if has_test else None,
    )
    earlier = ctx.resume()
    if earlier is not None:
        run.resume(earlier)
    run.train()

    ctx.progress(0.95, "measuring and writing the outputs")
    holdout_loss = holdout_acc = confusion = None
    if has_test:
        holdout_loss, holdout_acc, pred = run.evaluate(run.X_test, run.y_test)
        confusion = _confusion(codes[test_rows], pred, len(classes))
    _, train_acc, _ = run.evaluate(run.X_train, run.y_train)

    model = {
        "format": MODEL_FORMAT,
        "method": method,
        "architecture": arch,
        "state_dict": {k: v.detach().cpu() for k, v in run.model.state_dict().items()},
        "classes": classes_l,
        "inputs": inputs,
        "y": ycol,
        "scaling": {
            k: (torch.from_numpy(np.asarray(v, dtype=np.float64).copy()) if k != "kind" else v)
            for k, v in scaling.items()
        },
        "torch_version": str(torch.__version__),
    }
    with open(ctx.output_path("model.pt"), "wb") as f:
        f.write(_serialise(model))

    seconds = [h["seconds"] for h in run.history]
    metrics = {
        "method": method,
        "backend": "gpu" if device.type == "cuda" else "cpu",
        "backend_requested": p["dl.backend"],
        "device": _device_name(device),
        "torch_version": str(torch.__version__),
        "y": ycol,
        "inputs": inputs,
        "classes": classes_l,
        "n_rows": len(labels),
        "n_train": len(train_rows),
        "n_test": len(test_rows),
        "params": settings,
        "architecture": arch,
        "scaling": scaling_kind,
        "epoch_accuracy": "share of each epoch's training rows classified correctly in the batch they were trained in",
        "history": run.history,
        "holdout_accuracy": holdout_acc,
        "holdout_loss": holdout_loss,
        "confusion_matrix": confusion,
        "confusion_matrix_layout": "rows: true class, columns: predicted class, both in the order of classes",
        "train_accuracy": train_acc,
        "mean_epoch_seconds": float(np.mean(seconds)) if seconds else None,
        "resumed": run.resumed is not None,
        "resumed_from_epoch": run.resumed["epoch"] if run.resumed else None,
        "resumed_from_batch": run.resumed["batch"] if run.resumed else None,
        "checkpoint_ignored": run.ignored,
    }
    ctx.write_json("metrics.json", metrics)
    _plot(ctx.output_path("plot.png"), run.history, title)
    ctx.progress(1.0, "done")


# ---------------------------------------------------------------------------------------------
# Plot


def _plot(path, history, title):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    epochs = [h["epoch"] for h in history]
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    try:
        for ax, key, label in ((left, "loss", "loss (cross-entropy)"), (right, "accuracy", "accuracy")):
            ax.plot(epochs, [h[key] for h in history], marker="o", markersize=3, color="#4C72B0", label="training")
            val = [h["val_" + key] for h in history]
            if any(v is not None for v in val):
                ax.plot(epochs, val, marker="o", markersize=3, color="#DD8452", label="hold-out")
            ax.set_xlabel("epoch")
            ax.set_ylabel(label)
            ax.grid(alpha=0.3)
            ax.legend()
        right.set_ylim(top=1.0)
        fig.suptitle(title)
        fig.tight_layout()
        fig.savefig(path, format="png", dpi=100)
    finally:
        plt.close(fig)


# ---------------------------------------------------------------------------------------------
# The methods


def mlp_classifier(ctx):
    """dl.mlp_classifier: `hidden_layers` fully connected ReLU layers of `hidden_units` units,
    then a linear layer to the classes; inputs standardised on the training rows (`standardize`)."""
    p = _params(ctx, MLP_DEFAULTS)
    settings = _common(p)
    units = _integer(p, "hidden_units", 1, 4096)
    layers = _integer(p, "hidden_layers", 1, 8)
    standardize = _boolean(p, "standardize")
    settings.update(hidden_units=units, hidden_layers=layers, standardize=standardize)
    _device(p["dl.backend"])  # a wrong backend fails before the data is read

    def arch(n_inputs, n_classes):
        return {"kind": "mlp", "inputs": n_inputs, "hidden_units": units, "hidden_layers": layers, "classes": n_classes}

    _fit(ctx, "dl.mlp_classifier", p, settings, arch, "standardize" if standardize else "none",
         f"MLP classifier ({layers} x {units} units)")


def cnn_classifier(ctx):
    """dl.cnn_classifier: two blocks of 3x3 convolution (padding 1) + ReLU + 2x2 max-pooling
    (pooling only while both sides are at least 2) with `filters` and 2·`filters` channels, then a
    linear layer to the classes. The x columns are each image's pixels, channel after channel,
    each channel row-major; they are scaled by the mean and std of all training pixels."""
    p = _params(ctx, CNN_DEFAULTS)
    settings = _common(p)
    filters = _integer(p, "filters", 1, 512)
    channels = _integer(p, "channels", 1, 16)
    _integer(p, "image_height", 0, 4096)
    _integer(p, "image_width", 0, 4096)
    _device(p["dl.backend"])

    def arch(n_inputs, n_classes):
        c, h, w = _image_shape(p, n_inputs)
        return {"kind": "cnn", "channels": c, "height": h, "width": w, "filters": filters, "classes": n_classes}

    settings.update(filters=filters, channels=channels, image_height=p["image_height"], image_width=p["image_width"])
    _fit(ctx, "dl.cnn_classifier", p, settings, arch, "scalar", f"CNN classifier ({filters}/{2 * filters} filters)")


# ---------------------------------------------------------------------------------------------
# predict

_MODELS = {}
_MODELS_KEPT = 8
_MODELS_LOCK = threading.Lock()


class _Loaded:
    def __init__(self, bundle, device):
        import torch

        if not isinstance(bundle, dict) or bundle.get("format") != MODEL_FORMAT or "architecture" not in bundle:
            raise ValueError("this file is not a model.pt written by dl.mlp_classifier or dl.cnn_classifier")
        self.arch = dict(bundle["architecture"])
        self.inputs = list(bundle["inputs"])
        self.classes = list(bundle["classes"])
        self.scaling = {k: (v.numpy() if isinstance(v, torch.Tensor) else v) for k, v in bundle["scaling"].items()}
        self.device = device
        self.model = _build(self.arch)
        self.model.load_state_dict(bundle["state_dict"])
        self.model.to(device).eval()


def _load_model(path):
    import torch

    st = os.stat(path)
    key = os.path.abspath(path)
    stamp = (st.st_mtime_ns, st.st_size)
    with _MODELS_LOCK:
        hit = _MODELS.get(key)
        if hit is not None and hit[0] == stamp:
            return hit[1]
        bundle = torch.load(path, map_location="cpu", weights_only=True)
        loaded = _Loaded(bundle, _device("auto"))
        _MODELS.pop(key, None)
        while len(_MODELS) >= _MODELS_KEPT:
            _MODELS.pop(next(iter(_MODELS)))
        _MODELS[key] = (stamp, loaded)
        return loaded


def _matrix(rows, inputs):
    X = np.empty((len(rows), len(inputs)), dtype=np.float64)
    for i, row in enumerate(rows):
        if not isinstance(row, dict):
            raise ValueError(f"row {i} must be an object mapping input columns to numbers, not {type(row).__name__}")
        for j, name in enumerate(inputs):
            if name not in row:
                raise ValueError(f"row {i} has no value for input column {name!r}; the model's inputs are {inputs}")
            v = row[name]
            if isinstance(v, bool) or not isinstance(v, numbers.Real):
                raise ValueError(f"input column {name!r} of row {i} must be a number, not {v!r}")
            v = float(v)
            if not math.isfinite(v):
                raise ValueError(f"input column {name!r} of row {i} must be a finite number, not {v!r}")
            X[i, j] = v
    return X


def predict(model, rows):
    """Classifies rows (dicts of the model's input columns to numbers) with a model.pt of
    dl.mlp_classifier or dl.cnn_classifier (its path). Per row: {"class": label, "probability":
    p of that class, "probabilities": {str(label): p, ...}} (softmax of the network's outputs)."""
    import torch

    if not isinstance(model, (str, os.PathLike)):
        raise ValueError("model must be the path of a model.pt written by dl.mlp_classifier or dl.cnn_classifier")
    if not isinstance(rows, (list, tuple)):
        raise ValueError("rows must be a list of objects mapping input columns to numbers")
    m = _load_model(os.fspath(model))
    X = _matrix(rows, m.inputs)
    if len(rows) == 0:
        return []
    Xt = _as_input(_scale(X, m.scaling), m.arch, torch, m.device)
    chunk = _eval_rows(m.arch)
    probs = []
    with torch.no_grad():
        for s in range(0, len(rows), chunk):
            probs.append(torch.softmax(m.model(Xt[s : s + chunk]).double(), dim=1).cpu())
    proba = torch.cat(probs).numpy()
    best = proba.argmax(axis=1)
    out = []
    for k, pr in zip(best, proba):
        out.append(
            {
                "class": m.classes[k],
                "probability": float(pr[k]),
                "probabilities": {str(c): float(pr[j]) for j, c in enumerate(m.classes)},
            }
        )
    return out
