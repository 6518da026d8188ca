#!/usr/bin/env python3
"""Contract test: a client generated from the OpenAPI document can fit a model.

README
------
What it proves: the document the platform serves at GET /openapi.json is
enough, on its own, for a generated client to do the main flow. The script
downloads the live document, generates a Python client from it with
openapi-python-client (pinned in requirements.txt), imports that package and,
through its AuthenticatedClient and nothing else, asks who the token is
(tenant and project), reads the method tabular.linear, uploads
examples/longley.csv, submits a tabular.linear fit of `employed` on every other
column, polls the run until it ends and checks that it succeeded with sensible
fit statistics (R² of the Longley fit in (0.99, 1], seven coefficients whose
names are the intercept and the six predictors).

It fails when the generator skips, or drops a response of, an operation the
flow uses; when an answer does not parse with the generated models (e.g. an
enum value the document does not list); or when any check fails. The
generator's other warnings are printed: each marks a part of the document
that generated clients cannot use.

The run's `model.json` is downloaded from the `url` the run lists in
`outputs` (the platform's output route, which answers 303 to the bytes),
through the generated AuthenticatedClient's HTTP client, following the
redirect.

Run:
    python -m pip install -r tests/contract/requirements.txt
    MAPI_URL=http://127.0.0.1:18080 MAPI_TOKEN=... python tests/contract/generated_client.py
MAPI_CLIENT_DIR names a scratch directory to generate into (default: a
temporary one, removed afterwards).
"""

import importlib
import importlib.metadata
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
DATASET = HERE.parent.parent / "examples" / "longley.csv"
PACKAGE = "mapi_client"
TIMEOUT_S, POLL_S = 300, 0.5

# The operations the flow uses: (method, path) -> the generated module.
USED = {
    ("GET", "/v1/whoami"): "api.admin.whoami",
    ("GET", "/v1/methods/{name}"): "api.methods.get_method",
    ("POST", "/v1/tenants/{tenant}/projects/{project}/datasets"): "api.datasets.upload",
    ("POST", "/v1/tenants/{tenant}/projects/{project}/runs"): "api.runs.submit",
    ("GET", "/v1/runs/{id}"): "api.runs.get_run",
}


def step(message):
    print(f"ok: {message}", flush=True)


def fail(message):
    print(f"FAIL: {message}", file=sys.stderr, flush=True)
    sys.exit(1)


def pinned_generator():
    """The version requirements.txt pins; the installed one must be it."""
    pin = re.search(r"^openapi-python-client==(\S+)", (HERE / "requirements.txt").read_text(), re.M)
    installed = importlib.metadata.version("openapi-python-client")
    if installed != pin.group(1):
        fail(f"openapi-python-client {installed} is installed, requirements.txt pins {pin.group(1)}")
    return installed


def generator_warnings(output):
    """Each `WARNING ...` header the generator printed, with the reason on the next line."""
    lines = output.splitlines()
    found = []
    for i, line in enumerate(lines):
        if line.startswith("WARNING"):
            reason = next((l.strip() for l in lines[i + 1 :] if l.strip()), "")
            found.append((line.strip(), reason))
    return found


def generate(url, scratch):
    doc = scratch / "openapi.json"
    with urllib.request.urlopen(f"{url}/openapi.json", timeout=30) as answer:
        doc.write_bytes(answer.read())
    info = json.loads(doc.read_text())["info"]
    step(f"downloaded {url}/openapi.json ({info.get('title')} {info.get('version')})")

    config = scratch / "generator.json"
    config.write_text('{"post_hooks": []}')  # no ruff formatting: the code runs as generated
    command = [sys.executable, "-m", "openapi_python_client", "generate", "--path", str(doc),
               "--output-path", str(scratch / PACKAGE), "--meta", "none", "--config", str(config), "--overwrite"]
    run = subprocess.run(command, capture_output=True, text=True)
    output = run.stdout + run.stderr
    if run.returncode != 0:
        fail(f"openapi-python-client exited {run.returncode}:\n{output}")

    fatal = []
    for header, reason in generator_warnings(output):
        print(f"generator: {header} -- {reason}")
        op = re.match(r"WARNING parsing (\w+) (\S+) within", header)
        lost = "will not be generated" in header or "will be omitted" in reason
        if op and (op.group(1), op.group(2)) in USED and lost:
            fatal.append(f"{op.group(1)} {op.group(2)}: {reason}")
    if fatal:
        fail("the generator cannot produce operations the flow uses:\n  " + "\n  ".join(fatal))
    step(f"generated {PACKAGE} into {scratch}")


def load(scratch):
    sys.path.insert(0, str(scratch))
    try:
        client = importlib.import_module(PACKAGE)
        ops = {path: importlib.import_module(f"{PACKAGE}.{module}") for (_, path), module in USED.items()}
        models = importlib.import_module(f"{PACKAGE}.models")
        types = importlib.import_module(f"{PACKAGE}.types")
    except ImportError as e:
        fail(f"the generated client lacks a module the flow uses: {e}")
    step("imported the generated client")
    return client, ops, models, types


def call(what, operation, client, ok, **kwargs):
    """One operation through its generated function: a documented success, parsed by the generated models."""
    try:
        answer = operation.sync_detailed(client=client, **kwargs)
    except Exception as e:  # a parse error means the answer does not match the document
        fail(f"{what}: the generated client could not read the answer: {type(e).__name__}: {e}")
    if answer.status_code not in ok:
        fail(f"{what}: HTTP {int(answer.status_code)}: {answer.content.decode(errors='replace')[:500]}")
    return answer.parsed


def flow(url, token, scratch):
    generated, ops, models, types = load(scratch)
    api = generated.AuthenticatedClient(base_url=url, token=token)

    me = call("whoami", ops["/v1/whoami"], api, {200})
    if not isinstance(me.token, models.TokenInfo):
        fail(f"MAPI_TOKEN is not an API token (whoami says kind={me.kind!r})")
    tenant, project = me.token.tenant, me.token.project
    step(f"whoami: {me.user}, token acting in {tenant}/{project}")

    method = call("get method", ops["/v1/methods/{name}"], api, {200}, name="tabular.linear")
    params = {p.name: p for p in method.params}
    if "y" not in params or not method.produces_model:
        fail(f"tabular.linear has params {sorted(params)} and produces_model={method.produces_model}")
    step(f"method tabular.linear: params {sorted(params)}")

    with DATASET.open("rb") as csv:
        dataset = call("upload", ops["/v1/tenants/{tenant}/projects/{project}/datasets"], api, {201},
                       tenant=tenant, project=project, name="longley-contract",
                       body=types.File(payload=csv, file_name=DATASET.name, mime_type="text/csv"))
    if dataset.rows != 16 or "employed" not in dataset.numeric_columns:
        fail(f"uploaded dataset: rows={dataset.rows}, numeric columns {dataset.numeric_columns}")
    step(f"uploaded {DATASET.name}: {dataset.id}, {dataset.rows} rows, columns {dataset.columns}")

    spec = models.RunSpecInput(method="tabular.linear", dataset=dataset.id,
                               params=models.RunSpecInputParams.from_dict({"y": "employed"}))
    run = call("submit", ops["/v1/tenants/{tenant}/projects/{project}/runs"], api, {201},
               tenant=tenant, project=project, body=spec)
    step(f"submitted run {run.id}: {run.state.value}")

    ended = {models.RunState.SUCCEEDED, models.RunState.FAILED, models.RunState.PARTIAL, models.RunState.CANCELLED}
    deadline = time.monotonic() + TIMEOUT_S
    while run.state not in ended:
        if time.monotonic() > deadline:
            fail(f"run {run.id} still {run.state.value} after {TIMEOUT_S} s")
        time.sleep(POLL_S)
        run = call("get run", ops["/v1/runs/{id}"], api, {200}, id=run.id)
    if run.state != models.RunState.SUCCEEDED:
        fail(f"run {run.id} ended {run.state.value}: {run.error}")
    step(f"run {run.id} {run.state.value} (model version {run.model_version})")

    metrics = run.progress.to_dict().get("metrics", {}) if isinstance(run.progress, models.RunViewProgressType0) else {}
    r_squared = metrics.get("r_squared")
    if not isinstance(r_squared, float) or not 0.99 < r_squared <= 1:
        fail(f"run {run.id} reports r_squared={r_squared!r} (metrics {metrics}); Longley's full fit has 0.9955")
    step(f"fit statistics: r_squared={r_squared:.4f}, adj_r_squared={metrics.get('adj_r_squared')}")

    outputs = {o.name: o for o in run.outputs}
    if "model.json" not in outputs or not run.model_version:
        fail(f"run {run.id} has outputs {sorted(outputs)} and model_version={run.model_version!r}")
    download = api.get_httpx_client().get(outputs["model.json"].url, follow_redirects=True)
    if download.status_code != 200 or len(download.content) != outputs["model.json"].size:
        fail(f"model.json: HTTP {download.status_code}, {len(download.content)} bytes, listed {outputs['model.json'].size}")
    model = download.json()
    names = [c["name"] for c in model.get("coefficients", [])]
    if names != ["(intercept)"] + [c for c in dataset.columns if c != "employed"]:
        fail(f"model.json coefficients {names}")
    if abs(model.get("r_squared", -1) - r_squared) > 1e-9:
        fail(f"model.json r_squared {model.get('r_squared')} differs from the run's {r_squared}")
    step(f"model.json: {len(names)} coefficients ({', '.join(names)})")


def main():
    url, token = os.environ.get("MAPI_URL", "").rstrip("/"), os.environ.get("MAPI_TOKEN", "")
    if not url or not token:
        fail("set MAPI_URL (e.g. http://127.0.0.1:8080) and MAPI_TOKEN (an API token)")
    step(f"openapi-python-client {pinned_generator()}")
    given = os.environ.get("MAPI_CLIENT_DIR")
    with tempfile.TemporaryDirectory(prefix="mapi-contract-") as temporary:
        scratch = Path(given or temporary).resolve()
        scratch.mkdir(parents=True, exist_ok=True)
        generate(url, scratch)
        flow(url, token, scratch)
    print("PASS: a client generated from the OpenAPI document uploaded a dataset and fitted tabular.linear")


if __name__ == "__main__":
    main()
