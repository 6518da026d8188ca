"""The helper a plugin's entry point is given: its parameters, its dataset and
where to write its outputs, and a way to report progress and metrics.

A plugin never signs anything and never sees the attempt's key: what it
reports goes, one JSON line per report, to the execution's supervisor on
the file descriptor named by MAPI_CONTROL_FD; the supervisor checks each
report, signs it and prints it as the run's event.

Stopping and checkpoints. The platform asks a method to stop (the run's
timeout, a cancel, the machine going away) with SIGTERM. A method that never
calls `ctx.stop_requested()` is interrupted where it is (`Stopped` is raised
into it) and the attempt ends without a checkpoint. A method that polls
`ctx.stop_requested()` handles the stop itself: it saves its state with
`ctx.checkpoint(data)` and raises `Stopped`; the supervisor uploads the
checkpoint, and the next attempt of the run finds it in `ctx.resume()`.
`ctx.checkpoint(data)` may be called at any time (say each epoch): a crash
then loses only the work since the last one.
"""

import csv
import json
import math
import os

__all__ = ["Context", "Stopped"]


class Stopped(Exception):
    """Raised to end the method early because the platform asked it to stop."""


class Context:
    """What an entry point `def fit(ctx)` receives."""

    def __init__(
        self,
        control,
        params,
        dataset_path,
        output_dir,
        outputs,
        task_index=0,
        task_count=1,
        checkpoint_path=None,
        resume_path=None,
    ):
        self._control = control
        self._checkpoint_path = checkpoint_path
        self._resume_path = resume_path
        self._stop = False
        self._polls_stop = False
        self._checkpoints = 0
        self.params = params
        self.dataset_path = dataset_path
        self.output_dir = output_dir
        self._outputs = outputs
        #: This task's index in its execution, and how many tasks it has (0 and 1 for most runs).
        self.task_index = task_index
        self.task_count = task_count

    def rows(self):
        """The dataset as a list of dicts (column name to cell text)."""
        with open(self.dataset_path, newline="", encoding="utf-8") as f:
            return list(csv.DictReader(f))

    def read_csv(self):
        """The dataset as a pandas DataFrame (pandas must be in the base image)."""
        import pandas

        return pandas.read_csv(self.dataset_path)

    def output_path(self, name):
        """Where to write the output `name`, one the manifest declares."""
        if name not in self._outputs:
            raise ValueError(
                f"output {name!r} is not declared by this method: declared are {sorted(self._outputs)}"
            )
        return os.path.join(self.output_dir, name)

    def write_json(self, name, value):
        """Writes the output `name` as JSON."""
        with open(self.output_path(name), "w", encoding="utf-8") as f:
            json.dump(value, f)

    def progress(self, fraction, message=""):
        """Reports how far the method is, `fraction` in [0, 1]."""
        self._send({"progress": {"fraction": _finite(fraction, "fraction"), "message": str(message)}})

    def metric(self, name, value):
        """Reports a named measurement."""
        self._send({"metric": {"name": str(name), "value": _finite(value, "value")}})

    def stop_requested(self):
        """Whether the platform asked the method to stop. A method that calls this
        handles the stop itself: it checkpoints and raises `Stopped` when it is True."""
        self._polls_stop = True
        return self._stop

    def checkpoint(self, data):
        """Saves `data` (bytes) as the run's checkpoint, replacing the last one; the
        supervisor uploads it, and a later attempt of the run reads it with `resume()`."""
        if self._checkpoint_path is None:
            raise RuntimeError("this context has nowhere to keep a checkpoint")
        if not isinstance(data, (bytes, bytearray)):
            raise TypeError(f"a checkpoint is bytes, not {type(data).__name__}")
        tmp = self._checkpoint_path + ".tmp"
        with open(tmp, "wb") as f:
            f.write(data)
        # Whole or not at all: the supervisor may read the file at any time.
        os.replace(tmp, self._checkpoint_path)
        self._checkpoints += 1
        self._send({"checkpoint": {"n": self._checkpoints}})

    def resume(self):
        """The checkpoint an earlier attempt of this run saved (bytes), or None."""
        if self._resume_path is None or not os.path.isfile(self._resume_path):
            return None
        with open(self._resume_path, "rb") as f:
            return f.read()

    def _on_stop(self):
        """The platform's stop (SIGTERM): noted for a method that polls for it, else raised into it."""
        self._stop = True
        if not self._polls_stop:
            raise Stopped("the platform asked the method to stop")

    def _send(self, report):
        self._control.write(json.dumps(report) + "\n")
        self._control.flush()


def _finite(x, what):
    x = float(x)
    if not math.isfinite(x):
        raise ValueError(f"{what} must be a finite number, not {x}")
    return x
