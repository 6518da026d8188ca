"""What the platform's own Python methods are tested with: a context like
the one the worker gives them (`mapi.Context`), recording what they report
instead of sending it to a supervisor.

Run the tests with Debian's interpreter, from the repository root:

    /usr/bin/python3 -m unittest discover -s worker/python/tests -t worker/python
"""

import json
import math
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
PYTHON_DIR = os.path.dirname(HERE)
sys.path[:0] = [PYTHON_DIR, os.path.join(PYTHON_DIR, "methods")]

import mapi  # noqa: E402  (the helper, from worker/python)

EXAMPLES = os.path.normpath(os.path.join(PYTHON_DIR, "..", "..", "examples"))


class _Recorder:
    """Stands in for the control pipe: keeps every report the method sends."""

    def __init__(self):
        self.reports = []

    def write(self, text):
        for line in text.splitlines():
            if line.strip():
                self.reports.append(json.loads(line))

    def flush(self):
        pass


class FakeContext(mapi.Context):
    """A `mapi.Context` over a CSV file or text, writing outputs to a temporary directory.

    Checkpoints: `ctx.checkpoint(data)` keeps the bytes in the temporary directory (read the
    last with `last_checkpoint()`, every one saved with `checkpoints`); `resume` (bytes) is what
    `ctx.resume()` returns, as an earlier attempt's checkpoint. `stop_after=N` plays the
    platform's stop (SIGTERM): `stop_requested()` answers False N times, then True."""

    def __init__(
        self,
        params,
        csv_path=None,
        csv_text=None,
        outputs=(),
        task_index=0,
        task_count=1,
        resume=None,
        stop_after=None,
    ):
        self._tmp = tempfile.TemporaryDirectory()
        if csv_text is not None:
            csv_path = os.path.join(self._tmp.name, "dataset.csv")
            with open(csv_path, "w", encoding="utf-8") as f:
                f.write(csv_text)
        out = os.path.join(self._tmp.name, "out")
        os.makedirs(out)
        resume_path = None
        if resume is not None:
            resume_path = os.path.join(self._tmp.name, "resume.ckpt")
            with open(resume_path, "wb") as f:
                f.write(resume)
        self._recorder = _Recorder()
        super().__init__(
            self._recorder,
            dict(params),
            csv_path,
            out,
            list(outputs),
            checkpoint_path=os.path.join(self._tmp.name, "checkpoint.ckpt"),
            resume_path=resume_path,
        )
        self.task_index = task_index
        self.task_count = task_count
        self._stop_after = stop_after
        self.stop_polls = 0  # how many times the method asked stop_requested()
        self.checkpoints = []  # the bytes of every checkpoint saved, in order

    def stop_requested(self):
        self.stop_polls += 1
        if self._stop_after is not None and self.stop_polls > self._stop_after:
            self._stop = True
        return super().stop_requested()

    def checkpoint(self, data):
        super().checkpoint(data)
        self.checkpoints.append(bytes(data))

    def last_checkpoint(self):
        """The bytes of the last checkpoint saved, or None."""
        if not os.path.isfile(self._checkpoint_path):
            return None
        with open(self._checkpoint_path, "rb") as f:
            return f.read()

    def progress_messages(self):
        """The progress messages reported, in order."""
        return [r["progress"]["message"] for r in self._recorder.reports if "progress" in r]

    def metric_values(self, name):
        """Every value reported for the metric `name`, in order."""
        return [r["metric"]["value"] for r in self._recorder.reports if "metric" in r and r["metric"]["name"] == name]

    def __del__(self):
        # Cleaned up here, so an unreferenced context leaves no ResourceWarning.
        tmp = getattr(self, "_tmp", None)
        if tmp is not None:
            tmp.cleanup()

    def metrics(self):
        """The metrics reported, by name (the last value of each)."""
        return {
            r["metric"]["name"]: r["metric"]["value"] for r in self._recorder.reports if "metric" in r
        }

    def output(self, name):
        """The path of an output the method wrote."""
        path = os.path.join(self.output_dir, name)
        if not os.path.isfile(path):
            raise AssertionError(f"the method did not write {name}")
        return path

    def output_json(self, name):
        with open(self.output(name), encoding="utf-8") as f:
            return json.load(f)


def close(a, b, rel=1e-9, abs_=1e-12):
    """Whether two numbers agree to a relative (or, near zero, absolute) tolerance."""
    return math.isclose(float(a), float(b), rel_tol=rel, abs_tol=abs_)
