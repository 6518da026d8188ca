"""Runs one plugin method inside an execution: imports the entry point the
manifest names from the unpacked plugin and calls it with a `mapi.Context`.

The supervisor starts it with the plugin directory as the working
directory and these variables: MAPI_ENTRY (`module:function`),
MAPI_PARAMS (a JSON file), MAPI_DATASET, MAPI_OUTPUT_DIR, MAPI_OUTPUTS
(the declared output names, comma separated), MAPI_CONTROL_FD, and
MAPI_TASK_INDEX and MAPI_TASK_COUNT when the run has several tasks,
MAPI_CHECKPOINT (where `ctx.checkpoint` keeps the checkpoint) and
MAPI_RESUME (the checkpoint an earlier attempt saved, when there is one).
An exception becomes an error report and exit status 1; a return is exit
0. A method that stops when asked (`mapi.Stopped`) exits 16 when it saved
a checkpoint, else 143.
"""

import importlib
import json
import os
import signal
import sys
import traceback


#: Exit statuses of a method that stopped when asked, with and without a checkpoint saved.
STOPPED_WITH_CHECKPOINT = 16
STOPPED = 143


def main():
    control = os.fdopen(int(os.environ["MAPI_CONTROL_FD"]), "w", encoding="utf-8")
    here = os.path.dirname(os.path.abspath(__file__))
    # The platform's helper first: a plugin cannot shadow `mapi`.
    sys.path[:0] = [here, os.getcwd()]
    import mapi

    try:
        with open(os.environ["MAPI_PARAMS"], encoding="utf-8") as f:
            params = json.load(f)
        outputs = [n for n in os.environ.get("MAPI_OUTPUTS", "").split(",") if n]
        tasks = (int(os.environ.get("MAPI_TASK_INDEX", "0")), int(os.environ.get("MAPI_TASK_COUNT", "1")))
        ctx = mapi.Context(
            control,
            params,
            os.environ["MAPI_DATASET"],
            os.environ["MAPI_OUTPUT_DIR"],
            outputs,
            *tasks,
            checkpoint_path=os.environ.get("MAPI_CHECKPOINT") or None,
            resume_path=os.environ.get("MAPI_RESUME") or None,
        )
        signal.signal(signal.SIGTERM, lambda _sig, _frame: ctx._on_stop())
        module, _, function = os.environ["MAPI_ENTRY"].partition(":")
        entry = getattr(importlib.import_module(module), function)
        entry(ctx)
    except mapi.Stopped:
        return STOPPED_WITH_CHECKPOINT if ctx._checkpoints else STOPPED
    except Exception as e:  # noqa: BLE001 - every failure of the plugin is reported as its error
        traceback.print_exc()
        message = f"{type(e).__name__}: {e}"
        control.write(json.dumps({"error": {"message": message[:2000]}}) + "\n")
        control.flush()
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
