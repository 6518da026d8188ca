"""Scores a mapi endpoint that runs a tenant's own v2 model server with
Triton's stock HTTP client, unchanged: the platform passes each request to
the container and its answer back. JSON tensors (the toy server reads no
binary ones). Environment: MAPI_URL, MAPI_TOKEN, MAPI_BASE (the project's
path), MAPI_ALIAS. Prints `PASS:` when every check held.
"""

import os

import numpy as np
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

url = os.environ["MAPI_URL"].removeprefix("http://") + os.environ["MAPI_BASE"]
alias = os.environ["MAPI_ALIAS"]
TOKEN = os.environ["MAPI_TOKEN"]


def auth():
    # A fresh dict per call: the client writes into the headers it is given.
    return {"Authorization": "Bearer " + TOKEN}


client = httpclient.InferenceServerClient(url=url)
assert client.is_model_ready(alias, headers=auth()), "model not ready"
meta = client.get_model_metadata(alias, headers=auth())
# The container's own metadata, passed through.
assert meta["platform"] == "toy" and meta["inputs"][0]["name"] == "x", meta

x = np.array([[1.0, 2.0], [3.0, 4.0], [0.5, 0.25]], dtype=np.float64)
tensor = httpclient.InferInput("x", list(x.shape), "FP64")
tensor.set_data_from_numpy(x, binary_data=False)
outputs = [httpclient.InferRequestedOutput("sum", binary_data=False)]
result = client.infer(alias, [tensor], outputs=outputs, request_id="t1", headers=auth())
np.testing.assert_allclose(result.as_numpy("sum"), x.sum(axis=1), rtol=1e-12)
assert result.get_response()["id"] == "t1", result.get_response()

try:
    client.infer(alias, [tensor], outputs=outputs, headers={"Authorization": "Bearer mapi_nope"})
    raise AssertionError("a wrong token was accepted")
except InferenceServerException as e:
    assert e.status() == "401", (e.status(), e.message())

print("PASS: Triton's client scored the container through the platform")
