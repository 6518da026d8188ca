//! The permission matrix and the scope table, through the HTTP API: every
//! (resource, action) × every role × project or tenant-wide grant (and the
//! reviewer capability) × own tenant or a foreign one, plus operators and
//! strangers; then every scope of the scope table on a token. Expectations
//! come from the hand-typed copies of the two tables in
//! `tests/fixtures/`, never from the code's data. Then a few real routes
//! show that they enforce the same decisions.

use mapi_access::{PERMISSIONS, Rule};
use mapi_tests::TestPlatform;
use reqwest::Method;
use serde_json::{Value, json};

const ROLES: [&str; 4] = ["viewer", "editor", "runner", "admin"];

struct SeedRow {
    resource: String,
    action: String,
    cells: [String; 4],
    operator: String,
}

fn seed_matrix() -> Vec<SeedRow> {
    include_str!("../fixtures/seed_permissions.txt")
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            SeedRow {
                resource: f[0].into(),
                action: f[1].into(),
                cells: [f[2].into(), f[3].into(), f[4].into(), f[5].into()],
                operator: f[6].into(),
            }
        })
        .collect()
}

fn seed_scopes() -> Vec<(String, String, Vec<String>)> {
    include_str!("../fixtures/seed_scopes.txt")
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f[0].into(), f[1].into(), f[3..].iter().map(|s| (*s).to_owned()).collect())
        })
        .collect()
}

/// Tenant-level rows are checked at the tenant; the rest in a project.
fn tenant_level(row: &SeedRow) -> bool {
    row.cells.iter().any(|c| c == "tw") || (row.cells.iter().all(|c| c == "-") && row.operator == "y")
}

struct User {
    email: String,
    role: &'static str,
    tenant_wide: bool,
    reviewer: bool,
}

fn users() -> Vec<User> {
    let mut out = Vec::new();
    for role in ROLES {
        for tenant_wide in [false, true] {
            for reviewer in [false, true] {
                if reviewer && role == "viewer" {
                    continue;
                }
                let email = format!(
                    "{role}-{}{}@test.local",
                    if tenant_wide { "t" } else { "p" },
                    if reviewer { "-r" } else { "" }
                );
                out.push(User { email, role, tenant_wide, reviewer });
            }
        }
    }
    out
}

async fn platform() -> (TestPlatform, Vec<(User, String)>, String, String) {
    let mut accounts: Vec<String> = users().into_iter().map(|u| u.email).collect();
    accounts.extend(["admin@dev.local", "stranger@test.local", "owner@away.test"].map(String::from));
    let accounts = accounts.join(",");
    let p = TestPlatform::start(&[("MAPI_DEV_ACCOUNTS", &accounts)]).await;
    let operator = p.login("admin@dev.local").await;
    // Two tenants, each with a project `main`, created by an operator and their admins.
    for (tenant, admin) in [("home", "admin-t@test.local"), ("away", "owner@away.test")] {
        let body = json!({"id": tenant, "name": tenant, "tier": "internal", "residency": "eu", "admin_email": admin});
        let (s, b) = p.call(&operator, Method::POST, "/v1/admin/tenants", Some(body)).await;
        assert_eq!(s, 201, "{b}");
        let owner = p.login(admin).await;
        let (s, b) = p
            .call(
                &owner,
                Method::POST,
                &format!("/v1/tenants/{tenant}/projects"),
                Some(json!({"id": "main", "name": "Main"})),
            )
            .await;
        assert_eq!(s, 201, "{b}");
    }
    let home_admin = p.login("admin-t@test.local").await;
    let mut signed_in = Vec::new();
    for u in users() {
        if u.email != "admin-t@test.local" {
            let path = if u.tenant_wide {
                "/v1/tenants/home/members".to_owned()
            } else {
                "/v1/tenants/home/projects/main/members".to_owned()
            };
            let body = json!({"email": u.email, "role": u.role, "reviewer": u.reviewer});
            let (s, b) = p.call(&home_admin, Method::POST, &path, Some(body)).await;
            assert_eq!(s, 201, "{} {b}", u.email);
        }
        let token = p.login(&u.email).await;
        signed_in.push((u, token));
    }
    let stranger = p.login("stranger@test.local").await;
    (p, signed_in, operator, stranger)
}

/// `Some(allowed)` when the check was answered; `None` for NOT_FOUND.
async fn ask(
    p: &TestPlatform,
    token: &str,
    tenant: &str,
    row_resource: &str,
    row_action: &str,
    at_tenant: bool,
) -> Option<bool> {
    let path = if at_tenant {
        format!("/v1/tenants/{tenant}/access-checks")
    } else {
        format!("/v1/tenants/{tenant}/projects/main/access-checks")
    };
    let (s, b) = p
        .call(token, Method::POST, &path, Some(json!({"resource": row_resource, "action": row_action})))
        .await;
    match s {
        200 => Some(b["allowed"].as_bool().expect("allowed")),
        404 => None,
        other => panic!("unexpected {other} for {row_resource} {row_action}: {b}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_cell_of_the_matrix_through_http() {
    let (p, users, operator, stranger) = platform().await;
    let rows = seed_matrix();
    assert_eq!(rows.len(), PERMISSIONS.len());
    let mut cases = 0;
    for row in &rows {
        let at_tenant = tenant_level(row);
        for (u, token) in &users {
            let i = ROLES.iter().position(|r| *r == u.role).expect("role");
            let want = match row.cells[i].as_str() {
                "y" => true,
                "tw" => u.tenant_wide,
                "rev" => u.reviewer,
                _ => false,
            };
            let got = ask(&p, token, "home", &row.resource, &row.action, at_tenant).await;
            assert_eq!(got, Some(want), "{} {} as {}", row.resource, row.action, u.email);
            // A foreign tenant is invisible to every member of this one.
            let away = ask(&p, token, "away", &row.resource, &row.action, at_tenant).await;
            assert_eq!(away, None, "{} {} as {} in a foreign tenant", row.resource, row.action, u.email);
            cases += 2;
        }
        for tenant in ["home", "away"] {
            let op = ask(&p, &operator, tenant, &row.resource, &row.action, at_tenant).await;
            let want_op = row.operator == "y";
            // Operators see every tenant only where the operator column lets them act.
            assert_eq!(
                op.unwrap_or(false),
                want_op,
                "{} {} as operator in {tenant}",
                row.resource,
                row.action
            );
            assert_eq!(
                ask(&p, &stranger, tenant, &row.resource, &row.action, at_tenant).await,
                None,
                "stranger"
            );
            cases += 2;
        }
    }
    eprintln!("authorization matrix: {cases} cases over HTTP");
    assert_eq!(cases, rows.len() * (users.len() * 2 + 4));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_scope_of_the_scope_table_through_http() {
    let (p, users, _, _) = platform().await;
    let admin = &users.iter().find(|(u, _)| u.email == "admin-t@test.local").expect("admin").1;
    let table = seed_scopes();
    let mut scopes: Vec<String> = table.iter().flat_map(|(_, _, s)| s.clone()).collect();
    scopes.sort();
    scopes.dedup();
    assert_eq!(scopes.len(), 12, "the scope table's twelve columns");
    scopes.push("admin".into());
    let rows = seed_matrix();
    let mut cases = 0;
    for scope in &scopes {
        let (s, b) = p
            .call(
                admin,
                Method::POST,
                "/v1/tenants/home/projects/main/tokens",
                Some(json!({"name": scope, "scopes": [scope]})),
            )
            .await;
        assert_eq!(s, 201, "{b}");
        let secret = b["secret"].as_str().expect("secret").to_owned();
        for row in &rows {
            let at_tenant = tenant_level(row);
            // The owner (a tenant-wide admin) may do the row as a person when
            // the admin cell allows it; a token never does tenant-level,
            // operator, internal or session-only actions.
            let sessions_only = PERMISSIONS
                .iter()
                .find(|r: &&Rule| r.resource.as_str() == row.resource && r.action.as_str() == row.action)
                .is_some_and(|r| r.sessions_only);
            let role_ok = row.cells[3] == "y" && !at_tenant && !sessions_only;
            let in_table =
                table.iter().any(|(r, a, s)| r == &row.resource && a == &row.action && s.contains(scope));
            let want = role_ok && (scope == "admin" || in_table);
            let got = ask(&p, &secret, "home", &row.resource, &row.action, at_tenant).await;
            assert_eq!(got, Some(want), "{} {} with scope {scope}", row.resource, row.action);
            cases += 1;
        }
    }
    eprintln!("scope table: {cases} cases over HTTP");
    assert_eq!(cases, rows.len() * 13);
}

/// The method catalog's routes answer as the scope table's `catalog read`
/// row says: a token of a scope in the row (or `admin`) reads it, any
/// other is refused; every signed-in person reads it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_method_catalog_follows_the_catalog_read_row_of_the_scope_table() {
    let (p, users, _, _) = platform().await;
    let admin = &users.iter().find(|(u, _)| u.email == "admin-t@test.local").expect("admin").1;
    let table = seed_scopes();
    let row = table.iter().find(|(r, a, _)| r == "catalog" && a == "read").expect("the catalog read row");
    let mut scopes: Vec<String> = table.iter().flat_map(|(_, _, s)| s.clone()).collect();
    scopes.sort();
    scopes.dedup();
    scopes.extend(["admin".to_owned(), "score:some-alias".to_owned()]);
    for scope in &scopes {
        let body = json!({"name": scope.replace(':', "-"), "scopes": [scope]});
        let (s, b) = p.call(admin, Method::POST, "/v1/tenants/home/projects/main/tokens", Some(body)).await;
        assert_eq!(s, 201, "{b}");
        let secret = b["secret"].as_str().expect("secret").to_owned();
        let allowed = scope == "admin" || row.2.contains(scope) || scope.starts_with("score:");
        for path in ["/v1/methods", "/v1/methods/describe"] {
            let (s, b) = p.call(&secret, Method::GET, path, None).await;
            let want = if allowed { 200 } else { 403 };
            assert_eq!(s, want, "{path} with a {scope} token: {b}");
            if !allowed {
                assert!(
                    b["detail"].as_str().is_some_and(|d| d.contains("models:read")),
                    "says which scopes: {b}"
                );
            }
        }
    }
    for (user, session) in &users {
        assert_eq!(p.call(session, Method::GET, "/v1/methods", None).await.0, 200, "{}", user.email);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_routes_enforce_the_same_decisions() {
    let (p, users, operator, _) = platform().await;
    let token = |email: &str| users.iter().find(|(u, _)| u.email == email).expect("user").1.clone();
    let csv = "x,y\n1,2\n2,4\n3,7\n";
    let upload = |t: String| {
        let p = &p;
        async move {
            let resp = p
                .http
                .post(p.url("/v1/tenants/home/projects/main/datasets"))
                .bearer_auth(t)
                .header("content-type", "text/csv")
                .body(csv)
                .send()
                .await
                .expect("upload");
            let status = resp.status().as_u16();
            (status, resp.json::<Value>().await.unwrap_or(Value::Null))
        }
    };
    assert_eq!(upload(token("viewer-p@test.local")).await.0, 403, "viewers do not create datasets");
    let (s, ds) = upload(token("editor-p@test.local")).await;
    assert_eq!(s, 201);
    let run = json!({"method": "describe", "dataset": ds["id"]});
    let runs = "/v1/tenants/home/projects/main/runs";
    assert_eq!(
        p.call(&token("editor-p@test.local"), Method::POST, runs, Some(run.clone())).await.0,
        403,
        "editors do not run"
    );
    let (s, created) = p.call(&token("runner-p@test.local"), Method::POST, runs, Some(run)).await;
    assert_eq!(s, 201, "{created}");
    let id = created["id"].as_str().expect("id");
    assert_eq!(
        p.call(&token("viewer-p@test.local"), Method::GET, &format!("/v1/runs/{id}"), None).await.0,
        200
    );
    assert_eq!(
        p.call(&token("viewer-p@test.local"), Method::POST, &format!("/v1/runs/{id}/cancel"), None).await.0,
        403
    );
    let (s, _) = p.call(&operator, Method::GET, &format!("/v1/runs/{id}"), None).await;
    assert_eq!(s, 200, "operators read runs");
    let (s, _) = p.call(&operator, Method::GET, "/v1/tenants/home/projects/main/datasets", None).await;
    assert_eq!(s, 404, "operators never read tenant content");
    // Deleting a dataset is the project admin's: not an editor's, a runner's or an operator's.
    let (s, spare) = upload(token("editor-p@test.local")).await;
    assert_eq!(s, 201);
    let spare = format!("/v1/tenants/home/projects/main/datasets/{}", spare["id"].as_str().expect("id"));
    for who in ["editor-p@test.local", "runner-p@test.local", "viewer-p@test.local"] {
        assert_eq!(
            p.call(&token(who), Method::DELETE, &spare, None).await.0,
            403,
            "{who} deletes no dataset"
        );
    }
    assert_eq!(
        p.call(&operator, Method::DELETE, &spare, None).await.0,
        404,
        "operators never touch tenant content"
    );
    assert_eq!(p.call(&token("admin-p@test.local"), Method::DELETE, &spare, None).await.0, 204);
    assert_eq!(
        p.call(&token("admin-p@test.local"), Method::GET, "/v1/tenants/home/audit", None).await.0,
        403,
        "audit is tenant-wide"
    );
    assert_eq!(
        p.call(&token("admin-t@test.local"), Method::GET, "/v1/tenants/home/audit", None).await.0,
        200
    );
    // Webhooks are the project admin's, reading them too; operators never see them.
    let hooks = "/v1/tenants/home/projects/main/webhooks";
    let hook = json!({"url": "https://hooks.example.com/mapi", "events": ["run.succeeded"]});
    for who in ["viewer-p@test.local", "editor-p@test.local", "runner-p@test.local"] {
        assert_eq!(p.call(&token(who), Method::GET, hooks, None).await.0, 403, "{who} reads no webhooks");
        let (s, _) = p.call(&token(who), Method::POST, hooks, Some(hook.clone())).await;
        assert_eq!(s, 403, "{who} makes no webhook");
    }
    let (s, made) = p.call(&token("admin-p@test.local"), Method::POST, hooks, Some(hook)).await;
    assert_eq!(s, 201, "{made}");
    let one = format!("{hooks}/{}", made["id"].as_str().expect("id"));
    assert_eq!(p.call(&operator, Method::GET, &one, None).await.0, 404, "operators never see webhooks");
    assert_eq!(p.call(&token("runner-p@test.local"), Method::DELETE, &one, None).await.0, 403);
    assert_eq!(p.call(&token("admin-p@test.local"), Method::DELETE, &one, None).await.0, 204);
    let member = json!({"email": "new@test.local", "role": "viewer"});
    let members = "/v1/tenants/home/projects/main/members";
    assert_eq!(
        p.call(&token("runner-p@test.local"), Method::POST, members, Some(member.clone())).await.0,
        403
    );
    assert_eq!(p.call(&token("admin-p@test.local"), Method::POST, members, Some(member)).await.0, 201);
    // Removing a grant stops the person at the next request.
    let runner = token("runner-p@test.local");
    assert_eq!(p.call(&runner, Method::GET, runs, None).await.0, 200);
    let (s, _) = p
        .call(&token("admin-t@test.local"), Method::DELETE, &format!("{members}/runner-p@test.local"), None)
        .await;
    assert_eq!(s, 204);
    assert_eq!(p.call(&runner, Method::GET, runs, None).await.0, 404, "no grant: the project is invisible");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tenant_export_and_deletion_routes_enforce_the_matrix() {
    let (p, users, operator, stranger) = platform().await;
    let token = |email: &str| users.iter().find(|(u, _)| u.email == email).expect("user").1.clone();
    let (admin, project_admin, runner) =
        (token("admin-t@test.local"), token("admin-p@test.local"), token("runner-t@test.local"));
    let exports = "/v1/tenants/home/exports";
    // tenant_export create and read: the tenant admin tenant-wide only.
    for who in ["viewer-t@test.local", "editor-t@test.local", "runner-t@test.local", "admin-p@test.local"] {
        assert_eq!(p.call(&token(who), Method::POST, exports, None).await.0, 403, "{who} exports nothing");
    }
    assert_eq!(p.call(&operator, Method::POST, exports, None).await.0, 404, "not the operators'");
    assert_eq!(p.call(&stranger, Method::POST, exports, None).await.0, 404);
    let (s, export) = p.call(&admin, Method::POST, exports, None).await;
    assert_eq!(s, 202, "{export}");
    let one = format!("{exports}/{}", export["id"].as_str().expect("id"));
    assert_eq!(p.call(&admin, Method::GET, &one, None).await.0, 200);
    assert_eq!(p.call(&runner, Method::GET, &one, None).await.0, 403);
    assert_eq!(p.call(&operator, Method::GET, &one, None).await.0, 404);

    // tenant_deletion manage (purge) is the operators' alone.
    let purge = "/v1/tenants/home/deletion/purge";
    assert_eq!(p.call(&admin, Method::POST, purge, None).await.0, 403);
    let (s, none) = p.call(&operator, Method::POST, purge, None).await;
    let detail = none["detail"].as_str().unwrap_or_default();
    assert!(s == 404 && detail.contains("no deletion"), "allowed, and nothing to purge: {none}");

    // tenant_deletion create: the tenant admin tenant-wide; then only they may cancel.
    let deletion = "/v1/tenants/home/deletion";
    let reason = json!({"reason": "a test"});
    for (who, t) in [("runner", &runner), ("project admin", &project_admin), ("operator", &operator)] {
        let (s, b) = p.call(t, Method::POST, deletion, Some(reason.clone())).await;
        assert!(s == 403 || s == 404, "a {who} asks for no deletion: {s} {b}");
    }
    let (s, d) = p.call(&admin, Method::POST, deletion, Some(reason)).await;
    assert_eq!(s, 202, "{d}");
    let cancel = "/v1/tenants/home/deletion/cancel";
    assert_eq!(p.call(&project_admin, Method::POST, cancel, None).await.0, 404);
    assert_eq!(p.call(&runner, Method::POST, cancel, None).await.0, 404);
    assert_eq!(p.call(&admin, Method::GET, deletion, None).await.0, 404, "deleting: nothing to read");
    let (s, read) = p.call(&operator, Method::GET, deletion, None).await;
    assert_eq!((s, read["state"].as_str()), (200, Some("scheduled")), "operators read it: {read}");
    assert_eq!(p.call(&admin, Method::POST, cancel, None).await.0, 200);
    assert_eq!(p.call(&runner, Method::GET, "/v1/tenants/home/projects/main/runs", None).await.0, 200);
}
