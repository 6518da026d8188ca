"""Serves one plugin model for an endpoint's model server, inside a sandbox.

The server starts it with the plugin's unpacked package in MAPI_PLUGIN_DIR,
the model file at MAPI_MODEL and the `module:function` to call in
MAPI_PREDICT. It speaks one JSON object per line: it writes {"ready": true}
once the model is loaded (or {"error": "..."} and exits 1), then answers
each {"rows": [...]} read from stdin with {"predictions": [...]},
{"invalid": "..."} (the rows are wrong: ValueError, KeyError, TypeError) or
{"failed": "..."} (the model failed). End of input ends it.

What the plugin prints goes to stderr: stdout carries the answers alone.
"""

import importlib
import json
import os
import sys
import traceback


def _out():
    """The answers' channel: the original stdout; fd 1 becomes stderr."""
    channel = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return channel


def _message(e):
    return f"{type(e).__name__}: {e}"[:2000]


def _load():
    path = os.environ["MAPI_MODEL"]
    if path.endswith(".json"):
        with open(path, encoding="utf-8") as f:
            model = json.load(f)
    else:
        model = path
    module, _, function = os.environ["MAPI_PREDICT"].partition(":")
    return model, getattr(importlib.import_module(module), function)


def _answer(model, predict, line):
    try:
        rows = json.loads(line)["rows"]
    except (ValueError, KeyError, TypeError) as e:
        return {"failed": f"the server sent an unreadable request: {_message(e)}"}
    try:
        values = predict(model, rows)
    except (ValueError, KeyError, TypeError) as e:
        return {"invalid": _message(e)}
    except Exception as e:  # noqa: BLE001 - any other failure is the model's
        traceback.print_exc()
        return {"failed": _message(e)}
    if hasattr(values, "tolist"):
        values = values.tolist()
    try:
        values = [v.item() if hasattr(v, "item") else v for v in values]
        json.dumps(values, allow_nan=False)
    except (ValueError, TypeError) as e:
        return {"failed": f"predict returned values that are not finite JSON: {_message(e)}"}
    return {"predictions": values}


def main():
    channel = _out()

    def send(answer):
        channel.write(json.dumps(answer) + "\n")
        channel.flush()

    os.chdir(os.environ["MAPI_PLUGIN_DIR"])
    sys.path[:0] = [os.getcwd()]
    try:
        model, predict = _load()
    except Exception as e:  # noqa: BLE001 - a model that does not load is refused with why
        traceback.print_exc()
        send({"error": _message(e)})
        return 1
    send({"ready": True})
    for line in sys.stdin:
        send(_answer(model, predict, line))
    return 0


if __name__ == "__main__":
    sys.exit(main())
