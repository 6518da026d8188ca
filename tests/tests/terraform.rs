//! `terraform/` checked offline (no terraform binary): every `.tf` parses
//! (`hcl-rs`), a policy suite over the parsed HCL (one test per rule), and
//! contracts between the terraform and the code's own declarations: the
//! settings each function reads (`Config::read` over each service's
//! environment, with its `Service::uses()`), the route table, the queue
//! settings, the executor's Job inventory, the Firestore indexes, the signer's
//! algorithm and the metrics the alerts name.
//!
//! The HCL is not evaluated: a rule reads literals where the rule is about a
//! literal, and otherwise compares expressions as written (`local.url["meter"]`),
//! resolving only `local.*` references and `merge(...)` of object literals.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

use hcl::{Block, Body, Expression, ObjectKey, TemplateExpr};
use mapi_platform::config::vars;
use mapi_platform::{QUEUE_ROUTES, Service};

// ---------------------------------------------------------------------------
// Loading and reading HCL.

/// One parsed `.tf` file.
struct TfFile {
    /// Relative to `terraform/`, e.g. `modules/service/main.tf`.
    path: String,
    body: Body,
}

/// Every `.tf` file, and every `terraform.tfvars`, parsed once.
struct Tf {
    files: Vec<TfFile>,
    tfvars: BTreeMap<String, Body>,
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../terraform")
}

fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<PathBuf> =
        std::fs::read_dir(dir).expect("read terraform/").map(|e| e.expect("entry").path()).collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            if p.file_name().is_some_and(|n| n == ".terraform") {
                continue;
            }
            walk(&p, out);
        } else {
            out.push(p);
        }
    }
}

fn parse_all() -> Result<Tf, Vec<String>> {
    let root = root();
    let mut paths = Vec::new();
    walk(&root, &mut paths);
    let (mut files, mut tfvars, mut errors) = (Vec::new(), BTreeMap::new(), Vec::new());
    for p in paths {
        let rel = p.strip_prefix(&root).expect("under terraform/").to_string_lossy().into_owned();
        let is_tf = rel.ends_with(".tf");
        if !is_tf && !rel.ends_with(".tfvars") {
            continue;
        }
        let text = std::fs::read_to_string(&p).expect("read a .tf file");
        match hcl::parse(&text) {
            Ok(body) if is_tf => files.push(TfFile { path: rel, body }),
            Ok(body) => {
                tfvars.insert(rel, body);
            }
            Err(e) => errors.push(format!("{rel}: {e}")),
        }
    }
    if errors.is_empty() { Ok(Tf { files, tfvars }) } else { Err(errors) }
}

fn tf() -> &'static Tf {
    static TF: OnceLock<Tf> = OnceLock::new();
    TF.get_or_init(|| parse_all().unwrap_or_else(|e| panic!("terraform does not parse:\n{}", e.join("\n"))))
}

/// A `resource` block: kind, name and where it is.
struct Res<'a> {
    kind: String,
    name: String,
    file: &'a str,
    body: &'a Body,
}

impl Res<'_> {
    fn id(&self) -> String {
        format!("{}.{} ({})", self.kind, self.name, self.file)
    }
}

fn label(b: &Block, i: usize) -> String {
    b.labels().get(i).map(|l| l.as_str().to_owned()).unwrap_or_default()
}

impl Tf {
    fn blocks<'a>(&'a self, ident: &'a str) -> impl Iterator<Item = (&'a TfFile, &'a Block)> + 'a {
        self.files
            .iter()
            .flat_map(move |f| f.body.blocks().filter(move |b| b.identifier() == ident).map(move |b| (f, b)))
    }

    fn resources(&self, kind: &str) -> Vec<Res<'_>> {
        self.blocks("resource")
            .filter(|(_, b)| label(b, 0) == kind)
            .map(|(f, b)| Res { kind: label(b, 0), name: label(b, 1), file: &f.path, body: b.body() })
            .collect()
    }

    fn all_resources(&self) -> Vec<Res<'_>> {
        self.blocks("resource")
            .map(|(f, b)| Res { kind: label(b, 0), name: label(b, 1), file: &f.path, body: b.body() })
            .collect()
    }

    fn resource(&self, kind: &str, name: &str) -> Res<'_> {
        self.resources(kind)
            .into_iter()
            .find(|r| r.name == name)
            .unwrap_or_else(|| panic!("terraform declares {kind}.{name}"))
    }

    /// The `module` calls in `dir`'s files: name to body.
    fn module_calls(&self, dir: &str) -> BTreeMap<String, &Body> {
        self.blocks("module")
            .filter(|(f, _)| f.path.starts_with(&format!("{dir}/")))
            .map(|(_, b)| (label(b, 0), b.body()))
            .collect()
    }

    /// The `locals` of `dir`.
    fn locals(&self, dir: &str) -> BTreeMap<String, &Expression> {
        self.blocks("locals")
            .filter(|(f, _)| f.path.starts_with(&format!("{dir}/")))
            .flat_map(|(_, b)| b.body().attributes().map(|a| (a.key().to_owned(), a.expr())))
            .collect()
    }

    /// The `variable` blocks of `dir`.
    fn variables(&self, dir: &str) -> BTreeMap<String, &Body> {
        self.blocks("variable")
            .filter(|(f, _)| f.path.starts_with(&format!("{dir}/")))
            .map(|(_, b)| (label(b, 0), b.body()))
            .collect()
    }

    fn default_of(&self, dir: &str, var: &str) -> &Expression {
        let vars = self.variables(dir);
        let body = vars.get(var).unwrap_or_else(|| panic!("{dir} declares variable {var}"));
        attr(body, "default").unwrap_or_else(|| panic!("{dir}: variable {var} has a default"))
    }

    fn tfvar(&self, env: &str, key: &str) -> &Expression {
        let body = self
            .tfvars
            .get(&format!("envs/{env}/terraform.tfvars"))
            .unwrap_or_else(|| panic!("envs/{env}/terraform.tfvars exists"));
        attr(body, key).unwrap_or_else(|| panic!("envs/{env}/terraform.tfvars sets {key}"))
    }
}

fn attr<'a>(body: &'a Body, key: &str) -> Option<&'a Expression> {
    body.attributes().find(|a| a.key() == key).map(|a| a.expr())
}

fn blocks<'a>(body: &'a Body, ident: &str) -> Vec<&'a Body> {
    body.blocks().filter(|b| b.identifier() == ident).map(|b| b.body()).collect()
}

/// The one nested block at `path` (`["template", "containers"]`).
fn nested<'a>(body: &'a Body, path: &[&str]) -> Option<&'a Body> {
    path.iter().try_fold(body, |b, ident| blocks(b, ident).into_iter().next())
}

/// The attribute at `path`, the last element being the attribute.
fn at<'a>(body: &'a Body, path: &[&str]) -> Option<&'a Expression> {
    let (last, blocks) = path.split_last()?;
    attr(nested(body, blocks)?, last)
}

/// The expression as HCL source, for comparing expressions as written; a
/// quoted string or template is its text without the quotes.
fn src(e: &Expression) -> String {
    match e {
        Expression::String(s) => s.clone(),
        Expression::TemplateExpr(t) => match &**t {
            TemplateExpr::QuotedString(s) => s.clone(),
            TemplateExpr::Heredoc(h) => h.template.clone(),
        },
        other => {
            let text = hcl::format::to_string(other).expect("format an expression");
            text.split_whitespace().collect::<Vec<_>>().join(" ").replace("[ ", "[").replace(" ]", "]")
        }
    }
}

fn src_at(body: &Body, path: &[&str]) -> String {
    at(body, path).map(src).unwrap_or_default()
}

/// A literal string, number or bool, as text.
fn lit(e: &Expression) -> Option<String> {
    match e {
        Expression::String(s) => Some(s.clone()),
        Expression::Number(n) => Some(n.to_string()),
        Expression::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

fn key_of(k: &ObjectKey) -> String {
    match k {
        ObjectKey::Identifier(i) => i.as_str().to_owned(),
        ObjectKey::Expression(e) => src(e),
        other => format!("{other:?}"),
    }
}

/// An object literal, `local.X` or `merge(...)` of those, as its entries.
fn resolve_object(e: &Expression, locals: &BTreeMap<String, &Expression>) -> BTreeMap<String, Expression> {
    match e {
        Expression::Object(o) => o.iter().map(|(k, v)| (key_of(k), v.clone())).collect(),
        Expression::Traversal(t) => {
            let name = match (&t.expr, t.operators.as_slice()) {
                (Expression::Variable(v), [hcl::TraversalOperator::GetAttr(name)])
                    if v.as_str() == "local" =>
                {
                    name.as_str().to_owned()
                }
                _ => panic!("cannot resolve {} to an object", src(e)),
            };
            let local = locals.get(&name).unwrap_or_else(|| panic!("local.{name} is declared"));
            resolve_object(local, locals)
        }
        Expression::FuncCall(f) if f.name.name.as_str() == "merge" && !f.expand_final => {
            f.args.iter().flat_map(|a| resolve_object(a, locals)).collect()
        }
        other => panic!("cannot resolve {} to an object", src(other)),
    }
}

/// Every expression inside `e`, `e` included.
fn subexpressions<'a>(e: &'a Expression, out: &mut Vec<&'a Expression>) {
    out.push(e);
    match e {
        Expression::Array(a) => a.iter().for_each(|x| subexpressions(x, out)),
        Expression::Object(o) => o.iter().for_each(|(k, v)| {
            if let ObjectKey::Expression(k) = k {
                subexpressions(k, out);
            }
            subexpressions(v, out);
        }),
        Expression::FuncCall(f) => f.args.iter().for_each(|x| subexpressions(x, out)),
        Expression::Parenthesis(p) => subexpressions(p, out),
        Expression::Traversal(t) => subexpressions(&t.expr, out),
        Expression::Conditional(c) => {
            subexpressions(&c.cond_expr, out);
            subexpressions(&c.true_expr, out);
            subexpressions(&c.false_expr, out);
        }
        Expression::ForExpr(f) => {
            subexpressions(&f.collection_expr, out);
            subexpressions(&f.value_expr, out);
        }
        _ => {}
    }
}

/// Every expression of every attribute of `body`, nested blocks included.
fn all_expressions(body: &Body) -> Vec<&Expression> {
    let mut out = Vec::new();
    for a in body.attributes() {
        subexpressions(a.expr(), &mut out);
    }
    for b in body.blocks() {
        out.extend(all_expressions(b.body()));
    }
    out
}

/// Every string or template text in the whole terraform.
fn all_strings(tf: &Tf) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for f in &tf.files {
        for e in all_expressions(&f.body) {
            if matches!(e, Expression::String(_) | Expression::TemplateExpr(_)) {
                out.push((f.path.clone(), src(e)));
            }
        }
    }
    for (path, body) in &tf.tfvars {
        for e in all_expressions(body) {
            if let Some(s) = lit(e) {
                out.push((path.clone(), s));
            }
        }
    }
    out
}

fn assert_none(rule: &str, violations: Vec<String>) {
    assert!(violations.is_empty(), "{rule}:\n  {}", violations.join("\n  "));
}

// ---------------------------------------------------------------------------
// The platform's services as terraform writes them.

const ENVS: [&str; 2] = ["prod", "dev"];
const PLATFORM: &str = "modules/platform";

/// The terraform name of a service (`submit` is deployed as `submit-api`).
fn tf_name(s: Service) -> &'static str {
    match s {
        Service::Submit => "submit-api",
        other => other.as_str(),
    }
}

/// The services people call, through the entry: the public API, meter's
/// usage reports, admin.
const PUBLIC: [&str; 3] = ["submit-api", "meter", "admin"];

/// The `module "…" { source = "../service" }` calls, by service name.
fn service_calls(tf: &Tf) -> BTreeMap<String, &Body> {
    tf.module_calls(PLATFORM)
        .into_values()
        .filter(|b| attr(b, "source").map(src).as_deref() == Some("../service"))
        .map(|b| (attr(b, "name").and_then(lit).expect("a service call names its service"), b))
        .collect()
}

fn service_call<'a>(tf: &'a Tf, name: &str) -> &'a Body {
    service_calls(tf).remove(name).unwrap_or_else(|| panic!("the platform deploys {name}"))
}

fn call<'a>(tf: &'a Tf, module: &str) -> &'a Body {
    tf.module_calls(PLATFORM).remove(module).unwrap_or_else(|| panic!("the platform calls module {module}"))
}

/// A service's plain settings, resolved through the platform's locals.
fn service_env(tf: &Tf, name: &str) -> BTreeMap<String, Expression> {
    let locals = tf.locals(PLATFORM);
    resolve_object(attr(service_call(tf, name), "env_vars").expect("env_vars"), &locals)
}

/// A service's secret settings: variable name to secret.
/// Every service takes the platform's secrets; admin, which serves the
/// console, also the console's (and no other service does).
fn service_secrets(tf: &Tf, name: &str) -> BTreeSet<String> {
    let expr = attr(service_call(tf, name), "secrets").expect("secrets");
    let locals = tf.locals(PLATFORM);
    let keys = |module: &str| -> BTreeSet<String> {
        resolve_object(attr(call(tf, module), "secrets").expect("the secrets"), &locals).into_keys().collect()
    };
    if name == "admin" {
        let both = "merge(module.secrets.secret_ids, module.console_secrets.secret_ids)";
        assert_eq!(src(expr), both, "admin takes the platform's secrets and the console's");
        keys("secrets").into_iter().chain(keys("console_secrets")).collect()
    } else {
        assert_eq!(src(expr), "module.secrets.secret_ids", "{name} takes the platform's secrets");
        keys("secrets")
    }
}

/// The names of the secrets every deployed service reads, as the code
/// declares them (the URL signing key is local objects' only; the contract
/// test of each service's settings holds that none reads it here).
fn secret_vars() -> BTreeSet<&'static str> {
    [vars::INTERNAL_TOKEN.name, vars::TOKEN_PEPPER.name].into()
}

/// A list of string literals (or a `local.*` holding one).
fn string_list(e: &Expression, locals: &BTreeMap<String, &Expression>) -> Vec<String> {
    match e {
        Expression::Array(a) => a.iter().map(src).collect(),
        Expression::Traversal(_) => {
            let name = src(e);
            let key = name.strip_prefix("local.").unwrap_or_else(|| panic!("{name} is a list or a local"));
            string_list(locals.get(key).unwrap_or_else(|| panic!("{name} is declared")), locals)
        }
        other => panic!("{} is not a list", src(other)),
    }
}

fn seconds(s: &str) -> Duration {
    let n: f64 = s.strip_suffix('s').and_then(|n| n.parse().ok()).unwrap_or_else(|| panic!("`{s}` is N s"));
    Duration::from_secs_f64(n)
}

// ---------------------------------------------------------------------------
// Parsing and layout.

#[test]
fn every_tf_file_parses() {
    let tf = parse_all().unwrap_or_else(|e| panic!("terraform does not parse:\n{}", e.join("\n")));
    assert!(tf.files.len() >= 30, "the modules and environments are there: {}", tf.files.len());
}

#[test]
fn every_module_and_environment_has_its_files() {
    let tf = tf();
    let has = |p: String| tf.files.iter().any(|f| f.path == p);
    let mut missing = Vec::new();
    for m in [
        "service",
        "jobs",
        "events",
        "queues",
        "scheduler",
        "data",
        "network",
        "monitoring",
        "secrets",
        "entry",
        "platform",
    ] {
        for f in ["main.tf", "variables.tf", "outputs.tf"] {
            if !has(format!("modules/{m}/{f}")) {
                missing.push(format!("modules/{m}/{f}"));
            }
        }
    }
    for env in ENVS {
        for f in ["main.tf", "variables.tf", "backend.tf"] {
            if !has(format!("envs/{env}/{f}")) {
                missing.push(format!("envs/{env}/{f}"));
            }
        }
        if !tf.tfvars.contains_key(&format!("envs/{env}/terraform.tfvars")) {
            missing.push(format!("envs/{env}/terraform.tfvars"));
        }
        let backend = tf
            .files
            .iter()
            .find(|f| f.path == format!("envs/{env}/backend.tf"))
            .and_then(|f| nested(&f.body, &["terraform"]))
            .map(|t| blocks(t, "backend").len())
            .unwrap_or_default();
        if backend != 1 {
            missing.push(format!("envs/{env}/backend.tf: one backend"));
        }
        let platform = tf.module_calls(&format!("envs/{env}"));
        if platform.get("platform").and_then(|b| attr(b, "source")).map(src).as_deref()
            != Some("../../modules/platform")
        {
            missing.push(format!("envs/{env}/main.tf calls ../../modules/platform"));
        }
    }
    assert_none("the layout", missing);
}

// ---------------------------------------------------------------------------
// Policy rules.

#[test]
fn policy_ingress_is_internal_but_for_the_services_people_call() {
    let tf = tf();
    let mut bad = Vec::new();
    let default = src(tf.default_of("modules/service", "ingress"));
    if default != "INGRESS_TRAFFIC_INTERNAL_ONLY" {
        bad.push(format!("the service module's default ingress is {default}"));
    }
    for r in tf.resources("google_cloud_run_v2_service") {
        if src_at(r.body, &["ingress"]) != "var.ingress" {
            bad.push(format!("{} takes its ingress from var.ingress", r.id()));
        }
    }
    for (name, body) in service_calls(tf) {
        let ingress = attr(body, "ingress").map_or(default.clone(), src);
        let want = if PUBLIC.contains(&name.as_str()) {
            "INGRESS_TRAFFIC_INTERNAL_LOAD_BALANCER"
        } else {
            "INGRESS_TRAFFIC_INTERNAL_ONLY"
        };
        if ingress != want {
            bad.push(format!("{name}: ingress {ingress}, want {want}"));
        }
    }
    assert_none("ingress", bad);
}

#[test]
fn policy_no_basic_roles_anywhere() {
    let basic = ["roles/owner", "roles/editor", "roles/viewer"];
    let bad: Vec<String> = all_strings(tf())
        .into_iter()
        .filter(|(_, s)| basic.iter().any(|b| s.contains(b)))
        .map(|(f, s)| format!("{f}: {s}"))
        .collect();
    assert_none("basic roles", bad);
}

#[test]
fn policy_no_project_wide_impersonation_and_project_roles_from_the_allow_list() {
    let tf = tf();
    let mut bad = Vec::new();
    for kind in ["google_project_iam_binding", "google_project_iam_policy", "google_organization_iam_member"]
    {
        for r in tf.resources(kind) {
            bad.push(format!("{}: no authoritative or organization-wide IAM", r.id()));
        }
    }
    let impersonation = ["roles/iam.serviceAccountTokenCreator", "roles/iam.serviceAccountUser"];
    for r in tf.resources("google_project_iam_member") {
        let role = src_at(r.body, &["role"]);
        let custom = role.starts_with("google_project_iam_custom_role.");
        let from_var = role == "each.value" && src_at(r.body, &["for_each"]) == "toset(var.project_roles)";
        if impersonation.contains(&role.as_str()) || !(custom || from_var) {
            bad.push(format!("{}: project-wide role {role}", r.id()));
        }
    }
    // The only project-level predefined role a service holds: Firestore access.
    let locals = tf.locals(PLATFORM);
    for (name, body) in service_calls(tf) {
        let roles = attr(body, "project_roles").map(|e| string_list(e, &locals)).unwrap_or_default();
        for role in roles.iter().filter(|r| *r != "roles/datastore.user") {
            bad.push(format!("{name}: project role {role}"));
        }
    }
    // Impersonation is granted on one account: its `.name`, directly or
    // through every entry of the resource's `for_each`.
    for r in tf.resources("google_service_account_iam_member") {
        let id = src_at(r.body, &["service_account_id"]);
        let targets: Vec<String> = match (id.strip_prefix("each.value."), attr(r.body, "for_each")) {
            (Some(field), Some(Expression::Object(o))) => o
                .iter()
                .map(|(_, v)| resolve_object(v, &BTreeMap::new()).get(field).map(src).unwrap_or_default())
                .collect(),
            _ => vec![id],
        };
        for t in targets.iter().filter(|t| !(t.ends_with(".name") || t.ends_with("_name"))) {
            bad.push(format!("{}: bound on {t}, not on one account", r.id()));
        }
    }
    assert_none("project-wide roles", bad);
}

#[test]
fn policy_push_subscriptions_authenticate_retry_and_dead_letter() {
    let tf = tf();
    let subs = tf.resources("google_pubsub_subscription");
    let topics_with_subscription: BTreeSet<String> =
        subs.iter().map(|s| src_at(s.body, &["topic"])).collect();
    let mut bad = Vec::new();
    let mut pushes = 0;
    for s in subs.iter().filter(|s| nested(s.body, &["push_config"]).is_some()) {
        pushes += 1;
        for path in [
            &["push_config", "oidc_token", "service_account_email"][..],
            &["push_config", "oidc_token", "audience"],
            &["retry_policy", "minimum_backoff"],
            &["dead_letter_policy", "dead_letter_topic"],
        ] {
            if at(s.body, path).is_none() {
                bad.push(format!("{}: no {}", s.id(), path.join(".")));
            }
        }
        let dlq = src_at(s.body, &["dead_letter_policy", "dead_letter_topic"]);
        if !topics_with_subscription.contains(&dlq) {
            bad.push(format!("{}: dead-letter topic {dlq} has no subscription", s.id()));
        }
        let push_topic = src_at(s.body, &["topic"]);
        if push_topic == dlq {
            bad.push(format!("{}: dead-letters to its own topic", s.id()));
        }
    }
    assert!(pushes >= 1, "there is a push subscription");
    assert_none("push subscriptions", bad);
}

#[test]
fn policy_the_pubsub_agent_may_dead_letter() {
    let tf = tf();
    let locals = tf.locals("modules/events");
    let agent = locals.get("pubsub_agent").map(|e| src(e)).unwrap_or_default();
    assert_eq!(
        agent,
        "serviceAccount:service-${data.google_project.control.number}@gcp-sa-pubsub.iam.gserviceaccount.com",
        "the Pub/Sub service agent of the control project"
    );
    let publish = tf.resource("google_pubsub_topic_iam_member", "agent_dead_letters");
    assert_eq!(src_at(publish.body, &["topic"]), "google_pubsub_topic.dead_letter.name");
    assert_eq!(src_at(publish.body, &["role"]), "roles/pubsub.publisher");
    assert_eq!(src_at(publish.body, &["member"]), "local.pubsub_agent");
    let ack = tf.resource("google_pubsub_subscription_iam_member", "agent_acknowledges");
    assert_eq!(src_at(ack.body, &["subscription"]), "google_pubsub_subscription.push.name");
    assert_eq!(src_at(ack.body, &["role"]), "roles/pubsub.subscriber");
    assert_eq!(src_at(ack.body, &["member"]), "local.pubsub_agent");
    let dlq = src_at(
        tf.resource("google_pubsub_subscription", "push").body,
        &["dead_letter_policy", "dead_letter_topic"],
    );
    assert_eq!(dlq, "google_pubsub_topic.dead_letter.id");
}

#[test]
fn policy_the_log_sink_publishes_only_to_the_events_topic() {
    let tf = tf();
    let sinks = tf.resources("google_logging_project_sink");
    assert_eq!(sinks.len(), 1, "one sink");
    let sink = &sinks[0];
    assert_eq!(src_at(sink.body, &["filter"]), "jsonPayload.mapi_event:*");
    assert_eq!(src_at(sink.body, &["unique_writer_identity"]), "true");
    assert_eq!(src_at(sink.body, &["destination"]), "pubsub.googleapis.com/${google_pubsub_topic.events.id}");
    assert_eq!(src_at(sink.body, &["project"]), "var.exec_project_id", "the sink reads the executions' logs");
    let writer = format!("google_logging_project_sink.{}.writer_identity", sink.name);
    let grants: Vec<Res<'_>> =
        tf.all_resources().into_iter().filter(|r| src_at(r.body, &["member"]) == writer).collect();
    let described: Vec<String> = grants
        .iter()
        .map(|g| format!("{} {} {}", g.kind, src_at(g.body, &["topic"]), src_at(g.body, &["role"])))
        .collect();
    assert_eq!(
        described,
        ["google_pubsub_topic_iam_member google_pubsub_topic.events.name roles/pubsub.publisher"],
        "the writer may publish to the events topic, nothing else"
    );
}

#[test]
fn policy_scheduler_jobs_carry_an_oidc_token_their_target_accepts() {
    let tf = tf();
    let mut bad = Vec::new();
    for r in tf.resources("google_cloud_scheduler_job") {
        for path in [
            &["http_target", "oidc_token", "service_account_email"][..],
            &["http_target", "oidc_token", "audience"],
        ] {
            if at(r.body, path).is_none() {
                bad.push(format!("{}: no {}", r.id(), path.join(".")));
            }
        }
        if at(r.body, &["attempt_deadline"]).is_none() {
            bad.push(format!("{}: no attempt_deadline", r.id()));
        }
    }
    // Each job's audience is one its target service accepts: its URL or one of
    // its custom audiences.
    let scheduler = call(tf, "scheduler");
    let audience = src_at(scheduler, &["audience"]);
    let locals = tf.locals(PLATFORM);
    let jobs = resolve_object(attr(scheduler, "jobs").expect("jobs"), &locals);
    for (job, spec) in &jobs {
        let Expression::Object(o) = spec else { panic!("job {job} is an object") };
        let uri = o.iter().find(|(k, _)| key_of(k) == "uri").map(|(_, v)| src(v)).unwrap_or_default();
        let target = service_calls(tf)
            .into_iter()
            .find(|(name, _)| uri.starts_with(&format!("${{local.url[\"{name}\"]}}/")))
            .unwrap_or_else(|| panic!("scheduler job {job} targets a service's URL: {uri}"));
        let accepted =
            attr(target.1, "custom_audiences").map(|e| string_list(e, &locals)).unwrap_or_default();
        let own = format!("local.url[\"{}\"]", target.0);
        if !accepted.contains(&audience) && audience != own {
            bad.push(format!("scheduler job {job}: {} does not accept audience {audience}", target.0));
        }
    }
    assert_none("scheduler jobs", bad);
}

#[test]
fn policy_every_service_runs_as_its_own_account() {
    let tf = tf();
    let svc = tf.resource("google_cloud_run_v2_service", "this");
    assert_eq!(src_at(svc.body, &["template", "service_account"]), "google_service_account.this.email");
    let sa = tf.resource("google_service_account", "this");
    assert_eq!(sa.file, svc.file, "the service's account is made beside it");
    assert_eq!(src_at(sa.body, &["account_id"]), "mapi-${var.env}-${var.name}");
    let names: Vec<String> = service_calls(tf).into_keys().collect();
    let unique: BTreeSet<&String> = names.iter().collect();
    assert_eq!(unique.len(), names.len(), "no two services share a name, so an account");
    let default_compute: Vec<(String, String)> = all_strings(tf)
        .into_iter()
        .filter(|(_, s)| {
            s.contains("-compute@developer.gserviceaccount.com") || s.contains("@appspot.gserviceaccount.com")
        })
        .collect();
    assert!(default_compute.is_empty(), "no default account: {default_compute:?}");
    for r in
        tf.resources("google_cloud_run_v2_service").iter().chain(&tf.resources("google_cloud_run_v2_job"))
    {
        let sa = src_at(r.body, &["template", "service_account"])
            + &src_at(r.body, &["template", "template", "service_account"]);
        assert!(sa.starts_with("google_service_account."), "{} runs as an account made here: {sa}", r.id());
    }
}

#[test]
fn policy_no_secret_is_a_literal() {
    let tf = tf();
    let mut bad = Vec::new();
    // Key files would be keys in the environment; signing is signBlob.
    let key_files = [mapi_gcs::settings::SIGNING_KEY_FILE.name, mapi_gcs::settings::UPLOADER_KEY_FILE.name];
    for name in service_calls(tf).into_keys() {
        let env = service_env(tf, &name);
        for key in env.keys() {
            let secret = secret_vars().contains(key.as_str())
                || [
                    vars::OIDC_CLIENT_SECRET.name,
                    vars::OIDC_CLI_CLIENT_SECRET.name,
                    vars::URL_SIGNING_KEY.name,
                ]
                .contains(&key.as_str());
            if secret || key_files.contains(&key.as_str()) {
                bad.push(format!("{name}: {key} as a plain value"));
            }
        }
        let secrets = service_secrets(tf, &name);
        let mut want: BTreeSet<String> = secret_vars().into_iter().map(str::to_owned).collect();
        if name == "admin" {
            want.insert(vars::OIDC_CLIENT_SECRET.name.to_owned());
            want.insert(vars::OIDC_CLI_CLIENT_SECRET.name.to_owned());
        }
        if secrets != want {
            bad.push(format!("{name}: secrets {secrets:?}, want {want:?}"));
        }
    }
    let svc = tf.resource("google_cloud_run_v2_service", "this");
    let env_blocks = blocks(nested(svc.body, &["template", "containers"]).expect("a container"), "dynamic");
    let secret_env = env_blocks
        .iter()
        .find(|b| src_at(b, &["for_each"]) == "var.secrets")
        .expect("the secrets' env block");
    let content = nested(secret_env, &["content"]).expect("content");
    assert!(attr(content, "value").is_none(), "a secret has no value, only a reference");
    assert_eq!(src_at(content, &["value_source", "secret_key_ref", "secret"]), "env.value");
    for r in tf.resources("google_secret_manager_secret_version") {
        bad.push(format!("{}: a secret's value would be in code and state", r.id()));
    }
    let looks_like_a_key = |s: &str| {
        s.contains("-----BEGIN")
            || s.contains("\"private_key\"")
            || s.starts_with("AIza")
            || s.as_bytes().windows(32).any(|w| w.iter().all(u8::is_ascii_hexdigit))
    };
    for (file, s) in all_strings(tf) {
        if looks_like_a_key(&s) {
            bad.push(format!("{file}: `{s}` looks like a key"));
        }
    }
    assert_none("secrets", bad);
}

#[test]
fn policy_secrets_are_read_only_by_accessors() {
    let tf = tf();
    let mut bad = Vec::new();
    for kind in ["google_secret_manager_secret_iam_member", "google_secret_manager_secret_iam_binding"] {
        for r in tf.resources(kind) {
            if src_at(r.body, &["role"]) != "roles/secretmanager.secretAccessor" || kind.ends_with("binding")
            {
                bad.push(r.id());
            }
        }
    }
    assert_none("secret access", bad);
}

#[test]
fn policy_buckets_are_uniform_and_never_public() {
    let tf = tf();
    let mut bad = Vec::new();
    let buckets = tf.resources("google_storage_bucket");
    assert!(buckets.len() >= 2, "the data and bootstrap buckets");
    for b in &buckets {
        if src_at(b.body, &["uniform_bucket_level_access"]) != "true" {
            bad.push(format!("{}: uniform_bucket_level_access", b.id()));
        }
        if src_at(b.body, &["public_access_prevention"]) != "enforced" {
            bad.push(format!("{}: public_access_prevention", b.id()));
        }
        if blocks(b.body, "lifecycle_rule").is_empty() {
            bad.push(format!("{}: no lifecycle rule", b.id()));
        }
    }
    for r in tf.resources("google_storage_bucket_iam_member") {
        let m = src_at(r.body, &["member"]);
        if m.contains("allUsers") || m.contains("allAuthenticatedUsers") {
            bad.push(format!("{}: {m}", r.id()));
        }
    }
    assert_none("buckets", bad);
}

#[test]
fn policy_firestore_is_delete_protected_with_point_in_time_recovery() {
    let tf = tf();
    let dbs = tf.resources("google_firestore_database");
    assert_eq!(dbs.len(), 1);
    let db = &dbs[0];
    assert_eq!(src_at(db.body, &["type"]), "FIRESTORE_NATIVE");
    assert_eq!(src_at(db.body, &["delete_protection_state"]), "DELETE_PROTECTION_ENABLED");
    assert_eq!(src_at(db.body, &["point_in_time_recovery_enablement"]), "POINT_IN_TIME_RECOVERY_ENABLED");
}

#[test]
fn policy_jobs_never_retry_run_as_the_execution_account_and_egress_into_the_network() {
    let tf = tf();
    let jobs = tf.resources("google_cloud_run_v2_job");
    assert_eq!(jobs.len(), 2, "the CPU inventory and the GPU Job");
    let mut bad = Vec::new();
    for j in &jobs {
        let t = |p: &[&str]| src_at(j.body, &[&["template", "template"][..], p].concat());
        if t(&["max_retries"]) != "0" {
            bad.push(format!("{}: max_retries {}", j.id(), t(&["max_retries"])));
        }
        if t(&["service_account"]) != "google_service_account.execution.email" {
            bad.push(format!("{}: runs as {}", j.id(), t(&["service_account"])));
        }
        if t(&["vpc_access", "egress"]) != "ALL_TRAFFIC"
            || t(&["vpc_access", "network_interfaces", "subnetwork"]).is_empty()
        {
            bad.push(format!("{}: Direct VPC egress of all traffic", j.id()));
        }
    }
    let gpu = tf.resource("google_cloud_run_v2_job", "gpu");
    assert_eq!(src_at(gpu.body, &["count"]), "var.gpu_jobs ? 1 : 0", "the GPU Job only with gpu_jobs");
    assert_eq!(src_at(gpu.body, &["template", "template", "gpu_zonal_redundancy_disabled"]), "true");
    assert_eq!(src(tf.default_of("modules/jobs", "gpu_jobs")), "false");
    assert_none("jobs", bad);
}

#[test]
fn policy_the_execution_account_only_takes_bootstraps() {
    let tf = tf();
    let member = "serviceAccount:${google_service_account.execution.email}";
    let grants: Vec<Res<'_>> =
        tf.all_resources().into_iter().filter(|r| src_at(r.body, &["member"]) == member).collect();
    let described: Vec<String> = grants
        .iter()
        .map(|g| format!("{} {} {}", g.kind, src_at(g.body, &["bucket"]), src_at(g.body, &["role"])))
        .collect();
    assert_eq!(
        described,
        [
            "google_storage_bucket_iam_member var.bootstrap_bucket google_project_iam_custom_role.bootstrap_taker.id"
        ]
    );
    let role = tf.resource("google_project_iam_custom_role", "bootstrap_taker");
    let locals = BTreeMap::new();
    let perms = string_list(at(role.body, &["permissions"]).expect("permissions"), &locals);
    assert_eq!(perms, ["storage.objects.delete", "storage.objects.get"]);
}

#[test]
fn policy_the_orchestrator_role_has_exactly_its_permissions() {
    let tf = tf();
    let role = tf.resource("google_project_iam_custom_role", "orchestrator");
    let perms: BTreeSet<String> =
        string_list(at(role.body, &["permissions"]).expect("permissions"), &BTreeMap::new())
            .into_iter()
            .collect();
    // The five the executor calls, and runWithOverrides: every jobs.run sends
    // container, task-count and timeout overrides (mapi_cloudrun's run_job); and listing log
    // entries, for a run's logs (mapi_cloudrun's logs).
    let want: BTreeSet<String> = [
        "logging.logEntries.list",
        "run.jobs.run",
        "run.jobs.runWithOverrides",
        "run.executions.get",
        "run.executions.list",
        "run.executions.cancel",
        "run.tasks.list",
    ]
    .map(str::to_owned)
    .into();
    assert_eq!(perms, want);
    let run_admin: Vec<(String, String)> = all_strings(tf)
        .into_iter()
        .filter(|(_, s)| s.starts_with("roles/run.admin") || s == "roles/run.developer")
        .collect();
    assert!(run_admin.is_empty(), "{run_admin:?}");
    let act_as = tf.resource("google_service_account_iam_member", "starters_act_as_execution");
    assert_eq!(src_at(act_as.body, &["service_account_id"]), "google_service_account.execution.name");
    assert_eq!(src_at(act_as.body, &["role"]), "roles/iam.serviceAccountUser");
}

#[test]
fn policy_dev_and_prod_never_share_an_identity_or_state() {
    let tf = tf();
    for key in ["env", "project_id", "exec_project_id", "data_bucket"] {
        let values: BTreeSet<String> = ENVS.iter().map(|e| src(tf.tfvar(e, key))).collect();
        assert_eq!(values.len(), ENVS.len(), "{key} differs between environments: {values:?}");
    }
    let mut bad = Vec::new();
    for r in tf.resources("google_service_account") {
        let id = src_at(r.body, &["account_id"]);
        if !id.starts_with("mapi-${var.env}-") {
            bad.push(format!("{}: account_id {id} does not carry the environment", r.id()));
        }
    }
    let backends: BTreeSet<String> = ENVS
        .iter()
        .map(|e| {
            let f = tf.files.iter().find(|f| f.path == format!("envs/{e}/backend.tf")).expect("backend.tf");
            let b = nested(&f.body, &["terraform", "backend"]).expect("backend");
            format!("{} {}", src_at(b, &["bucket"]), src_at(b, &["prefix"]))
        })
        .collect();
    if backends.len() != ENVS.len() {
        bad.push(format!("the environments share a state: {backends:?}"));
    }
    assert_none("environments", bad);
}

#[test]
fn policy_services_are_probed_on_health() {
    let tf = tf();
    let svc = tf.resource("google_cloud_run_v2_service", "this");
    let c = nested(svc.body, &["template", "containers"]).expect("a container");
    assert_eq!(src_at(c, &["startup_probe", "http_get", "path"]), "/health");
    assert_eq!(src_at(c, &["liveness_probe", "http_get", "path"]), "/health");
}

#[test]
fn policy_images_are_digests_terraform_owns() {
    let tf = tf();
    let mut bad = Vec::new();
    for r in
        tf.resources("google_cloud_run_v2_service").iter().chain(&tf.resources("google_cloud_run_v2_job"))
    {
        let ignored = src_at(r.body, &["lifecycle", "ignore_changes"]);
        if ignored != "[client, client_version]" {
            bad.push(format!(
                "{}: ignores {ignored}; only the client fields the deploy tooling stamps",
                r.id()
            ));
        }
    }
    for (name, body) in service_calls(tf) {
        if src_at(body, &["image"]) != "var.image_digests[\"mapi\"]" {
            bad.push(format!("{name}: image {}", src_at(body, &["image"])));
        }
    }
    for j in tf.resources("google_cloud_run_v2_job") {
        let image = src_at(j.body, &["template", "template", "containers", "image"]);
        if !image.starts_with("var.image_digests[\"worker-") {
            bad.push(format!("{}: image {image}", j.id()));
        }
    }
    let validation = tf
        .variables(PLATFORM)
        .get("image_digests")
        .and_then(|v| at(v, &["validation", "condition"]))
        .map(src);
    if !validation.is_some_and(|c| c.contains("@sha256:")) {
        bad.push("image_digests is validated as digests".to_owned());
    }
    assert_none("images", bad);
}

#[test]
fn policy_invokers_are_exactly_the_callers() {
    let tf = tf();
    let mut bad = Vec::new();
    for r in tf.resources("google_project_iam_member") {
        if src_at(r.body, &["role"]).contains("run.invoker") {
            bad.push(format!("{}: project-wide invoker", r.id()));
        }
    }
    let want = |name: &str| -> Vec<String> {
        match name {
            n if PUBLIC.contains(&n) => vec!["allUsers".into()],
            "push-events" => vec!["serviceAccount:${module.events.push_service_account_email}".into()],
            _ => vec!["serviceAccount:${module.queues.invoker_email}".into()],
        }
    };
    let locals = tf.locals(PLATFORM);
    for (name, body) in service_calls(tf) {
        let invokers = attr(body, "invokers").map(|e| string_list(e, &locals)).unwrap_or_default();
        if invokers != want(&name) {
            bad.push(format!("{name}: invokers {invokers:?}, want {:?}", want(&name)));
        }
    }
    assert_none("invokers", bad);
}

#[test]
fn policy_the_network_denies_all_egress_but_the_restricted_apis() {
    let tf = tf();
    let net = tf.resource("google_compute_network", "exec");
    assert_eq!(src_at(net.body, &["delete_default_routes_on_create"]), "true");
    assert_eq!(src_at(net.body, &["auto_create_subnetworks"]), "false");
    let routes = tf.resources("google_compute_route");
    assert_eq!(routes.len(), 1, "one route");
    assert_eq!(src_at(routes[0].body, &["dest_range"]), "199.36.153.4/30");
    let mut deny_all = false;
    for f in tf.resources("google_compute_firewall") {
        assert_eq!(src_at(f.body, &["direction"]), "EGRESS", "{}", f.id());
        let ranges = src_at(f.body, &["destination_ranges"]);
        if nested(f.body, &["deny"]).is_some() {
            deny_all |= ranges == "[\"0.0.0.0/0\"]" && src_at(f.body, &["deny", "protocol"]) == "all";
        } else {
            assert_eq!(ranges, "[\"199.36.153.4/30\"]", "{} allows only the restricted VIP", f.id());
            assert_eq!(src_at(f.body, &["allow", "ports"]), "[\"443\"]", "{}", f.id());
        }
    }
    assert!(deny_all, "a firewall denies all egress");
    let zone = tf.resource("google_dns_managed_zone", "googleapis");
    assert_eq!(src_at(zone.body, &["dns_name"]), "googleapis.com.");
    assert_eq!(src_at(zone.body, &["visibility"]), "private");
    let vip = tf.locals("modules/network").get("restricted_vip").map(|e| src(e)).unwrap_or_default();
    assert_eq!(vip, "[\"199.36.153.4\", \"199.36.153.5\", \"199.36.153.6\", \"199.36.153.7\"]");
    let wildcard = tf.resource("google_dns_record_set", "wildcard");
    assert_eq!(src_at(wildcard.body, &["rrdatas"]), "[\"restricted.googleapis.com.\"]");
}

#[test]
fn policy_the_signing_key_is_asymmetric_protected_and_verifiable() {
    let tf = tf();
    let key = tf.resource("google_kms_crypto_key", "signing");
    assert_eq!(src_at(key.body, &["purpose"]), "ASYMMETRIC_SIGN");
    // Documented exception: Cloud KMS rotates only symmetric keys on a
    // schedule; this key is rotated by hand (modules/data) and kept.
    assert!(attr(key.body, "rotation_period").is_none(), "asymmetric keys take no rotation_period");
    assert_eq!(src_at(key.body, &["lifecycle", "prevent_destroy"]), "true");
    let algorithm = src_at(key.body, &["version_template", "algorithm"]);
    let parsed: Result<mapi_signer::Algorithm, String> = algorithm.parse();
    assert!(parsed.is_ok(), "the signer verifies {algorithm}: {parsed:?}");
    let signers: Vec<Res<'_>> = tf
        .resources("google_kms_crypto_key_iam_member")
        .into_iter()
        .filter(|r| src_at(r.body, &["role"]) == "roles/cloudkms.signerVerifier")
        .collect();
    let members: Vec<String> = signers.iter().map(|r| src_at(r.body, &["member"])).collect();
    assert_eq!(members, ["serviceAccount:${module.meter.service_account_email}"], "only meter signs");
}

#[test]
fn policy_queues_deliver_with_oidc_to_one_host_and_enqueue_is_per_queue() {
    let tf = tf();
    let q = tf.resource("google_cloud_tasks_queue", "this");
    assert_eq!(
        src_at(q.body, &["http_target", "oidc_token", "service_account_email"]),
        "google_service_account.invoker.email"
    );
    assert_eq!(src_at(q.body, &["http_target", "oidc_token", "audience"]), "var.audience");
    assert_eq!(src_at(q.body, &["http_target", "uri_override", "uri_override_enforce_mode"]), "ALWAYS");
    assert_eq!(src_at(q.body, &["http_target", "uri_override", "scheme"]), "HTTPS");
    for p in ["max_attempts", "min_backoff", "max_backoff", "max_doublings"] {
        assert!(at(q.body, &["retry_config", p]).is_some(), "retry_config.{p}");
    }
    let enq = tf.resource("google_cloud_tasks_queue_iam_member", "enqueuers");
    assert_eq!(src_at(enq.body, &["role"]), "roles/cloudtasks.enqueuer");
    let project_enqueue: Vec<String> = tf
        .resources("google_project_iam_member")
        .iter()
        .filter(|r| src_at(r.body, &["role"]).contains("cloudtasks"))
        .map(Res::id)
        .collect();
    assert!(project_enqueue.is_empty(), "{project_enqueue:?}");
}

#[test]
fn policy_alerts_watch_jobs_run_429s_failing_webhook_sweeps_and_the_spend_cap() {
    let tf = tf();
    // Each log-based metric counts exactly the line the code logs, at the
    // severity it logs it, and its alert fires on one.
    use mapi_reconcile_tick::spend::{SPEND_CAP_70_ALARM, SPEND_CAP_90_ALARM};
    let alarms = [
        (
            "jobs_run_throttled",
            "throttled_message",
            mapi_cloudrun::THROTTLED_ALARM,
            "MapiJobsRun429",
            "ERROR",
        ),
        (
            "webhook_sweep_failing",
            "webhook_sweep_alarm_message",
            mapi_reconcile_tick::webhooks::SWEEP_ALARM,
            "MapiWebhookSweepFailing",
            "ERROR",
        ),
        ("spend_cap_70", "spend_cap_70_message", SPEND_CAP_70_ALARM, "MapiSpendCap70", "WARNING"),
        (
            "integrity_failure",
            "integrity_alarm_message",
            mapi_bundles::INTEGRITY_ALARM,
            "MapiIntegrityFailure",
            "ERROR",
        ),
        ("spend_cap_90", "spend_cap_90_message", SPEND_CAP_90_ALARM, "MapiSpendCap90", "ERROR"),
    ];
    for (name, variable, logged, display, severity) in alarms {
        let metric = tf.resource("google_logging_metric", name);
        // As written, quotes escaped or not.
        let filter = src_at(metric.body, &["filter"]).replace('\\', "");
        assert!(filter.contains(&format!("jsonPayload.message=\"${{var.{variable}}}\"")), "{filter}");
        assert!(
            filter.contains(&format!("severity={severity} ")),
            "the code logs it at {severity}: {filter}"
        );
        assert_eq!(
            lit(tf.default_of("modules/monitoring", variable)).as_deref(),
            Some(logged),
            "the metric's message is the one the code logs"
        );
        let alert = tf.resource("google_monitoring_alert_policy", name);
        let condition =
            nested(alert.body, &["conditions", "condition_threshold"]).expect("a threshold condition");
        assert!(
            src_at(condition, &["filter"])
                .contains(&format!("logging.googleapis.com/user/${{google_logging_metric.{name}.name}}")),
            "the alert watches the log-based metric"
        );
        assert_eq!(src_at(condition, &["comparison"]), "COMPARISON_GT");
        assert_eq!(src_at(condition, &["threshold_value"]), "0", "one line is enough");
        assert!(
            src_at(alert.body, &["display_name"]).starts_with(display),
            "the alert the metric's doc names"
        );
    }
    let budget = tf.resource("google_billing_budget", "spend_cap");
    let thresholds: Vec<String> =
        blocks(budget.body, "threshold_rules").iter().map(|t| src_at(t, &["threshold_percent"])).collect();
    assert_eq!(thresholds, ["0.7", "0.9"]);
}

/// The rates operators watch: quota denials (the line each denial logs),
/// 5xx answers (Cloud Run's request log) over five minutes above a
/// threshold of the deployment's, and a backlog in the events' dead-letter
/// subscription.
#[test]
fn policy_alerts_watch_the_rates_of_quota_denials_and_5xx_and_dead_letters() {
    let tf = tf();
    let metric =
        |name: &str| src_at(tf.resource("google_logging_metric", name).body, &["filter"]).replace('\\', "");
    let condition = |name: &str| {
        let alert = tf.resource("google_monitoring_alert_policy", name);
        let c = nested(alert.body, &["conditions", "condition_threshold"]).expect("a threshold condition");
        (
            src_at(c, &["filter"]).replace('\\', ""),
            src_at(c, &["threshold_value"]),
            src_at(c, &["comparison"]),
        )
    };
    let denials = metric("quota_denials");
    assert!(denials.contains("jsonPayload.message=\"${var.quota_denied_message}\""), "{denials}");
    assert_eq!(
        lit(tf.default_of("modules/monitoring", "quota_denied_message")).as_deref(),
        Some(mapi_admission::quota::DENIED_LINE),
        "the metric's message is the one each denial logs"
    );
    let (_, threshold, comparison) = condition("quota_denials");
    assert_eq!((threshold.as_str(), comparison.as_str()), ("var.quota_denials_per_5m", "COMPARISON_GT"));
    let errors = metric("server_errors");
    assert!(
        errors.contains("run.googleapis.com/requests") && errors.contains("httpRequest.status>=500"),
        "{errors}"
    );
    assert_eq!(condition("server_errors").1, "var.server_errors_per_5m");
    let (dead, threshold, _) = condition("dead_letters");
    assert!(
        dead.contains("${var.dead_letter_subscription}") && dead.contains("num_undelivered_messages"),
        "{dead}"
    );
    assert_eq!(threshold, "0", "one dead letter is enough");
    let passed = attr(call(tf, "monitoring"), "dead_letter_subscription").map(src);
    assert_eq!(passed.as_deref(), Some("module.events.dead_letter_subscription"));
    let dead_letter = tf.resource("google_pubsub_subscription", "dead_letter");
    assert!(src_at(dead_letter.body, &["topic"]).contains("google_pubsub_topic.dead_letter"));
}

#[test]
fn policy_the_entry_is_https_only_with_modern_tls() {
    let tf = tf();
    let ssl = tf.resource("google_compute_ssl_policy", "entry");
    assert_eq!(src_at(ssl.body, &["min_tls_version"]), "TLS_1_2");
    assert_eq!(src_at(ssl.body, &["profile"]), "RESTRICTED");
    let proxy = tf.resource("google_compute_target_https_proxy", "entry");
    assert_eq!(src_at(proxy.body, &["ssl_policy"]), "google_compute_ssl_policy.entry.id");
    let mut bad = Vec::new();
    for r in tf.resources("google_compute_global_forwarding_rule") {
        let (port, target) = (src_at(r.body, &["port_range"]), src_at(r.body, &["target"]));
        if port != "443" || !target.starts_with("google_compute_target_https_proxy.") {
            bad.push(format!("{}: port {port} to {target}, want 443 to the HTTPS proxy", r.id()));
        }
        if src_at(r.body, &["load_balancing_scheme"]) != "EXTERNAL_MANAGED" {
            bad.push(format!("{}: not the global external Application Load Balancer", r.id()));
        }
    }
    if !tf.resources("google_compute_target_http_proxy").is_empty() {
        bad.push("a plain-HTTP proxy: bearer tokens would cross the network in clear".to_owned());
    }
    assert_none("the entry", bad);
}

// ---------------------------------------------------------------------------
// Contracts with the code.

/// A value of the right shape for a setting terraform computes.
fn sample(name: &str) -> String {
    match name {
        n if secret_vars().contains(n) => "ab".repeat(32),
        n if n.ends_with("_URL") => "https://svc-123.europe-west1.run.app".into(),
        n if n.ends_with("_SERVICE_ACCOUNT") => "svc@p.iam.gserviceaccount.com".into(),
        n if n.ends_with("_SUBSCRIPTIONS") => "projects/p/subscriptions/s".into(),
        n if n.ends_with("_AUDIENCE") => "mapi-internal".into(),
        n if n.ends_with("_BUCKET") => "mapi-prod-data".into(),
        "MAPI_KMS_KEY_VERSION" => "projects/p/locations/l/keyRings/r/cryptoKeys/k/cryptoKeyVersions/1".into(),
        "MAPI_KMS_TRUSTED_KEY_VERSIONS" => String::new(),
        "MAPI_CLOUDRUN_GPU_JOBS" => "false".into(),
        "MAPI_ENDPOINTS_BASE_IMAGES" => r#"{"base-ml": "worker-base-ml@sha256:ab"}"#.into(),
        n if n.ends_with("_DAYS") => "30".into(),
        n if n.ends_with("_S") => "3600".into(),
        n if n.ends_with("_EMAILS") => String::new(),
        _ => "p".into(),
    }
}

/// The environment a service starts with: literals as written, computed
/// values by their shape, secrets as references.
fn start_env(tf: &Tf, name: &str) -> BTreeMap<String, String> {
    let mut env: BTreeMap<String, String> = service_env(tf, name)
        .into_iter()
        .map(|(k, v)| (k.clone(), lit(&v).unwrap_or_else(|| sample(&k))))
        .collect();
    for s in service_secrets(tf, name) {
        env.insert(s.clone(), sample(&s));
    }
    env
}

#[test]
fn contract_each_service_starts_with_the_settings_terraform_gives_it_and_reads_them_all() {
    let tf = tf();
    let mut bad = Vec::new();
    for service in Service::ALL {
        let name = tf_name(*service);
        let env = start_env(tf, name);
        let read = std::sync::Mutex::new(BTreeSet::new());
        let lookup = |k: &str| {
            read.lock().expect("lock").insert(k.to_owned());
            env.get(k).cloned()
        };
        match mapi_platform::Config::read(&lookup, service.uses()) {
            Err(e) => {
                bad.push(format!("{name} would not start: {e}"));
                continue;
            }
            Ok(c) => {
                let uses = service.uses();
                use mapi_platform::config::{ExecutorKind, Profile, Section, StoreBackend};
                if c.profile != Profile::MultiTenant || !matches!(c.store_backend, StoreBackend::Firestore(_))
                {
                    bad.push(format!("{name}: multi-tenant on Firestore"));
                }
                if uses.has(Section::Executor) && c.executor != ExecutorKind::CloudRunJobs {
                    bad.push(format!("{name}: the cloudrun-jobs executor"));
                }
                if uses.has(Section::Queue) && c.cloudtasks.is_none() {
                    bad.push(format!("{name}: Cloud Tasks"));
                }
                if uses.has(Section::Push) && *service == Service::PushEvents && c.pubsub_push.is_none() {
                    bad.push(format!("{name}: push authentication"));
                }
            }
        }
        let read = read.into_inner().expect("lock");
        for key in env.keys().filter(|k| !read.contains(*k)) {
            bad.push(format!("{name} sets {key}, which it does not read"));
        }
        // Every variable it reads with no default and whose adapter terraform selects is set.
        for var in mapi_platform::variables() {
            if matches!(var.default, mapi_settings::Default::Required(_))
                && read.contains(var.name)
                && !env.contains_key(var.name)
            {
                bad.push(format!("{name} reads {} (required) but terraform does not set it", var.name));
            }
        }
    }
    assert_none("settings", bad);
}

/// The bundle key's grants are exactly what the services' settings say:
/// the one service that signs (meter) may sign, every other service that
/// reads the signer's settings (it verifies bundles) may read the public
/// keys, and no service that never verifies holds a grant on the key.
#[test]
fn contract_the_signing_keys_grants_are_exactly_the_services_that_sign_or_verify() {
    use mapi_platform::config::Section;
    let tf = tf();
    let module_of = |service: Service| {
        format!("serviceAccount:${{module.{}.service_account_email}}", tf_name(service).replace('-', "_"))
    };
    let verifiers: BTreeSet<String> = Service::ALL
        .iter()
        .filter(|s| s.uses().has(Section::Signer) && **s != Service::Meter)
        .map(|s| module_of(*s))
        .collect();
    let grant = tf.resource("google_kms_crypto_key_iam_member", "verifiers");
    assert_eq!(src_at(grant.body, &["role"]), "roles/cloudkms.publicKeyViewer");
    let locals = tf.locals(PLATFORM);
    let granted: BTreeSet<String> = resolve_object(attr(grant.body, "for_each").expect("for_each"), &locals)
        .values()
        .map(|e| format!("serviceAccount:${{{}}}", src(e)))
        .collect();
    assert_eq!(granted, verifiers, "publicKeyViewer: the services that verify bundles");
    assert!(!Service::Tasks.uses().has(Section::Signer), "the task routes verify nothing");
    let signer = tf.resource("google_kms_crypto_key_iam_member", "signer");
    assert_eq!(src_at(signer.body, &["member"]), module_of(Service::Meter));
}

#[test]
fn contract_each_service_runs_its_functions_binary() {
    let tf = tf();
    let mut bad = Vec::new();
    for service in Service::ALL {
        let name = tf_name(*service);
        let dir = match service {
            Service::Tasks => "tasks",
            other => other.as_str(),
        };
        let manifest = std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("../functions/{dir}/Cargo.toml")),
        )
        .expect("the function's Cargo.toml");
        let package = manifest
            .lines()
            .find_map(|l| l.strip_prefix("name = \""))
            .and_then(|l| l.strip_suffix('"'))
            .expect("a package name");
        let binary = src_at(service_call(tf, name), &["binary"]);
        if binary != package {
            bad.push(format!("{name} runs {binary}, the function's binary is {package}"));
        }
    }
    let svc = tf.resource("google_cloud_run_v2_service", "this");
    assert_eq!(src_at(svc.body, &["template", "containers", "command"]), "[var.binary]");
    assert_none("binaries", bad);
}

/// The route table of docs/routes.md (service, method, path, caller), the
/// table `docs::routes` checks against the routers.
fn route_table() -> Vec<[String; 4]> {
    include_str!("../../docs/routes.md")
        .lines()
        .filter(|l| l.starts_with('|'))
        .skip(2)
        .map(|line| {
            let cells: Vec<&str> = line.trim_matches('|').split('|').map(str::trim).collect();
            let (method, path) = cells[1].trim_matches('`').split_once(' ').expect("`METHOD /path`");
            [cells[0].to_owned(), method.to_owned(), path.to_owned(), cells[2].to_owned()]
        })
        .collect()
}

/// The route-table service a terraform service name serves.
fn service_named(tf_service: &str) -> &'static str {
    Service::ALL.iter().find(|s| tf_name(**s) == tf_service).map_or("?", |s| s.as_str())
}

#[test]
fn contract_every_route_a_queue_the_scheduler_or_pubsub_calls_is_its_targets() {
    let tf = tf();
    let locals = tf.locals(PLATFORM);
    let table = route_table();
    let served =
        |service: &str, path: &str| table.iter().any(|r| r[0] == service && r[1] == "POST" && r[2] == path);
    let mut bad = Vec::new();
    // Queues: exactly QUEUE_ROUTES, each to the host of the service that serves its route.
    let queues = resolve_object(attr(call(tf, "queues"), "queues").expect("queues"), &locals);
    let names: BTreeSet<&str> = queues.keys().map(String::as_str).collect();
    let code: BTreeSet<&str> = QUEUE_ROUTES.iter().map(|q| q.queue).collect();
    assert_eq!(names, code, "one queue per purpose, named as the code names them");
    for q in QUEUE_ROUTES {
        let Some(Expression::Object(spec)) = queues.get(q.queue) else { continue };
        let host = spec.iter().find(|(k, _)| key_of(k) == "host").map(|(_, v)| src(v)).unwrap_or_default();
        let want = format!("trimprefix(local.url[\"{}\"], \"https://\")", tf_name(q.service));
        if host != want {
            bad.push(format!("queue {}: host {host}, want {want}", q.queue));
        }
        if !served(q.service.as_str(), q.path) {
            bad.push(format!("queue {}: {} does not serve {}", q.queue, q.service, q.path));
        }
    }
    // Scheduler jobs: exactly the table's callers, each to its row's service and path.
    let jobs = resolve_object(attr(call(tf, "scheduler"), "jobs").expect("jobs"), &locals);
    let callers: BTreeMap<String, &[String; 4]> = table
        .iter()
        .flat_map(|r| {
            r[3].split(", ")
                .filter_map(|c| c.strip_prefix("Cloud Scheduler job "))
                .map(move |j| (j.to_owned(), r))
        })
        .collect();
    assert_eq!(
        jobs.keys().collect::<BTreeSet<_>>(),
        callers.keys().collect::<BTreeSet<_>>(),
        "the table's scheduler jobs"
    );
    for (job, row) in &callers {
        let Some(Expression::Object(spec)) = jobs.get(job) else { continue };
        let uri = spec.iter().find(|(k, _)| key_of(k) == "uri").map(|(_, v)| src(v)).unwrap_or_default();
        let target = service_calls(tf).into_keys().find(|s| service_named(s) == row[0]).unwrap_or_default();
        let want = format!("${{local.url[\"{target}\"]}}{}", row[2]);
        if uri != want {
            bad.push(format!("scheduler job {job}: {uri}, want {want}"));
        }
    }
    // The push subscription: to the route the table says Pub/Sub calls.
    let pubsub: Vec<&[String; 4]> =
        table.iter().filter(|r| r[3].starts_with("Pub/Sub subscription")).collect();
    assert_eq!(pubsub.len(), 1, "one pushed route");
    let endpoint = src_at(call(tf, "events"), &["push_endpoint"]);
    let want = format!("${{local.url[\"{}\"]}}{}", pubsub[0][0], pubsub[0][2]);
    if endpoint != want {
        bad.push(format!("push endpoint {endpoint}, want {want}"));
    }
    assert_eq!(
        src_at(tf.resource("google_pubsub_subscription", "push").body, &["push_config", "push_endpoint"]),
        "var.push_endpoint"
    );
    assert_none("routes", bad);
}

/// One rule of the entry's URL map: how it matches and where it sends.
struct EntryRule {
    service: String,
    kind: String,
    path: String,
}

/// `path` against a URL-map path template: `{name=*}` (or `*`) is one
/// non-empty segment, `{name=**}` (or `**`) the rest; anything else literal.
fn template_matches(template: &str, path: &str) -> bool {
    let (t, p): (Vec<&str>, Vec<&str>) = (template.split('/').collect(), path.split('/').collect());
    let one = |s: &str| s == "*" || (s.starts_with('{') && s.ends_with("=*}"));
    let rest = |s: &str| s == "**" || (s.starts_with('{') && s.ends_with("=**}"));
    if let Some(i) = t.iter().position(|s| rest(s)) {
        return p.len() > i
            && t[..i].iter().zip(&p).all(|(t, p)| if one(t) { !p.is_empty() } else { t == p });
    }
    t.len() == p.len() && t.iter().zip(&p).all(|(t, p)| if one(t) { !p.is_empty() } else { t == p })
}

impl EntryRule {
    fn matches(&self, path: &str) -> bool {
        match self.kind.as_str() {
            "prefix" => path.starts_with(&self.path),
            "full" => path == self.path,
            "template" => template_matches(&self.path, path),
            other => panic!("an entry route matches by prefix, full or template, not {other}"),
        }
    }
}

/// Where the entry sends `path`: a service's terraform name, or `None` when
/// the entry refuses it.
fn entry_target(tf: &Tf, path: &str) -> Option<String> {
    let refused = string_list(tf.default_of("modules/entry", "refused_prefixes"), &BTreeMap::new());
    if refused.iter().any(|p| path.starts_with(p.as_str())) {
        return None;
    }
    let locals = tf.locals(PLATFORM);
    let Some(Expression::Array(rows)) = locals.get("entry_routes").copied() else {
        panic!("local.entry_routes is a list literal");
    };
    let rules = rows.iter().map(|row| {
        let Expression::Object(o) = row else { panic!("an entry route is an object") };
        let get = |k: &str| {
            o.iter().find(|(key, _)| key_of(key) == k).and_then(|(_, v)| lit(v)).unwrap_or_default()
        };
        EntryRule { service: get("service"), kind: get("match"), path: get("path") }
    });
    let default =
        lit(attr(call(tf, "entry"), "default_service").expect("a default service")).expect("a literal");
    Some(rules.into_iter().find(|r| r.matches(path)).map_or(default, |r| r.service))
}

#[test]
fn contract_the_entry_sends_every_public_route_to_its_service() {
    let tf = tf();
    let entry = call(tf, "entry");
    assert_eq!(src_at(entry, &["routes"]), "local.entry_routes");
    assert_eq!(
        src_at(tf.resource("google_compute_url_map", "entry").body, &["host_rule", "hosts"]),
        "[\"*\"]",
        "every host goes through the refusals"
    );
    let table = route_table();
    let sample = |path: &str| {
        path.split('/')
            .map(|s| if s.starts_with('{') { "x-1@example.com" } else { s })
            .collect::<Vec<_>>()
            .join("/")
    };
    let mut bad = Vec::new();
    for row in &table {
        let [service, method, path, caller] = row;
        let path = sample(path);
        let target = entry_target(tf, &path);
        if path.starts_with("/internal/") || caller == "Prometheus" {
            if let Some(t) = target {
                bad.push(format!("{method} {path} ({caller}) reaches {t} from outside"));
            }
            continue;
        }
        if !["tenant", "operator"].contains(&caller.as_str()) {
            continue;
        }
        // Routes every service serves (health, manifest, build info) are submit's.
        let shared = table.iter().any(|r| r[0] == "submit" && r[1] == *method && r[2] == row[2]);
        let want = if shared { "submit-api" } else { tf_name(service_of(service)) };
        if target.as_deref() != Some(want) {
            bad.push(format!(
                "{method} {} ({caller}): the entry sends it to {target:?}, {want} serves it",
                row[2]
            ));
        }
    }
    assert_none("the entry's routes", bad);
    // The refusal is a 404 for every request, ahead of every route.
    let url_map = tf.resource("google_compute_url_map", "entry");
    let first = blocks(nested(url_map.body, &["path_matcher"]).expect("a path matcher"), "route_rules");
    let refusal = first.first().expect("a first route rule");
    assert_eq!(src_at(refusal, &["priority"]), "1");
    let refused =
        refusal.blocks().find(|b| b.identifier() == "dynamic").map(|b| src_at(b.body(), &["for_each"]));
    assert_eq!(refused.as_deref(), Some("var.refused_prefixes"), "the refusal matches the refused prefixes");
    assert!(attr(entry, "refused_prefixes").is_none(), "the platform keeps the entry's refusals");
    let abort = nested(refusal, &["route_action", "fault_injection_policy", "abort"]).expect("an abort");
    assert_eq!(
        (src_at(abort, &["http_status"]), src_at(abort, &["percentage"])),
        ("404".into(), "100".into())
    );
}

/// The service a route-table row names.
fn service_of(name: &str) -> Service {
    *Service::ALL.iter().find(|s| s.as_str() == name).unwrap_or_else(|| panic!("no service {name}"))
}

#[test]
fn contract_queue_settings_are_the_codes() {
    let tf = tf();
    let locals = tf.locals(PLATFORM);
    let queues = resolve_object(attr(call(tf, "queues"), "queues").expect("queues"), &locals);
    let mut bad = Vec::new();
    for cfg in mapi_platform::queue_configs().expect("queue configs") {
        let name = cfg.name.as_str();
        let Some(Expression::Object(spec)) = queues.get(name) else {
            bad.push(format!("no queue {name}"));
            continue;
        };
        let get =
            |k: &str| spec.iter().find(|(key, _)| key_of(key) == k).map(|(_, v)| src(v)).unwrap_or_default();
        let attempts =
            if cfg.retry.max_attempts == 0 { "-1".to_owned() } else { cfg.retry.max_attempts.to_string() };
        let checks = [
            (
                "max_concurrent_dispatches",
                get("max_concurrent_dispatches") == cfg.max_concurrent_dispatches.to_string(),
            ),
            ("max_attempts", get("max_attempts") == attempts),
            ("min_backoff", seconds(&get("min_backoff")) == cfg.retry.min_backoff),
            ("max_backoff", seconds(&get("max_backoff")) == cfg.retry.max_backoff),
            ("max_doublings", get("max_doublings") == cfg.retry.max_doublings.to_string()),
        ];
        for (what, ok) in checks {
            if !ok {
                bad.push(format!("queue {name}: {what} is {}, the code's {cfg:?}", get(what)));
            }
        }
        // The service the queue delivers to answers within its request timeout.
        let service = mapi_platform::service_of_queue(name).expect("a served queue");
        let timeout = attr(service_call(tf, tf_name(service)), "timeout")
            .map_or_else(|| src(tf.default_of("modules/service", "timeout")), src);
        if seconds(&timeout) <= cfg.dispatch_deadline {
            bad.push(format!(
                "{}: request timeout {timeout} is not above {name}'s dispatch deadline",
                tf_name(service)
            ));
        }
    }
    // What submit-tasks is configured with fits the deadlines of the queues that call it.
    let env = start_env(tf, "submit-tasks");
    let config =
        mapi_platform::Config::read(&|k| env.get(k).cloned(), Service::Tasks.uses()).expect("config");
    let deadline = |q: &str| {
        mapi_platform::queue_configs()
            .expect("configs")
            .into_iter()
            .find(|c| c.name.as_str() == q)
            .expect("queue")
            .dispatch_deadline
    };
    if config.jobs.item_timeout >= deadline(mapi_jobs::tasks::ITEMS_QUEUE) {
        bad.push("submit-tasks: the item timeout is not below the item queue's dispatch deadline".into());
    }
    let wait = config.cloudrun.as_ref().expect("cloudrun").max_submit_wait;
    if wait >= deadline(mapi_platform::DISPATCH_QUEUE) {
        bad.push(format!(
            "submit-tasks: MAPI_CLOUDRUN_MAX_SUBMIT_WAIT_S {wait:?} is not below dispatch's deadline"
        ));
    }
    assert_none("queue settings", bad);
}

#[test]
fn contract_the_job_inventory_is_the_executors() {
    let tf = tf();
    let jobs = "modules/jobs";
    assert_eq!(
        src(tf.default_of(jobs, "job_template")),
        mapi_cloudrun::settings::JOB_TEMPLATE.default_text()
    );
    let locals = tf.locals(jobs);
    let cpu_jobs = locals.get("cpu_jobs").map(|e| src(e)).unwrap_or_default();
    assert!(
        cpu_jobs.contains(
            "replace(replace(replace(var.job_template, \"{env}\", var.env), \"{base}\", base), \"{class}\", lower(class))"
        ),
        "Job ids are the template with env, base and lower-case class: {cpu_jobs}"
    );
    let gpu_id = locals.get("gpu_job_id").map(|e| src(e)).unwrap_or_default();
    assert_eq!(
        gpu_id,
        "replace(replace(replace(var.job_template, \"{env}\", var.env), \"{base}\", var.gpu_base), \"{class}\", \"gpu\")"
    );
    assert_eq!(src(tf.default_of(jobs, "gpu_base")), mapi_cloudrun::inventory::GPU_BASE);
    // The classes and their sizes.
    let classes = resolve_object(locals.get("classes").expect("local.classes"), &locals);
    let size = |e: &Expression| {
        let o = resolve_object(e, &locals);
        (o.get("cpu").map(src).unwrap_or_default(), o.get("memory").map(src).unwrap_or_default())
    };
    let cpu: BTreeSet<&str> = classes.keys().map(String::as_str).collect();
    let want: BTreeSet<&str> = mapi_cloudrun::inventory::CPU_CLASSES.iter().map(|c| c.as_str()).collect();
    assert_eq!(cpu, want, "one Job per CPU class");
    for class in mapi_cloudrun::inventory::CPU_CLASSES {
        let (c, m) = size(&classes[class.as_str()]);
        assert_eq!((c, m), (class.vcpu().to_string(), format!("{}Gi", class.memory_gib())), "class {class}");
    }
    let gpu = resolve_object(locals.get("gpu").expect("local.gpu"), &locals);
    let g = mapi_domain::ResourceClass::GPU;
    let got: Vec<String> =
        ["cpu", "memory", "gpus"].iter().map(|k| gpu.get(*k).map(src).unwrap_or_default()).collect();
    assert_eq!(
        got,
        [g.vcpu().to_string(), format!("{}Gi", g.memory_gib()), g.gpus().to_string()],
        "the GPU class"
    );
    assert_eq!(gpu.get("accelerator").map(src).as_deref(), Some("nvidia-l4"));
    let gpu_limits = src_at(
        tf.resource("google_cloud_run_v2_job", "gpu").body,
        &["template", "template", "containers", "resources", "limits"],
    );
    assert!(gpu_limits.contains("\"nvidia.com/gpu\" = local.gpu.gpus"), "{gpu_limits}");
    // The bases: every base the executor places on.
    let bases: BTreeSet<String> = string_list(tf.default_of(jobs, "bases"), &locals).into_iter().collect();
    let defaults = mapi_cloudrun::Settings::new("p");
    let code_bases: BTreeSet<String> =
        defaults.plugin_bases.values().cloned().chain([defaults.default_base.clone()]).collect();
    assert_eq!(bases, code_bases);
    // The ids, for each environment, with and without the GPU Job.
    for env in ENVS {
        let env_name = src(tf.tfvar(env, "env"));
        for gpu_jobs in [false, true] {
            let mut ours: BTreeSet<String> = BTreeSet::new();
            let template = src(tf.default_of(jobs, "job_template"));
            for base in &bases {
                for class in &cpu {
                    ours.insert(
                        template
                            .replace("{env}", &env_name)
                            .replace("{base}", base)
                            .replace("{class}", &class.to_lowercase()),
                    );
                }
            }
            if gpu_jobs {
                ours.insert(
                    template
                        .replace("{env}", &env_name)
                        .replace("{base}", mapi_cloudrun::inventory::GPU_BASE)
                        .replace("{class}", "gpu"),
                );
            }
            let mut settings = mapi_cloudrun::Settings::new("p");
            settings.env = env_name.clone();
            settings.gpu_jobs = gpu_jobs;
            let theirs: BTreeSet<String> = mapi_cloudrun::inventory::Inventory::new(&settings)
                .jobs()
                .iter()
                .map(|j| j.id.clone())
                .collect();
            assert_eq!(ours, theirs, "{env}, gpu_jobs {gpu_jobs}");
        }
    }
    // The executor is configured with the same env, project and GPU switch as the inventory.
    let platform = call(tf, "jobs");
    assert_eq!(src_at(platform, &["env"]), "var.env");
    assert_eq!(src_at(platform, &["project_id"]), "var.exec_project_id");
    assert_eq!(src_at(platform, &["gpu_jobs"]), "var.gpu_jobs");
    let executor = service_env(tf, "submit-tasks");
    let e = |k: &str| executor.get(k).map(src).unwrap_or_default();
    assert_eq!(e(mapi_cloudrun::settings::ENV.name), "var.env");
    assert_eq!(e(mapi_cloudrun::settings::PROJECT.name), "var.exec_project_id");
    assert_eq!(e(mapi_cloudrun::settings::GPU_JOBS.name), "tostring(var.gpu_jobs)");
    assert_eq!(e(mapi_cloudrun::settings::REGION.name), src_at(platform, &["region"]));
    assert!(
        !executor.contains_key(mapi_cloudrun::settings::JOB_TEMPLATE.name),
        "the template is the default both sides"
    );
}

#[test]
fn contract_jobs_take_their_bootstrap_where_the_platform_writes_it() {
    let tf = tf();
    let url = tf.locals("modules/jobs").get("bootstrap_url").map(|e| src(e)).unwrap_or_default();
    let backend = mapi_platform::config::ObjectsBackend::Gcs {
        data: mapi_gcs::Settings::new("data"),
        bootstrap_bucket: "${var.bootstrap_bucket}".into(),
    };
    assert_eq!(url, backend.bootstrap_url_template("https://unused"));
    for j in tf.resources("google_cloud_run_v2_job") {
        let env = nested(j.body, &["template", "template", "containers", "env"]).expect("env");
        assert_eq!(src_at(env, &["name"]), "MAPI_BOOTSTRAP_URL", "{}", j.id());
        assert_eq!(src_at(env, &["value"]), "local.bootstrap_url", "{}", j.id());
    }
    // The bucket the Jobs read is the one the dispatcher writes.
    assert_eq!(src_at(call(tf, "jobs"), &["bootstrap_bucket"]), "module.data.bootstrap_bucket");
    let objects = service_env(tf, "submit-tasks");
    assert_eq!(
        objects.get(vars::GCS_BOOTSTRAP_BUCKET.name).map(src).as_deref(),
        Some("module.data.bootstrap_bucket")
    );
    let bucket = tf.resource("google_storage_bucket", "bootstrap");
    assert_eq!(
        src_at(bucket.body, &["name"]),
        "${var.data_bucket}-bootstrap",
        "the code's derived default too"
    );
}

#[test]
fn contract_the_index_resources_are_the_index_file_of_the_codes_indexes() {
    let tf = tf();
    let locals = tf.locals("modules/data");
    assert_eq!(
        locals.get("indexes").map(|e| src(e)).unwrap_or_default(),
        "jsondecode(file(\"${path.module}/../../firestore.indexes.json\")).indexes"
    );
    assert!(root().join("modules/data/../../firestore.indexes.json").is_file(), "the path resolves");
    let index = tf.resource("google_firestore_index", "this");
    assert!(
        src_at(index.body, &["for_each"]).contains("for idx in local.indexes"),
        "one resource per entry of the file"
    );
    assert_eq!(src_at(index.body, &["collection"]), "each.value.collectionGroup");
    assert_eq!(src_at(index.body, &["query_scope"]), "each.value.queryScope");
    let fields = blocks(index.body, "dynamic");
    assert_eq!(fields.len(), 1);
    assert_eq!(src_at(fields[0], &["for_each"]), "each.value.fields");
    assert_eq!(src_at(fields[0], &["content", "field_path"]), "fields.value.fieldPath");
    assert_eq!(src_at(fields[0], &["content", "order"]), "try(fields.value.order, null)");
    assert_eq!(src_at(fields[0], &["content", "array_config"]), "try(fields.value.arrayConfig, null)");
    let file: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(root().join("firestore.indexes.json")).expect("index file"),
    )
    .expect("json");
    let expected = mapi_firestore::wire::indexes_file(
        &mapi_platform::indexes(),
        &mapi_platform::contains_indexes(),
        &mapi_platform::unindexed(),
    );
    assert_eq!(
        file["indexes"], expected["indexes"],
        "the file holds every composite index the adapter needs"
    );
    assert_eq!(file["fieldOverrides"], expected["fieldOverrides"], "and every field exempt from indexing");
    let field = tf.resource("google_firestore_field", "unindexed");
    assert!(
        src_at(field.body, &["for_each"]).contains("for f in local.field_overrides"),
        "one resource per override of the file"
    );
    assert_eq!(src_at(field.body, &["collection"]), "each.value.collectionGroup");
    assert_eq!(src_at(field.body, &["field"]), "each.value.fieldPath");
    assert_eq!(src_at(field.body, &["database"]), "google_firestore_database.this.name");
    let config = blocks(field.body, "index_config");
    assert_eq!(config.len(), 1, "an index_config block");
    let empty = config[0].attributes().next().is_none() && config[0].blocks().next().is_none();
    assert!(empty, "empty: the field has no single-field index");
    assert_eq!(src_at(index.body, &["database"]), "google_firestore_database.this.name");
    let db = tf.resource("google_firestore_database", "this");
    assert_eq!(src_at(db.body, &["name"]), "var.database");
    assert_eq!(
        src(tf.default_of("modules/data", "database")),
        mapi_firestore::settings::DATABASE.default_text()
    );
}

#[test]
fn contract_push_and_task_identities_match_what_the_services_check() {
    let tf = tf();
    let push = service_env(tf, "push-events");
    let p = |k: &str| push.get(k).map(src).unwrap_or_default();
    let events = call(tf, "events");
    assert_eq!(p(vars::PUBSUB_PUSH_AUDIENCE.name), src_at(events, &["push_audience"]));
    assert_eq!(p(vars::PUBSUB_PUSH_SERVICE_ACCOUNT.name), "module.events.push_service_account_email");
    assert_eq!(p(vars::PUBSUB_PUSH_SUBSCRIPTIONS.name), "module.events.push_subscription_id");
    let outputs: BTreeMap<String, String> = tf
        .blocks("output")
        .filter(|(f, _)| f.path.starts_with("modules/events/"))
        .map(|(_, b)| (label(b, 0), src_at(b.body(), &["value"])))
        .collect();
    assert_eq!(outputs["push_service_account_email"], "google_service_account.push.email");
    assert_eq!(outputs["push_subscription_id"], "google_pubsub_subscription.push.id");
    let sub = tf.resource("google_pubsub_subscription", "push");
    assert_eq!(
        src_at(sub.body, &["push_config", "oidc_token", "service_account_email"]),
        "google_service_account.push.email"
    );
    assert_eq!(src_at(sub.body, &["push_config", "oidc_token", "audience"]), "var.push_audience");
    // Cloud Tasks and Cloud Scheduler: one account and one audience, which
    // every service that checks internal calls is configured with and accepts.
    let audience = src_at(call(tf, "queues"), &["audience"]);
    assert_eq!(src_at(call(tf, "scheduler"), &["audience"]), audience);
    assert_eq!(src_at(call(tf, "scheduler"), &["service_account_email"]), "module.queues.invoker_email");
    let locals = tf.locals(PLATFORM);
    let mut bad = Vec::new();
    let called: BTreeSet<&str> =
        QUEUE_ROUTES.iter().map(|q| tf_name(q.service)).chain(["submit-tasks", "reconcile-tick"]).collect();
    for name in service_calls(tf).into_keys() {
        let env = service_env(tf, &name);
        let e = |k: &str| env.get(k).map(src);
        if let Some(a) = e(mapi_cloudtasks::settings::AUDIENCE.name) {
            if a != audience {
                bad.push(format!("{name}: task audience {a}"));
            }
            if e(mapi_cloudtasks::settings::SERVICE_ACCOUNT.name).as_deref()
                != Some("module.queues.invoker_email")
            {
                bad.push(format!("{name}: task account"));
            }
        }
        if called.contains(name.as_str()) {
            let accepted = attr(service_call(tf, &name), "custom_audiences")
                .map(|e| string_list(e, &locals))
                .unwrap_or_default();
            if !accepted.contains(&audience) {
                bad.push(format!("{name} is called with {audience} but does not accept it"));
            }
        }
    }
    assert_none("identities", bad);
}

/// Sign-in on a deployment configured exactly as `envs/prod` configures it:
/// the sessions settings terraform gives the API are the tfvars' values,
/// the platform reads Google's published keys for Google's issuer, and ID
/// tokens shaped exactly like Google's (either spelling of its issuer, a
/// person's `sub`, `azp`, `hd`, `email_verified`, `at_hash`) open a session
/// for each client the tfvars name: the console's, the CLI's and gcloud's.
/// A token for any other client, or with an unverified address, does not.
#[tokio::test]
async fn contract_google_id_tokens_of_the_prod_clients_sign_a_person_in() {
    use mapi_tests::google::{FakeGoogle, with};
    use serde_json::json;
    let tf = tf();
    let name = tf_name(Service::Submit);
    let wired = service_env(tf, name);
    for (key, var) in [
        (vars::OIDC_ISSUER.name, "var.oidc_issuer"),
        (vars::OIDC_AUDIENCE.name, "var.oidc_audience"),
        (vars::OIDC_CLI_AUDIENCES.name, "join(\",\", var.oidc_cli_audiences)"),
    ] {
        assert_eq!(wired.get(key).map(src).as_deref(), Some(var), "{name}: {key}");
    }
    let issuer = lit(tf.tfvar("prod", "oidc_issuer")).expect("a literal issuer");
    let console = lit(tf.tfvar("prod", "oidc_audience")).expect("a literal client id");
    let clients: Vec<String> = match tf.tfvar("prod", "oidc_cli_audiences") {
        Expression::Array(a) => a.iter().map(|e| lit(e).expect("a literal client id")).collect(),
        other => panic!("oidc_cli_audiences is a list, not {}", src(other)),
    };
    assert!(clients.contains(&"32555940559.apps.googleusercontent.com".to_owned()), "gcloud's client");
    let mut env = start_env(tf, name);
    env.insert(vars::OIDC_ISSUER.name.into(), issuer.clone());
    env.insert(vars::OIDC_AUDIENCE.name.into(), console.clone());
    env.insert(vars::OIDC_CLI_AUDIENCES.name.into(), clients.join(","));
    let config =
        mapi_platform::Config::read(&|k| env.get(k).cloned(), Service::Submit.uses()).expect("config");
    assert_eq!(config.session_jwks_url().as_deref(), Some(mapi_oidc::GOOGLE_JWKS_URL), "Google's keys");

    // The same settings, with Google's key set served on 127.0.0.1.
    let google = FakeGoogle::start().await;
    env.insert(vars::OIDC_JWKS_URL.name.into(), google.keys.url.clone());
    let config =
        mapi_platform::Config::read(&|k| env.get(k).cloned(), Service::Submit.uses()).expect("config");
    let clock: std::sync::Arc<dyn mapi_clock::Clock> = std::sync::Arc::new(mapi_clock::SystemClock);
    let verifier = mapi_platform::session_verifier(&config, clock.clone()).expect("a session verifier");
    let now = clock.now().as_secs();
    let person = |client: &str, iss: &str| {
        json!({
            "iss": iss, "azp": client, "aud": client, "sub": "110169484474386276334",
            "hd": "example.com", "email": "Ana@Example.com", "email_verified": true,
            "at_hash": "HK6E_P6Dh8Y93mRNtsDB1Q", "name": "Ana", "iat": now, "exp": now + 3600,
        })
    };
    for client in std::iter::once(&console).chain(&clients) {
        for iss in mapi_oidc::GOOGLE_ISSUERS {
            let claims = verifier.verify(&google.token(&person(client, iss))).await;
            let claims = claims.unwrap_or_else(|e| panic!("{client} via {iss}: {e}"));
            assert_eq!((claims.email.as_str(), claims.aud.as_str()), ("ana@example.com", client.as_str()));
        }
    }
    let other = person("1234-other.apps.googleusercontent.com", &issuer);
    assert_eq!(
        verifier.verify(&google.token(&other)).await.map(|_| ()),
        Err(mapi_oidc::OidcError::WrongAudience)
    );
    let unverified = with(&person(&console, &issuer), &[("email_verified", json!(false))]);
    assert_eq!(
        verifier.verify(&google.token(&unverified)).await.map(|_| ()),
        Err(mapi_oidc::OidcError::EmailNotVerified)
    );
}

/// A person signs in to the console and to the CLI of a platform whose
/// session settings are exactly what envs/prod gives admin (issuer, the
/// console's web client, the CLI's clients), against a stand-in of Google's
/// sign-in that refuses what Google refuses: the console's code flow (PKCE,
/// the client secret, Google's token response) ends in a console session,
/// and an ID token Google gives the CLI's desktop client opens an API
/// session. The setting prod had before (`oidc_audience = "mapi"`) is
/// stopped by Google at the first step: no such OAuth client.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn contract_a_person_signs_in_to_the_console_and_the_cli_of_a_platform_configured_as_prod() {
    use mapi_oidc::code_flow::{self, Client, Request};
    use mapi_tests::google_sign_in::{GoogleSignIn, OAuthClient, Person};
    let tf = tf();
    let wired = service_env(tf, tf_name(Service::Admin));
    for key in [vars::OIDC_ISSUER.name, vars::OIDC_AUDIENCE.name, vars::OIDC_CLI_AUDIENCES.name] {
        assert!(wired.contains_key(key), "admin (the console) is given {key}");
    }
    let issuer = lit(tf.tfvar("prod", "oidc_issuer")).expect("a literal issuer");
    let console = lit(tf.tfvar("prod", "oidc_audience")).expect("a literal client id");
    let clis: Vec<String> = match tf.tfvar("prod", "oidc_cli_audiences") {
        Expression::Array(a) => a.iter().map(|e| lit(e).expect("a literal client id")).collect(),
        other => panic!("oidc_cli_audiences is a list, not {}", src(other)),
    };
    let desktop = clis.first().expect("the CLI's own client").clone();
    let person = Person {
        email: "ana@example.com".into(),
        sub: "110169484474386276334".into(),
        hd: Some("example.com".into()),
    };
    let loopback_client = OAuthClient {
        id: desktop.clone(),
        secret: "GOCSPX-desktop".into(),
        redirect_uris: vec![mapi_tests::google_sign_in::ANY_LOOPBACK.into()],
    };
    let google = GoogleSignIn::start(vec![loopback_client], person).await;
    let p = mapi_tests::TestPlatform::start_with(
        &[
            (vars::OIDC_ISSUER.name, &issuer),
            (vars::OIDC_AUDIENCE.name, &console),
            (vars::OIDC_CLI_AUDIENCES.name, &clis.join(",")),
            ("MAPI_OIDC_CLIENT_SECRET", "GOCSPX-console"),
            ("MAPI_OIDC_CLI_CLIENT_SECRET", "GOCSPX-desktop"),
            (vars::OIDC_JWKS_URL.name, &google.keys.url),
            (vars::OIDC_DISCOVERY_URL.name, &google.discovery_url()),
            ("MAPI_OPERATOR_EMAILS", "ana@example.com"),
        ],
        mapi_tests::Options::default(),
    )
    .await;
    let public = p.platform.url.clone();
    google.register(OAuthClient {
        id: console.clone(),
        secret: "GOCSPX-console".into(),
        redirect_uris: vec![format!("{public}/console/callback")],
    });
    let browser =
        reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().expect("client");
    let location = |r: &reqwest::Response| {
        r.headers()
            .get(reqwest::header::LOCATION)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned()
    };
    let cookie_of = |r: &reqwest::Response, name: &str| {
        r.headers()
            .get_all(reqwest::header::SET_COOKIE)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .find(|c| c.starts_with(&format!("{name}=")))
            .and_then(|c| c.split(';').next())
            .map(str::to_owned)
    };

    // The console: to Google with the web client, back with a code, a session.
    let start = browser.get(p.url("/console/sign-in")).send().await.expect("sign-in");
    assert_eq!(start.status(), 303);
    let to_google = location(&start);
    assert!(to_google.starts_with(&format!("{}/o/oauth2/v2/auth?", google.base)), "{to_google}");
    assert!(to_google.contains(&format!("client_id={}", code_flow::encode(&console))), "{to_google}");
    let login_cookie = cookie_of(&start, "mapi_console_login").expect("the sign-in's cookie");
    let consent = browser.get(&to_google).send().await.expect("google");
    assert_eq!(consent.status(), 302, "{:?}", consent.text().await);
    let back = location(&consent);
    assert!(back.starts_with(&format!("{public}/console/callback?")), "{back}");
    let done =
        browser.get(&back).header(reqwest::header::COOKIE, &login_cookie).send().await.expect("callback");
    let status = done.status();
    let session = cookie_of(&done, "mapi_console");
    assert_eq!(status, 303, "{:?}", done.text().await);
    let session = session.expect("a console session");
    let home =
        browser.get(p.url("/console")).header(reqwest::header::COOKIE, &session).send().await.expect("home");
    assert_eq!(home.status(), 200);
    assert!(home.text().await.expect("page").contains("ana@example.com"), "the console knows who signed in");

    // The CLI: a desktop client's ID token from Google opens an API session.
    let discovery = code_flow::discover(&browser, &google.discovery_url()).await.expect("discovery");
    let request = Request::new().expect("request");
    let loopback = "http://127.0.0.1:53682/";
    let asked =
        browser.get(request.authorization_url(&discovery, &desktop, loopback)).send().await.expect("google");
    let code = location(&asked)
        .split(['?', '&'])
        .find_map(|kv| kv.strip_prefix("code="))
        .expect("a code")
        .to_owned();
    let code = percent_decode(&code);
    let client = Client { id: &desktop, secret: Some("GOCSPX-desktop"), redirect_uri: loopback };
    let id_token =
        code_flow::exchange(&browser, &discovery, client, &code, &request.verifier).await.expect("a token");
    let (s, session) = p.call(&id_token, reqwest::Method::POST, "/v1/sessions", None).await;
    assert_eq!(s, 200, "{session}");
    assert_eq!(google.issued(), 2);

    // What prod configured before: Google knows no OAuth client `mapi`.
    let stale = request.authorization_url(&discovery, "mapi", &format!("{public}/console/callback"));
    let refused = browser.get(stale).send().await.expect("google");
    assert_eq!(refused.status(), 401);
    assert!(refused.text().await.expect("page").contains("invalid_client"));
}

/// `%XX` escapes decoded (a code Google sends back may carry `/`).
fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match (bytes[i], bytes.get(i + 1..i + 3)) {
            (b'%', Some(hex)) => {
                out.push(u8::from_str_radix(std::str::from_utf8(hex).expect("hex"), 16).expect("hex"));
                i += 3;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8(out).expect("utf-8")
}
