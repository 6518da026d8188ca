"""The browser suite's fixtures: a platform started by the Rust harness
(tests/tests/browser.rs), Debian's chromium driven by Playwright, sign-in
through the console's real OIDC flow, the API for setting things up, axe-core
for accessibility, and a screenshot of every page a test looks at.

Environment (set by the harness): MAPI_URL, MAPI_TOKEN (the dev tenant's
admin token), MAPI_CHROMIUM, MAPI_AXE (axe.min.js), MAPI_SCREENSHOTS.
"""

import json
import os
import re
import time
import urllib.request

import pytest
from playwright.sync_api import expect, sync_playwright

# The suite runs beside the other suites on a small machine: generous waits.
expect.set_options(timeout=20_000)

URL = os.environ["MAPI_URL"].rstrip("/")
TOKEN = os.environ["MAPI_TOKEN"]
TENANT, PROJECT = "dev", "default"
PROJECT_URL = f"{URL}/console/t/{TENANT}/p/{PROJECT}"
SHOTS = os.environ.get("MAPI_SCREENSHOTS", "")
AXE = os.environ["MAPI_AXE"]
LONGLEY = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "longley.csv")
CHROMIUM_FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]


def api(method, path, body=None, token=TOKEN, content_type="application/json"):
    """Calls the platform's API; returns (status, parsed JSON or text)."""
    data = None
    if body is not None:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
    req = urllib.request.Request(f"{URL}{path}", data=data, method=method)
    req.add_header("Authorization", f"Bearer {token}")
    if data is not None:
        req.add_header("Content-Type", content_type)
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            text = r.read().decode()
            status = r.status
    except urllib.error.HTTPError as e:
        text, status = e.read().decode(), e.code
    try:
        return status, json.loads(text)
    except ValueError:
        return status, text


# Generous: the browser suite runs beside the other suites, and a loaded
# 2-core machine has been seen to leave a failing run unfinished for 120 s.
def wait_run(run_id, timeout=300):
    deadline = time.time() + timeout
    while time.time() < deadline:
        _, run = api("GET", f"/v1/runs/{run_id}")
        if run["state"] in ("succeeded", "failed", "cancelled", "partial"):
            return run
        time.sleep(0.5)
    raise AssertionError(f"run {run_id} did not finish in {timeout} s: {run}")


def wait_job(job_id, timeout=300):
    deadline = time.time() + timeout
    while time.time() < deadline:
        _, job = api("GET", f"/v1/jobs/{job_id}")
        if job["state"] in ("succeeded", "failed", "completed_with_errors"):
            return job
        time.sleep(0.5)
    raise AssertionError(f"job {job_id} did not finish in {timeout} s: {job}")


@pytest.fixture(scope="session")
def browser():
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=os.environ["MAPI_CHROMIUM"], args=CHROMIUM_FLAGS)
        yield b
        b.close()


def sign_in(context, email):
    page = context.new_page()
    page.goto(f"{URL}/console/sign-in")
    page.get_by_role("button", name=email).click()
    page.wait_for_url(re.compile(r".*/console.*"))
    return page


@pytest.fixture
def as_user(browser):
    """Signs in a fresh browser context as an account: `as_user("dev@dev.local")`."""
    contexts = []

    def open_as(email, javascript=True):
        context = browser.new_context(java_script_enabled=javascript)
        contexts.append(context)
        return sign_in(context, email)

    yield open_as
    for c in contexts:
        c.close()


@pytest.fixture
def dev(as_user):
    return as_user("dev@dev.local")


@pytest.fixture
def operator(as_user):
    return as_user("admin@dev.local")


@pytest.fixture
def viewer(as_user):
    return as_user("viewer@dev.local")


def session_of(page):
    """The console session's secret of a signed-in page: the person's bearer,
    for setting things up through the API where a token may not act."""
    return next(c for c in page.context.cookies() if c["name"].endswith("mapi_console"))["value"]


def shot(page, name):
    if SHOTS:
        os.makedirs(SHOTS, exist_ok=True)
        page.screenshot(path=os.path.join(SHOTS, f"{name}.png"), full_page=True)


def serious_violations(page):
    """axe-core's serious and critical violations on the page."""
    # Evaluated through the DevTools protocol, which the page's
    # Content-Security-Policy (no inline scripts) does not govern.
    with open(AXE, encoding="utf-8") as f:
        page.evaluate(f.read())
    result = page.evaluate("async () => await axe.run(document, {resultTypes: ['violations']})")
    return [
        {"id": v["id"], "impact": v["impact"], "nodes": [n["target"] for n in v["nodes"]][:5]}
        for v in result["violations"]
        if v["impact"] in ("serious", "critical")
    ]


@pytest.fixture(scope="session")
def dataset():
    with open(LONGLEY, "rb") as f:
        status, ds = api("POST", f"/v1/tenants/{TENANT}/projects/{PROJECT}/datasets?name=longley",
                         f.read(), content_type="text/csv")
    assert status == 201, ds
    return ds["id"]


@pytest.fixture(scope="session")
def fitted(dataset):
    """A succeeded linear fit, submitted through the API."""
    status, run = api("POST", f"/v1/tenants/{TENANT}/projects/{PROJECT}/runs",
                      {"method": "tabular.linear", "dataset": dataset, "params": {"y": "employed"}})
    assert status in (200, 201, 202), run
    return wait_run(run["id"])


@pytest.fixture(scope="session")
def failed_job():
    """An item job whose item 0 fails in its first round."""
    status, job = api("POST", f"/v1/tenants/{TENANT}/projects/{PROJECT}/jobs",
                      {"method": "diag.item", "items": [{"fail_rounds": 1}, {}, {}]})
    assert status in (200, 201, 202), job
    return wait_job(job["id"])
