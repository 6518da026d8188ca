"""The web console in a real browser: signing in, runs, jobs, tokens,
members, usage and the operators' pages, as people use them."""

import json
import re
import time

import pytest
from playwright.sync_api import expect

from conftest import (PROJECT, PROJECT_URL, TENANT, TOKEN, URL, api, serious_violations, session_of,
                      shot, wait_run)

# --- signing in and out ---------------------------------------------------


def test_sign_in_through_the_identity_provider_lands_on_the_projects_runs(dev):
    expect(dev).to_have_url(f"{PROJECT_URL}/runs")
    expect(dev.get_by_role("heading", level=1)).to_have_text("Runs")
    expect(dev.locator(".account")).to_contain_text("dev@dev.local")
    shot(dev, "runs")


def test_a_page_opened_signed_out_goes_to_sign_in_and_back(browser):
    context = browser.new_context()
    page = context.new_page()
    page.goto(f"{PROJECT_URL}/datasets")
    expect(page.get_by_role("heading", level=1)).to_have_text("Choose an account")
    shot(page, "sign-in")
    page.get_by_role("button", name="dev@dev.local").click()
    expect(page).to_have_url(f"{PROJECT_URL}/datasets")
    context.close()


def test_the_session_cookie_is_http_only_lax_and_short_lived(dev):
    cookie = next(c for c in dev.context.cookies() if c["name"] == "mapi_console")
    assert cookie["httpOnly"] and cookie["sameSite"] == "Lax"
    assert cookie["value"].startswith("mapis_")
    assert 0 < cookie["expires"] - time.time() <= 3600 + 5
    assert dev.evaluate("document.cookie").find("mapis_") < 0, "scripts cannot read the session"


def test_signing_out_ends_the_session_on_the_server(dev):
    secret = next(c for c in dev.context.cookies() if c["name"] == "mapi_console")["value"]
    status, _ = api("GET", "/v1/whoami", token=secret)
    assert status == 200
    dev.get_by_role("button", name="Sign out").click()
    expect(dev.get_by_role("heading", level=1)).to_have_text("Signed out")
    status, _ = api("GET", "/v1/whoami", token=secret)
    assert status == 401, "the secret no longer works anywhere"
    # A copy of the old cookie gets nowhere either.
    dev.context.add_cookies([{"name": "mapi_console", "value": secret, "url": URL}])
    dev.goto(f"{PROJECT_URL}/runs")
    expect(dev.get_by_role("heading", level=1)).to_have_text("Choose an account")


def test_an_api_token_never_signs_in_to_the_console(browser):
    context = browser.new_context()
    context.add_cookies([{"name": "mapi_console", "value": TOKEN, "url": URL}])
    page = context.new_page()
    page.goto(f"{PROJECT_URL}/runs")
    expect(page.get_by_role("heading", level=1)).to_have_text("Choose an account")
    context.close()


def test_a_form_without_the_sessions_csrf_token_changes_nothing(dev):
    before = api("GET", f"/v1/tenants/{TENANT}/projects/{PROJECT}/tokens")[1]["tokens"]  # the token's own
    answer = dev.request.post(f"{PROJECT_URL}/tokens", form={"name": "forged", "scope": "admin"})
    assert answer.status == 403
    answer = dev.request.post(f"{PROJECT_URL}/tokens", form={"name": "forged", "scope": "admin", "_csrf": "0" * 16})
    assert answer.status == 403
    after = api("GET", f"/v1/tenants/{TENANT}/projects/{PROJECT}/tokens")[1]["tokens"]
    assert len(after) == len(before)


def test_a_callback_this_browser_did_not_start_is_refused(dev):
    dev.goto(f"{URL}/console/callback?code=abc&state=forged")
    expect(dev.get_by_role("heading", level=1)).to_have_text("Sign-in failed")


# --- datasets and runs ------------------------------------------------------


def test_uploading_a_dataset_shows_its_rows_and_columns(dev):
    dev.goto(f"{PROJECT_URL}/datasets")
    dev.get_by_label("Name").fill("longley-upload")
    dev.get_by_label(re.compile("CSV file")).set_input_files("../../examples/longley.csv")
    dev.get_by_role("button", name="Upload").click()
    expect(dev.locator(".done")).to_contain_text("16 rows, 7 columns")
    expect(dev.locator("table")).to_contain_text("longley-upload")
    shot(dev, "datasets")


def test_deleting_a_dataset_from_its_list(dev):
    status, ds = api("POST", f"/v1/tenants/{TENANT}/projects/{PROJECT}/datasets?name=to-delete",
                     b"x,y\n1,2\n2,4\n", content_type="text/csv")
    assert status == 201, ds
    dev.goto(f"{PROJECT_URL}/datasets")
    dev.get_by_role("button", name=f"Delete dataset {ds['id']}").click()
    expect(dev.locator(".done")).to_contain_text(f"Dataset {ds['id']} is deleted")
    expect(dev.locator("tbody")).not_to_contain_text(ds["id"])
    assert api("GET", f"/v1/tenants/{TENANT}/projects/{PROJECT}/datasets/{ds['id']}")[0] == 404


def test_a_viewer_may_not_delete_a_dataset(viewer, dataset):
    viewer.goto(f"{PROJECT_URL}/datasets")
    viewer.get_by_role("button", name=f"Delete dataset {dataset}").click()
    expect(viewer.locator(".problem")).to_contain_text("403")
    assert api("GET", f"/v1/tenants/{TENANT}/projects/{PROJECT}/datasets/{dataset}")[0] == 200


def test_submitting_a_fit_and_watching_it_finish(dev, dataset):
    dev.goto(f"{PROJECT_URL}/runs/new")
    dev.get_by_label(re.compile(r"^Dataset")).select_option(dataset)
    dev.get_by_label(re.compile(r"^Method")).select_option("tabular.linear")
    dev.get_by_label(re.compile("Parameters")).fill('{"y": "employed"}')
    shot(dev, "new-run")
    dev.get_by_role("button", name="Submit the run").click()
    expect(dev).to_have_url(re.compile(r".*/console/runs/run_"))
    # The live section refreshes itself, whole, until the run is final and
    # charged: everything on the page agrees with the end without a reload.
    expect(dev.locator("#live h2 .badge")).to_have_text("succeeded", timeout=90_000)
    expect(dev.locator("#live")).to_have_attribute("data-final", "", timeout=60_000)
    live = dev.locator("#live")
    expect(live.get_by_role("link", name="Download model.json")).to_be_visible()
    expect(live.locator("ol.timeline li").last).to_contain_text("succeeded")
    expect(live.get_by_role("button", name="Cancel this run")).to_have_count(0)
    expect(live).not_to_contain_text("None yet.")
    expect(live).not_to_contain_text("being settled")
    # The log in words, as the CLI prints it, never the signed wire format.
    expect(dev.locator("#log")).to_contain_text("complete")
    expect(dev.locator("#log")).not_to_contain_text("mapi_event")
    expect(live.locator("table").filter(has_text="Attempt")).not_to_contain_text("Succeeded {")
    shot(dev, "run")


def test_a_run_page_shows_its_timeline_cost_and_model_version(dev, fitted):
    dev.goto(f"{URL}/console/runs/{fitted['id']}")
    expect(dev.locator("ol.timeline li")).to_have_count(len(fitted["history"]))
    expect(dev.locator("#live dl.facts")).to_contain_text("charged")
    expect(dev.locator("#live dl.facts")).to_contain_text(fitted["model_version"])
    expect(dev.locator("#live")).to_contain_text("100 %")


def test_a_runs_outputs_download_through_their_links(dev, fitted):
    dev.goto(f"{URL}/console/runs/{fitted['id']}")
    href = dev.get_by_role("link", name="Download model.json").get_attribute("href")
    # The console's route: the API counts the download, and the browser is sent to the bytes.
    assert href == f"/console/runs/{fitted['id']}/outputs/model.json", href
    answer = dev.request.get(f"{URL}{href}")
    assert answer.status == 200 and "coefficients" in answer.json()


def test_the_runs_list_filters_by_state_and_method(dev, fitted, dataset):
    status, failing = api("POST", f"/v1/tenants/{TENANT}/projects/{PROJECT}/runs",
                          {"method": "diag.fail", "dataset": dataset})
    assert status < 300, failing
    wait_run(failing["id"])
    dev.goto(f"{PROJECT_URL}/runs")
    dev.get_by_label("State").select_option("failed")
    dev.get_by_role("button", name="Filter").click()
    expect(dev.locator("tbody")).to_contain_text(failing["id"])
    expect(dev.locator("tbody")).not_to_contain_text(fitted["id"])
    dev.goto(f"{PROJECT_URL}/runs?method=tabular.linear")
    expect(dev.locator("tbody")).to_contain_text(fitted["id"])
    expect(dev.locator("tbody")).not_to_contain_text(failing["id"])


def test_the_runs_list_filters_by_creator_class_and_day(dev, fitted):
    today = fitted["created_at"][:10]
    dev.goto(f"{PROJECT_URL}/runs?created_by=dev%40dev.local&class=S&after={today}")
    expect(dev.locator("tbody")).to_contain_text(fitted["id"])
    dev.goto(f"{PROJECT_URL}/runs?created_by=nobody%40dev.local")
    expect(dev.get_by_text("No run matches")).to_be_visible()
    dev.goto(f"{PROJECT_URL}/runs?before={today}")
    expect(dev.get_by_text("No run matches")).to_be_visible()


def test_bulk_cancel_answers_one_result_per_run(dev, dataset):
    ids = []
    for _ in range(2):
        status, run = api("POST", f"/v1/tenants/{TENANT}/projects/{PROJECT}/runs",
                          {"method": "diag.sleep", "dataset": dataset, "params": {"seconds": 60}})
        assert status < 300, run
        ids.append(run["id"])
    dev.goto(f"{PROJECT_URL}/runs?method=diag.sleep")
    for run_id in ids:
        dev.get_by_label(f"Select run {run_id}").check()
    dev.get_by_role("button", name="Cancel selected").click()
    expect(dev.get_by_role("heading", level=1)).to_have_text("Cancel: one result per run")
    rows = dev.locator("tbody tr")
    expect(rows).to_have_count(2)
    for run_id in ids:
        expect(dev.locator("tbody")).to_contain_text(run_id)
    expect(dev.locator("tbody")).to_contain_text("now cancel")
    for run_id in ids:
        assert wait_run(run_id)["state"] == "cancelled"


def test_bulk_retry_submits_the_same_run_again(dev, fitted):
    dev.goto(f"{PROJECT_URL}/runs?method=tabular.linear")
    dev.get_by_label(f"Select run {fitted['id']}").check()
    dev.get_by_role("button", name="Retry selected").click()
    cell = dev.locator("td.done")
    expect(cell).to_contain_text("retried as run_")
    new_id = re.search(r"run_[0-9a-z]+", cell.inner_text()).group(0)
    run = wait_run(new_id)
    assert run["method"] == "tabular.linear" and run["params"] == fitted["params"]


def test_cancelling_a_run_from_its_page(dev, dataset):
    status, run = api("POST", f"/v1/tenants/{TENANT}/projects/{PROJECT}/runs",
                      {"method": "diag.sleep", "dataset": dataset, "params": {"seconds": 60}})
    assert status < 300, run
    dev.goto(f"{URL}/console/runs/{run['id']}")
    dev.get_by_role("button", name="Cancel this run").click()
    assert wait_run(run["id"])["state"] == "cancelled"


def test_a_bad_parameter_is_explained_and_the_form_kept(dev, dataset):
    dev.goto(f"{PROJECT_URL}/runs/new")
    dev.get_by_label(re.compile("Parameters")).fill("{not json")
    dev.get_by_role("button", name="Submit the run").click()
    expect(dev.locator(".problem")).to_contain_text("must be a JSON object")
    expect(dev.get_by_label(re.compile("Parameters"))).to_have_value("{not json")


# --- item jobs --------------------------------------------------------------


def test_a_failed_items_log_is_one_click_from_its_job(dev, failed_job):
    dev.goto(f"{URL}/console/jobs/{failed_job['id']}")
    expect(dev.locator("dl.facts")).to_contain_text("1 failed")
    dev.get_by_role("link", name="Failed", exact=True).click()
    expect(dev.locator("tbody tr")).to_have_count(1)
    shot(dev, "job")
    dev.get_by_role("link", name="Log of item 0").click()
    expect(dev.get_by_role("heading", level=1)).to_have_text(f"Log of item 0 of job {failed_job['id']}")
    expect(dev.locator("pre.log")).not_to_be_empty()
    shot(dev, "item-log")


def test_retrying_the_failed_items(dev, failed_job):
    dev.goto(f"{URL}/console/jobs/{failed_job['id']}")
    dev.get_by_role("button", name=re.compile("Retry the 1 failed")).click()
    expect(dev.locator(".done")).to_contain_text("queued again")
    deadline = time.time() + 60
    while api("GET", f"/v1/jobs/{failed_job['id']}")[1]["counts"]["failed"] != 0:
        assert time.time() < deadline, "the retried item did not succeed"
        time.sleep(0.5)


def test_submitting_an_item_job_from_the_jobs_page(dev):
    dev.goto(f"{PROJECT_URL}/jobs")
    dev.get_by_label(re.compile(r"^Method")).select_option("item.echo")
    dev.get_by_label(re.compile("Items")).fill('[{"id": 1}, {"id": 2}]')
    dev.get_by_role("button", name="Submit the job").click()
    expect(dev).to_have_url(re.compile(r".*/console/jobs/job_"))
    expect(dev.locator("dl.facts")).to_contain_text("2 —")
    dev.goto(f"{PROJECT_URL}/jobs")
    expect(dev.locator("tbody")).to_contain_text("item.echo")
    shot(dev, "jobs")


def test_a_running_jobs_counts_refresh_themselves(dev):
    status, job = api("POST", f"/v1/tenants/{TENANT}/projects/{PROJECT}/jobs",
                      {"method": "item.echo", "items": [{"id": i} for i in range(20)]})
    assert status in (200, 201, 202), job
    dev.goto(f"{URL}/console/jobs/{job['id']}")
    live = dev.locator("#live")
    expect(live).to_have_attribute("data-live", f"/console/jobs/{job['id']}/live")
    # Without a reload, the section turns final with every item counted,
    # its items listed and no action its state no longer allows.
    expect(live).to_have_attribute("data-final", "", timeout=90_000)
    expect(live).to_contain_text("20 — 20 succeeded")
    expect(live.get_by_role("button", name="Cancel the job")).to_have_count(0)
    expect(live.get_by_role("link", name="Log of item 19")).to_be_visible()


# --- models and endpoints ---------------------------------------------------

LONGLEY_ROW = {"gnp_deflator": 100, "gnp": 400000, "unemployed": 3000, "armed_forces": 2500,
               "population": 117000, "year": 1955}


def wait_endpoint(alias, status="ready", timeout=120):
    deadline = time.time() + timeout
    while time.time() < deadline:
        code, ep = api("GET", f"/v1/tenants/{TENANT}/projects/{PROJECT}/endpoints/{alias}")
        if code == 200 and ep["status"] == status:
            return ep
        time.sleep(0.5)
    raise AssertionError(f"endpoint {alias} was not {status} in {timeout} s")


def test_deploying_scoring_and_deleting_an_endpoint(dev, fitted):
    dev.goto(f"{PROJECT_URL}/models")
    dev.get_by_label(re.compile("^Alias")).fill("console-ep")
    dev.get_by_label("Model version").select_option(fitted["model_version"])
    dev.get_by_role("button", name="Deploy").click()
    expect(dev.locator(".done")).to_contain_text("Endpoint console-ep is")
    # The endpoint's status follows it to ready without a reload.
    section = dev.get_by_role("region", name="Endpoint console-ep")
    expect(section.locator(".endpoint-status")).to_have_attribute("data-final", "", timeout=120_000)
    expect(section.locator("h3 .badge")).to_have_text("ready")
    ep = wait_endpoint("console-ep")
    assert ep["model_version"] == fitted["model_version"]
    # The run that made the version says where it is served.
    dev.goto(f"{URL}/console/runs/{fitted['id']}")
    expect(dev.locator("#live dl.facts")).to_contain_text("served by console-ep")
    dev.goto(f"{PROJECT_URL}/models")
    section = dev.get_by_role("region", name="Endpoint console-ep")
    expect(section.locator("table")).to_contain_text("100 %")
    section.get_by_label(re.compile("Rows to score")).fill(json.dumps([LONGLEY_ROW]))
    section.get_by_label(re.compile("standard error")).check()
    section.get_by_role("button", name="Score").click()
    expect(dev.locator(".done")).to_contain_text("1 predictions from revision r1")
    expect(dev.locator(".done td").nth(2)).to_contain_text("±")
    shot(dev, "endpoint-scored")
    # A row missing a column is refused in the API's words, naming it.
    section = dev.get_by_role("region", name="Endpoint console-ep")
    section.get_by_label(re.compile("Rows to score")).fill('[{"gnp": 400000}]')
    section.get_by_role("button", name="Score").click()
    expect(dev.locator(".problem")).to_contain_text("gnp_deflator")
    # Deleting needs the alias typed.
    section = dev.get_by_role("region", name="Endpoint console-ep")
    section.locator("summary", has_text="Delete this endpoint").click()
    section.get_by_label(re.compile("to delete")).fill("wrong")
    section.get_by_role("button", name="Delete").click()
    expect(dev.locator(".problem")).to_contain_text("type the endpoint's alias")
    section = dev.get_by_role("region", name="Endpoint console-ep")
    section.locator("summary", has_text="Delete this endpoint").click()
    section.get_by_label(re.compile("to delete")).fill("console-ep")
    section.get_by_role("button", name="Delete").click()
    expect(dev.locator(".done")).to_contain_text("console-ep is being deleted")


def test_a_viewer_may_not_deploy_an_endpoint(viewer, fitted):
    viewer.goto(f"{PROJECT_URL}/models")
    viewer.get_by_label(re.compile("^Alias")).fill("viewer-ep")
    viewer.get_by_label("Model version").select_option(fitted["model_version"])
    viewer.get_by_role("button", name="Deploy").click()
    expect(viewer.locator(".problem")).to_contain_text("403")
    code, _ = api("GET", f"/v1/tenants/{TENANT}/projects/{PROJECT}/endpoints/viewer-ep")
    assert code == 404


# --- tokens -----------------------------------------------------------------


def test_a_new_tokens_secret_is_shown_once(dev):
    dev.goto(f"{PROJECT_URL}/tokens")
    dev.get_by_label("Name").fill("browser-ci")
    dev.get_by_label("runs:create").check()
    dev.get_by_role("button", name="Create the token").click()
    secret = dev.get_by_label("Secret").input_value()
    assert secret.startswith("mapi_")
    status, me = api("GET", "/v1/whoami", token=secret)
    assert status == 200 and me["token"]["name"] == "browser-ci"
    shot(dev, "token-created")
    dev.goto(f"{PROJECT_URL}/tokens")
    assert secret not in dev.content(), "the secret is never shown again"
    expect(dev.locator("tbody")).to_contain_text("browser-ci")


def test_revoking_a_token_stops_it_at_once(dev):
    status, created = api("POST", f"/v1/tenants/{TENANT}/projects/{PROJECT}/tokens",
                          {"name": "to-revoke", "scopes": ["models:read"]}, token=session_of(dev))
    assert status == 201, created
    dev.goto(f"{PROJECT_URL}/tokens")
    dev.get_by_role("button", name="Revoke token to-revoke").click()
    expect(dev.locator(".done")).to_contain_text("revoked")
    assert api("GET", "/v1/whoami", token=created["secret"])[0] == 401


# --- who may do what --------------------------------------------------------


def test_a_viewer_is_refused_a_run_in_words(viewer, dataset):
    viewer.goto(f"{PROJECT_URL}/runs/new")
    viewer.get_by_role("button", name="Submit the run").click()
    problem = viewer.locator(".problem")
    expect(problem).to_contain_text("You may not do this")
    expect(problem).to_contain_text("403")
    shot(viewer, "viewer-refused")


def test_a_viewer_cannot_add_a_member(viewer):
    viewer.goto(f"{URL}/console/t/{TENANT}/members")
    viewer.get_by_label("E-mail").fill("someone@dev.local")
    viewer.get_by_role("button", name="Add").click()
    expect(viewer.locator(".problem")).to_contain_text("403")
    listed = api("GET", f"/v1/tenants/{TENANT}/members", token=session_of(viewer))[1]["items"]
    assert all(m["email"] != "someone@dev.local" for m in listed)


def test_operators_pages_are_refused_to_a_tenant_admin(dev):
    for path in ("tenants", "limits", "executors", "audit"):
        answer = dev.goto(f"{URL}/console/admin/{path}")
        assert answer.status == 403, path
        expect(dev.locator(".problem").first).to_contain_text("You may not do this")


def test_a_missing_run_is_not_found(dev):
    answer = dev.goto(f"{URL}/console/runs/run_doesnotexist")
    assert answer.status == 404
    expect(dev.locator(".problem")).to_contain_text("not found")


# --- members ----------------------------------------------------------------


def test_adding_a_member_changing_their_role_and_removing_them(dev):
    email = f"newcomer-{int(time.time() * 1000)}@dev.local"
    dev.goto(f"{URL}/console/t/{TENANT}/members")
    form = dev.locator("form.stack")
    form.get_by_label("E-mail").fill(email)
    form.get_by_label("Role").select_option("editor")
    form.get_by_role("button", name="Add").click()
    expect(dev.locator(".done")).to_contain_text(f"{email} was added")
    row = dev.locator("tbody tr", has_text=email)
    expect(row).to_contain_text("invited")
    shot(dev, "members")
    row.locator("select[name=role]").select_option("runner")
    row.get_by_role("button", name=f"Save the role of {email}").click()
    expect(dev.locator(".done")).to_contain_text("role was saved")
    member = next(m for m in api("GET", f"/v1/tenants/{TENANT}/members", token=session_of(dev))[1]["items"]
                  if m["email"] == email)
    assert member["role"] == "runner"
    dev.locator("tbody tr", has_text=email).get_by_role("button", name=f"Remove {email}").click()
    expect(dev.locator(".done")).to_contain_text("was removed")
    expect(dev.locator("tbody")).not_to_contain_text(email)


# --- usage ------------------------------------------------------------------


def test_a_projects_members_page_marks_the_tenant_wide_grants(dev):
    dev.goto(f"{PROJECT_URL}/members")
    row = dev.get_by_role("row", name=re.compile(r"^dev@dev\.local "))
    expect(row).to_contain_text("organisation")
    expect(row.get_by_role("link", name="On the tenant's page")).to_be_visible()
    form = dev.locator("form.stack")
    form.get_by_label("E-mail").fill("project-only@example.com")
    form.get_by_label("Role").select_option("runner")
    form.get_by_role("button", name="Add").click()
    expect(dev.locator(".done")).to_contain_text("project-only@example.com was added")
    listed = api("GET", f"/v1/tenants/{TENANT}/projects/{PROJECT}/members", token=session_of(dev))[1]["items"]
    grant = next(m for m in listed if m["email"] == "project-only@example.com")
    assert grant["project"] == PROJECT and grant["role"] == "runner" and not grant["claimed"]
    row = dev.get_by_role("row", name=re.compile(r"^project-only@example\.com "))
    expect(row).not_to_contain_text("organisation")
    row.get_by_role("button", name="Remove project-only@example.com").click()
    expect(dev.locator(".done")).to_contain_text("removed from the project")
    shot(dev, "project-members")


def test_the_usage_chart_and_totals_match_the_api(dev, fitted):
    dev.goto(f"{PROJECT_URL}/usage")
    chart = dev.locator("svg.chart")
    expect(chart).to_be_visible()
    expect(chart.locator("rect")).not_to_have_count(0)
    _, report = api("GET", f"/v1/tenants/{TENANT}/projects/{PROJECT}/usage?group_by=day")
    micros = report["totals"]["cost_micros"]
    runs = report["totals"]["runs"]
    total_row = dev.locator("table", has=dev.locator("th", has_text="Total")).locator("tbody tr")
    expect(total_row.locator("td").nth(3)).to_have_text(str(runs))
    whole, frac = divmod(micros, 1_000_000)
    spend = f"{whole}.{frac // 10_000:02} USD" if frac % 10_000 == 0 else f"{whole}.{frac:06} USD"
    expect(total_row.locator("td").nth(1)).to_have_text(spend)
    expect(dev.locator("figcaption")).to_contain_text(spend)
    shot(dev, "usage")


def test_usage_per_token_and_class_and_the_tenant_view(dev, fitted):
    dev.goto(f"{PROJECT_URL}/usage")
    expect(dev.locator("table", has=dev.locator("th", has_text="Token"))).to_be_visible()
    expect(dev.locator("table", has=dev.locator("th", has_text="Class"))).to_contain_text("S")
    dev.goto(f"{URL}/console/t/{TENANT}/usage")
    expect(dev.get_by_role("heading", level=1)).to_have_text(f"Usage of tenant {TENANT}")
    expect(dev.locator("svg.chart")).to_be_visible()


# --- operators --------------------------------------------------------------


def test_an_operator_creates_a_tenant(operator):
    operator.goto(f"{URL}/console/admin/tenants")
    form = operator.locator("form.stack").last
    form.get_by_label(re.compile("^Id")).fill("acme")
    form.get_by_label("Name").fill("Acme Corp")
    form.get_by_label("Tier").select_option("verified")
    form.get_by_role("button", name="Create the tenant").click()
    expect(operator.locator(".done")).to_contain_text("Tenant acme was created")
    expect(operator.locator("tbody")).to_contain_text("Acme Corp")
    shot(operator, "tenants")


def test_suspending_a_tenant_needs_its_id_typed_and_a_reason(operator):
    api_status, _ = api("GET", "/v1/whoami")
    assert api_status == 200
    operator.goto(f"{URL}/console/admin/tenants")
    if operator.locator("tbody tr", has_text="globex").count() == 0:
        form = operator.locator("form.stack").last
        form.get_by_label(re.compile("^Id")).fill("globex")
        form.get_by_label("Name").fill("Globex")
        form.get_by_role("button", name="Create the tenant").click()
    row = operator.locator("tbody tr", has_text="globex")
    row.get_by_text("Edit globex").click()
    row.get_by_label("Status").select_option("suspended")
    row.get_by_label(re.compile("^Reason")).fill("unpaid invoices")
    row.get_by_role("button", name="Save globex").click()
    expect(operator.locator(".problem")).to_contain_text("type its id")
    row = operator.locator("tbody tr", has_text="globex")
    row.get_by_text("Edit globex").click()
    row.get_by_label("Status").select_option("suspended")
    row.get_by_label(re.compile("^Reason")).fill("unpaid invoices")
    row.get_by_label(re.compile("Type the tenant")).fill("globex")
    row.get_by_role("button", name="Save globex").click()
    expect(operator.locator(".done")).to_contain_text("globex saved")
    expect(operator.locator("tbody tr", has_text="globex")).to_contain_text("suspended")
    expect(operator.locator("tbody tr", has_text="globex")).to_contain_text("unpaid invoices")


def test_the_executors_page_shows_health_and_the_gate(operator):
    operator.goto(f"{URL}/console/admin/executors")
    section = operator.locator("section").first
    expect(section).to_contain_text("running")
    expect(section).to_contain_text("capabilities")
    shot(operator, "executors")


def test_quotas_and_kill_switches_for_operators(operator):
    operator.goto(f"{URL}/console/admin/limits")
    expect(operator.get_by_role("heading", name="Kill switches", exact=True)).to_be_visible()
    expect(operator.get_by_text("Tenant dev (internal)")).to_be_visible()
    shot(operator, "limits")


def test_the_platform_audit_log_filters_by_action(operator):
    operator.goto(f"{URL}/console/admin/audit?action=auth.console_sign_in")
    rows = operator.locator("tbody tr")
    expect(rows.first).to_contain_text("auth.console_sign_in")
    assert all("auth.console_sign_in" in t for t in rows.all_inner_texts())
    shot(operator, "audit")


def test_a_tenants_audit_log_for_its_admin(dev):
    dev.goto(f"{URL}/console/t/{TENANT}/audit")
    expect(dev.get_by_role("heading", level=1)).to_have_text("Audit log")
    expect(dev.locator("table, p")).not_to_have_count(0)


# --- reading without JavaScript, keyboard, accessibility ------------------


READ_PAGES = [
    "/console/t/dev/p/default/runs",
    "/console/t/dev/p/default/runs/new",
    "/console/t/dev/p/default/datasets",
    "/console/t/dev/p/default/jobs",
    "/console/t/dev/p/default/models",
    "/console/t/dev/p/default/usage",
    "/console/t/dev/p/default/tokens",
    "/console/t/dev/members",
    "/console/t/dev/p/default/members",
    "/console/t/dev/usage",
    "/console/t/dev/audit",
]

OPERATOR_PAGES = ["/console/admin/tenants", "/console/admin/limits", "/console/admin/executors",
                  "/console/admin/audit"]


def test_read_pages_work_with_javascript_off(as_user, fitted):
    page = as_user("dev@dev.local", javascript=False)
    for path in READ_PAGES + [f"/console/runs/{fitted['id']}"]:
        answer = page.goto(f"{URL}{path}")
        assert answer.status == 200, path
        expect(page.locator("main h1")).not_to_be_empty()
    expect(page.locator("#live")).to_contain_text("succeeded")


def test_the_skip_link_is_the_first_stop_and_moves_focus_to_the_content(dev):
    dev.keyboard.press("Tab")
    focused = dev.evaluate("document.activeElement.textContent")
    assert focused == "Skip to the content"
    dev.keyboard.press("Enter")
    assert dev.evaluate("document.activeElement.id") == "main"


@pytest.mark.parametrize("path", READ_PAGES)
def test_no_serious_accessibility_violation(dev, fitted, failed_job, path):
    dev.goto(f"{URL}{path}")
    assert serious_violations(dev) == []


def test_no_serious_accessibility_violation_on_run_job_and_log_pages(dev, fitted, failed_job):
    for path in (f"/console/runs/{fitted['id']}", f"/console/jobs/{failed_job['id']}",
                 f"/console/jobs/{failed_job['id']}/items/0/log", "/console/nope"):
        dev.goto(f"{URL}{path}")
        assert serious_violations(dev) == [], path


@pytest.mark.parametrize("path", OPERATOR_PAGES)
def test_no_serious_accessibility_violation_for_operators(operator, path):
    operator.goto(f"{URL}{path}")
    assert serious_violations(operator) == []


def test_no_serious_accessibility_violation_signing_in(browser):
    context = browser.new_context()
    page = context.new_page()
    page.goto(f"{URL}/console/sign-in")
    assert serious_violations(page) == []
    context.close()


def test_every_page_has_a_screenshot(dev, fitted, failed_job):
    for path in READ_PAGES:
        dev.goto(f"{URL}{path}")
        shot(dev, "page-" + path.strip("/").replace("/", "-"))
