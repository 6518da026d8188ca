"""Scores a mapi endpoint with Triton's stock HTTP client, unchanged.

The Open Inference Protocol v2 under the project's path, with tensors as
JSON and in the binary tensor data extension (the client's default), and a
refusal read the way the client reads one. Environment: MAPI_URL,
MAPI_TOKEN, MAPI_BASE (the project's path), MAPI_ALIAS, MAPI_ROWS (a JSON
list of rows), MAPI_WANT (the values the platform's own route answered for
them). Prints `PASS:` when every check held.
"""

import json
import os

import numpy as np
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

url = os.environ["MAPI_URL"].removeprefix("http://") + os.environ["MAPI_BASE"]
alias = os.environ["MAPI_ALIAS"]
rows = json.loads(os.environ["MAPI_ROWS"])
want = np.array(json.loads(os.environ["MAPI_WANT"]), dtype=np.float64)
TOKEN = os.environ["MAPI_TOKEN"]


def auth():
    # A fresh dict per call: the client writes Inference-Header-Content-Length
    # into the headers it is given, so one reused would carry it to the next call.
    return {"Authorization": "Bearer " + TOKEN}


client = httpclient.InferenceServerClient(url=url, verbose=os.environ.get("MAPI_VERBOSE") == "1")
assert client.is_server_live(headers=auth()), "server not live"
assert client.is_server_ready(headers=auth()), "server not ready"
assert client.is_model_ready(alias, headers=auth()), "model not ready"
meta = client.get_model_metadata(alias, headers=auth())
names = [i["name"] for i in meta["inputs"]]
assert meta["name"] == alias and len(names) == len(rows[0]), meta


def inputs(binary):
    out = []
    for name in names:
        column = np.array([[row[name]] for row in rows], dtype=np.float64)
        tensor = httpclient.InferInput(name, list(column.shape), "FP64")
        tensor.set_data_from_numpy(column, binary_data=binary)
        out.append(tensor)
    return out


for binary in (True, False):
    outputs = [
        httpclient.InferRequestedOutput("value", binary_data=binary),
        httpclient.InferRequestedOutput("std_error", binary_data=binary),
    ]
    result = client.infer(alias, inputs(binary), outputs=outputs, request_id="q1", headers=auth())
    np.testing.assert_allclose(result.as_numpy("value"), want, rtol=1e-12)
    errors = result.as_numpy("std_error")
    assert errors.shape == want.shape and (errors > 0).all(), errors
    assert result.get_response()["id"] == "q1", result.get_response()

# No outputs named: the client asks for every output in binary; `value` comes.
result = client.infer(alias, inputs(True), headers=auth())
np.testing.assert_allclose(result.as_numpy("value"), want, rtol=1e-12)

# A refusal reaches the caller as the client reports errors: status and message.
try:
    client.infer(alias, inputs(True), headers={"Authorization": "Bearer mapi_nope"})
    raise AssertionError("a wrong token was accepted")
except InferenceServerException as e:
    assert e.status() == "401" and "token" in e.message().lower(), (e.status(), e.message())
try:
    client.infer("nothere", inputs(False), headers=auth())
    raise AssertionError("an unknown model answered")
except InferenceServerException as e:
    assert e.status() == "404" and "nothere" in e.message(), (e.status(), e.message())

print("PASS: Triton's client scored", len(rows), "rows as JSON and binary tensors")
