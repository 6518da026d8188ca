"""The helper a plugin's entry point is given: its parameters, its dataset and
where to write its outputs, and a way to report progress and metrics.

A plugin never signs anything and never sees the attempt's key: what it
reports goes, one JSON line per report, to the execution's supervisor on
the file descriptor named by MAPI_CONTROL_FD; the supervisor checks each
report, signs it and prints it as the run's event.
"""

import csv
import json
import math
import os

__all__ = ["Context"]


class Context:
    """What an entry point `def fit(ctx)` receives."""

    def __init__(self, control, params, dataset_path, output_dir, outputs, task_index=0, task_count=1):
        self._control = control
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

    def _send(self, report):
        self._control.write(json.dumps(report) + "\n")
        self._control.flush()


def _finite(x, what):
    x = float(x)
    if not math.isfinite(x):
        raise ValueError(f"{what} must be a finite number, not {x}")
    return x
