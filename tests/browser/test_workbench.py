"""The console as a workbench: a run's metrics charted, its logged images
and output previews, the runs table's chosen columns and saved views,
compare, experiments, webhooks, tenant export and deletion, token budgets.
Each page is screenshotted and checked by axe."""

import re
import struct
import time
import zlib

import pytest
from playwright.sync_api import expect

from conftest import PROJECT, PROJECT_URL, TENANT, URL, api, serious_violations, session_of, shot, wait_run

RUNS = f"/v1/tenants/{TENANT}/projects/{PROJECT}/runs"


def png(width=4, height=3):
    """A real PNG of a flat colour (the image check reads its bytes)."""
    raw = b"".join(b"\x00" + b"\x1f\x4e\x8c" * width for _ in range(height))

    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b"")


def fit(dataset, name, x):
    status, run = api("POST", RUNS, {"method": "tabular.linear", "dataset": dataset,
                                     "params": {"y": "employed", "x": x}})
    assert status in (200, 201, 202), run
    status, named = api("PATCH", f"/v1/runs/{run['id']}", {"name": name})
    assert status == 200, named
    return run["id"]


@pytest.fixture(scope="module")
def three_fits(dataset):
    """Three finished fits with different regressors, each with a loss series logged."""
    ids = [fit(dataset, f"fit-{i}", x) for i, x in enumerate([["gnp"], ["gnp", "year"], ["population"]])]
    for i, run_id in enumerate(ids):
        wait_run(run_id)
        points = [{"name": "loss", "value": 1.0 / (step + 1 + i), "step": step} for step in range(5)]
        status, log = api("POST", f"/v1/runs/{run_id}/log", {"metrics": points, "params": {"seed": i}})
        assert status == 200, log
    return ids


def test_a_runs_metrics_are_charted_and_its_images_shown(dev, three_fits):
    run_id = three_fits[0]
    status, answer = api("PUT", f"/v1/runs/{run_id}/images/residuals.png?step=4", png(), content_type="image/png")
    assert status in (200, 201), answer
    dev.goto(f"{URL}/console/runs/{run_id}")
    chart = dev.locator("figure.chart svg").first
    expect(chart).to_have_attribute("role", "img")
    expect(chart.locator("polyline")).to_have_count(1)
    expect(dev.locator("figure.chart figcaption").first).to_contain_text("loss")
    expect(dev.locator("#live")).to_contain_text("Logged params")
    image = dev.get_by_role("img", name="Image residuals.png logged to the run")
    expect(image).to_be_visible()
    dev.wait_for_function("img => img.complete && img.naturalWidth === 4", arg=image.element_handle())
    shot(dev, "run-metrics")
    assert serious_violations(dev) == []


def test_an_outputs_preview_shows_it_in_the_page(dev, fitted):
    dev.goto(f"{URL}/console/runs/{fitted['id']}")
    dev.get_by_role("link", name="Preview model.json").click()
    expect(dev.locator("main h1")).to_have_text("Output model.json")
    expect(dev.locator("pre.preview")).to_contain_text('"coefficients"')
    shot(dev, "output-preview")


def test_the_log_is_searched_by_words_and_stream(dev, fitted):
    dev.goto(f"{URL}/console/runs/{fitted['id']}")
    total = dev.locator("#log .ln").count()
    assert total > 1
    dev.get_by_label("Search the log").fill("complete")
    dev.get_by_role("button", name="Search").click()
    expect(dev).to_have_url(re.compile(r"q=complete"))
    expect(dev.locator("#log-live")).to_contain_text(f"of {total} lines match")
    for line in dev.locator("#log .ln").all_inner_texts():
        assert "complete" in line.lower(), line


def test_chosen_columns_show_params_and_metrics_and_sort_by_a_metric(dev, three_fits):
    dev.goto(f"{PROJECT_URL}/runs?columns=state,params.x,metrics.loss&sort=metrics.loss&order=desc")
    headers = dev.locator("thead th").all_inner_texts()
    assert headers[1:] == ["Run", "State", "params.x", "metrics.loss"], headers
    # Names lead; the largest loss (fit-0's last, 0.2) first.
    expect(dev.locator("tbody tr").first.locator("td").nth(1)).to_contain_text("fit-0")
    expect(dev.locator("tbody tr").first.locator("td").nth(4)).to_have_text("0.2")


def test_a_saved_views_columns_are_the_tables(dev, three_fits):
    dev.goto(f"{PROJECT_URL}/views")
    dev.get_by_label("Name").fill("losses")
    dev.get_by_label("Columns (comma-separated)").fill("method, metrics.loss, params.seed")
    dev.get_by_label("Method").fill("tabular.linear")
    dev.get_by_role("button", name="Save the view").click()
    expect(dev.locator(".done")).to_contain_text("losses")
    shot(dev, "saved-views")
    dev.get_by_role("link", name="open it").click()
    headers = dev.locator("thead th").all_inner_texts()
    assert headers[1:] == ["Run", "Method", "metrics.loss", "params.seed"], headers
    expect(dev.get_by_label("Saved view")).to_have_value("losses")


def test_comparing_three_runs_side_by_side(dev, three_fits):
    dev.goto(f"{PROJECT_URL}/runs?method=tabular.linear")
    for run_id in three_fits:
        dev.locator(f"input[name=run][value={run_id}]").check()
    dev.get_by_role("button", name="Compare selected").click()
    expect(dev.locator("main h1")).to_have_text("Compare runs")
    expect(dev.locator("table.compare thead th")).to_have_count(4)
    # The regressors differ (marked), the method does not.
    expect(dev.locator("table.compare tr.differs").filter(has_text="params.x")).to_have_count(1)
    expect(dev.locator("table.compare tr:not(.differs)").filter(has_text="method")).to_have_count(1)
    # One chart for the loss, every run's line on it.
    expect(dev.locator("figure.chart polyline")).to_have_count(3)
    shot(dev, "compare")
    assert serious_violations(dev) == []


def test_an_experiment_is_made_and_holds_the_runs_that_join_it(dev, three_fits):
    dev.goto(f"{PROJECT_URL}/experiments")
    dev.get_by_label(re.compile("^Name")).fill("regressors")
    dev.get_by_label("Description").fill("which regressors explain employment")
    dev.get_by_role("button", name="Create the experiment").click()
    expect(dev.locator("main h1")).to_have_text("Experiment regressors")
    status, run = api("PATCH", f"/v1/runs/{three_fits[1]}", {"experiment": "regressors"})
    assert status == 200, run
    dev.reload()
    expect(dev.get_by_role("link", name="fit-1")).to_be_visible()
    shot(dev, "experiment")
    # Not deleted while a run is in it: the API's words, the page kept.
    dev.get_by_role("button", name="Delete the experiment").click()
    expect(dev.locator(".problem")).to_be_visible()
    expect(dev.get_by_role("link", name="fit-1")).to_be_visible()


def test_a_webhook_is_made_rotated_switched_and_its_deliveries_replayed(dev, dataset):
    dev.goto(f"{PROJECT_URL}/webhooks")
    dev.get_by_label("URL (https, a public address)").fill("https://hooks.example.test/mapi")
    dev.get_by_label("run.succeeded").check()
    dev.get_by_label("Description").fill("browser suite")
    dev.get_by_role("button", name="Create the webhook").click()
    first = dev.get_by_label("Secret").input_value()
    assert first.startswith("whsec_"), first
    dev.get_by_role("link", name="https://hooks.example.test/mapi").click()
    expect(dev.locator("dl.facts")).to_contain_text("run.succeeded")
    hook_path = dev.url
    dev.get_by_role("button", name="Rotate the secret").click()
    second = dev.get_by_label("Secret").input_value()
    assert second.startswith("whsec_") and second != first
    expect(dev.locator("dl.facts")).to_contain_text("Previous secret")
    # A run that succeeds is a message to it (its host does not resolve: each try fails in words).
    run_id = fit(dataset, "hooked", ["gnp"])
    wait_run(run_id)
    hook_id = hook_path.rstrip("/").rsplit("/", 1)[1]
    deadline = time.time() + 120
    while time.time() < deadline:
        status, page = api("GET", f"/v1/tenants/{TENANT}/projects/{PROJECT}/webhooks/{hook_id}/deliveries")
        if status == 200 and page["deliveries"]:
            break
        time.sleep(1)
    assert page["deliveries"], f"no delivery for {run_id} in 120 s: {page}"
    dev.goto(hook_path)
    expect(dev.locator("tbody tr").first).to_contain_text(f"runs/{run_id}")
    dev.locator("tbody tr").first.get_by_role("button", name=re.compile("^Replay")).click()
    expect(dev.locator(".done")).to_contain_text("is sent again")
    dev.get_by_role("button", name="Turn off").click()
    expect(dev.locator("dl.facts")).to_contain_text("off:")
    shot(dev, "webhook")
    assert serious_violations(dev) == []


def test_a_tenant_export_is_watched_until_its_files_can_be_downloaded(dev):
    dev.goto(f"{URL}/console/t/{TENANT}/lifecycle")
    dev.get_by_role("button", name="Export the tenant").click()
    expect(dev).to_have_url(re.compile(r"export=exp_"))
    expect(dev.locator("#export")).to_have_attribute("data-final", "", timeout=120_000)
    expect(dev.locator("#export")).to_contain_text("ready")
    expect(dev.locator("#export table a").first).to_be_visible()
    shot(dev, "tenant-export")


def test_a_tenant_is_not_deleted_without_its_id_typed(dev):
    dev.goto(f"{URL}/console/t/{TENANT}/lifecycle")
    dev.locator("summary", has_text="Delete this tenant").click()
    dev.get_by_label("Why (kept in the deletion certificate)").fill("trying the console")
    dev.get_by_label(re.compile("to confirm")).fill("not-the-tenant")
    dev.get_by_role("button", name="Delete the tenant").click()
    expect(dev.locator(".problem")).to_contain_text(f"type the tenant's id, {TENANT}")
    status, _ = api("GET", f"/v1/tenants/{TENANT}/deletion", token=session_of(dev))
    assert status == 404, "nothing was asked"
    assert serious_violations(dev) == []


def test_the_platform_audit_log_fits_the_window(operator):
    operator.set_viewport_size({"width": 1280, "height": 900})
    operator.goto(f"{URL}/console/admin/audit")
    width = operator.evaluate("document.documentElement.scrollWidth")
    assert width <= 1280, f"the audit page is {width} px wide"


def test_a_token_is_made_with_a_vcpu_budget(dev):
    dev.goto(f"{PROJECT_URL}/tokens")
    dev.get_by_label("Name").fill("budgeted")
    dev.get_by_label("runs:create").check()
    dev.get_by_label("vCPU-seconds").fill("3600")
    dev.get_by_label("Per").select_option("day")
    dev.get_by_role("button", name="Create the token").click()
    expect(dev.locator("tbody tr").filter(has_text="budgeted")).to_contain_text("3600 vCPU-s a day")


@pytest.mark.parametrize("path", [f"/console/t/{TENANT}/p/{PROJECT}/experiments",
                                  f"/console/t/{TENANT}/p/{PROJECT}/views",
                                  f"/console/t/{TENANT}/p/{PROJECT}/webhooks",
                                  f"/console/t/{TENANT}/lifecycle"])
def test_the_new_pages_fit_the_window_and_pass_axe(dev, path):
    dev.set_viewport_size({"width": 1280, "height": 900})
    dev.goto(f"{URL}{path}")
    assert serious_violations(dev) == []
    width = dev.evaluate("document.documentElement.scrollWidth")
    assert width <= 1280, f"{path} is {width} px wide"
    shot(dev, "page-" + path.strip("/").replace("/", "-"))


def test_a_workflow_runs_page_follows_it_to_its_end(dev, dataset):
    base = f"/v1/tenants/{TENANT}/projects/{PROJECT}/workflows"
    definition = {"nodes": [
        {"id": "fit", "kind": "run", "method": "tabular.linear", "dataset": dataset, "params": {"y": "employed"}},
        {"id": "stats", "kind": "run", "method": "describe", "dataset": dataset, "needs": ["fit"]},
    ]}
    status, made = api("POST", base, {"name": "browser-chain", "definition": definition})
    assert status == 201, made
    status, run = api("POST", f"{base}/browser-chain/runs", {})
    assert status in (200, 201, 202), run
    dev.goto(f"{URL}/console/workflow-runs/{run['id']}")
    live = dev.locator("#live")
    # Without a reload: both nodes succeed, and no Cancel is offered at the end.
    expect(live).to_have_attribute("data-final", "", timeout=120_000)
    expect(live.locator("p .badge").first).to_have_text("succeeded")
    expect(live.get_by_role("listitem", name="Node stats")).to_contain_text("succeeded")
    expect(live.get_by_role("button", name="Cancel the run")).to_have_count(0)
    shot(dev, "workflow-run")
