//! Cloud Logging structured logs: one JSON object per line on stdout, with
//! `severity`, `message`, `time`, `target`, `service`, the fields of the event
//! and of every span around it, and the `logging.googleapis.com/trace*` keys
//! that tie a line to its request's trace.
//!
//! Span fields are kept as JSON values in span extensions by [`SpanFieldsLayer`]
//! and read back by [`CloudLogFormat`] when an event is formatted. Spans carry
//! the trace through fields named [`TRACE_ID`], [`SPAN_ID`] and [`TRACE_SAMPLED`];
//! an event field named [`HTTP_REQUEST`] holding a JSON object (as a string) is
//! emitted as that object, which is how access logs carry Cloud Logging's
//! `httpRequest`.

use std::fmt;
use std::sync::{Arc, Once};

use mapi_clock::{Clock, SystemClock};

use crate::http::BuildInfo;
use serde_json::Value;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields, MakeWriter};
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::{EnvFilter, Layer};

/// Span field holding the trace id (32 hex digits).
pub const TRACE_ID: &str = "trace_id";
/// Span field holding the span id (16 hex digits).
pub const SPAN_ID: &str = "span_id";
/// Span field holding whether the trace is sampled.
pub const TRACE_SAMPLED: &str = "trace_sampled";
/// Event field holding a Cloud Logging `HttpRequest` serialized as JSON.
pub const HTTP_REQUEST: &str = "httpRequest";

const TRACE_KEY: &str = "logging.googleapis.com/trace";
const SPAN_KEY: &str = "logging.googleapis.com/spanId";
const SAMPLED_KEY: &str = "logging.googleapis.com/trace_sampled";
/// Cloud Logging's labels of an entry: the build that wrote it.
const LABELS_KEY: &str = "logging.googleapis.com/labels";
/// Keys the formatter writes itself; event or span fields with these names
/// are written as `fields.<name>` instead.
const RESERVED: [&str; 8] =
    ["severity", "time", "target", "service", TRACE_KEY, SPAN_KEY, SAMPLED_KEY, LABELS_KEY];

static INIT: Once = Once::new();

/// Installs the global subscriber writing Cloud Logging JSON lines to stdout,
/// filtered by `filter` (an `EnvFilter` directive; an invalid one falls back
/// to `info` with a warning). Only the first call has any effect.
pub fn init_logging(service: &str, project_id: Option<&str>, filter: &str) {
    init_logging_to(service, project_id, filter, std::io::stdout);
}

/// [`init_logging`] to another writer: `mapi dev` logs to stderr and keeps
/// stdout for what a script reads (its URL).
pub fn init_logging_to<W>(service: &str, project_id: Option<&str>, filter: &str, writer: W)
where
    W: for<'w> MakeWriter<'w> + Send + Sync + 'static,
{
    install(CloudLogFormat::new(service, project_id, Arc::new(SystemClock)), filter, writer);
}

/// [`init_logging`] with every line labelled with `build` (its version,
/// git commit and build time), as a deployed service logs.
pub fn init_logging_labelled(service: &str, project_id: Option<&str>, filter: &str, build: &BuildInfo) {
    let format = CloudLogFormat::new(service, project_id, Arc::new(SystemClock)).labelled(build.labels());
    install(format, filter, std::io::stdout);
}

fn install<W>(format: CloudLogFormat, filter: &str, writer: W)
where
    W: for<'w> MakeWriter<'w> + Send + Sync + 'static,
{
    INIT.call_once(|| {
        let (env_filter, invalid) = match EnvFilter::try_new(filter) {
            Ok(f) => (f, None),
            Err(e) => (EnvFilter::new(crate::config::LOG.default_text()), Some(e)),
        };
        if tracing::subscriber::set_global_default(subscriber(format, env_filter, writer)).is_ok()
            && let Some(e) = invalid
        {
            tracing::warn!(filter, error = %e, "invalid log filter, using `info`");
        }
    });
}

/// The subscriber [`init_logging`] installs, writing to `writer`.
pub fn subscriber<W>(format: CloudLogFormat, filter: EnvFilter, writer: W) -> impl Subscriber + Send + Sync
where
    W: for<'w> MakeWriter<'w> + Send + Sync + 'static,
{
    tracing_subscriber::fmt()
        .event_format(format)
        .with_env_filter(filter)
        .with_writer(writer)
        .finish()
        .with(SpanFieldsLayer)
}

/// Formats each event as one Cloud Logging JSON line.
#[derive(Debug, Clone)]
pub struct CloudLogFormat {
    service: String,
    project_id: Option<String>,
    clock: Arc<dyn Clock>,
    /// Written as each line's `logging.googleapis.com/labels`.
    labels: Vec<(&'static str, String)>,
}

impl CloudLogFormat {
    /// Lines are stamped by `clock`, tagged with `service`, and trace ids are
    /// qualified as `projects/<project_id>/traces/<id>` when the project is known.
    pub fn new(service: &str, project_id: Option<&str>, clock: Arc<dyn Clock>) -> Self {
        CloudLogFormat {
            service: service.to_owned(),
            project_id: project_id.map(str::to_owned),
            clock,
            labels: Vec::new(),
        }
    }

    /// Every line carries `labels` (Cloud Logging's entry labels).
    pub fn labelled(mut self, labels: Vec<(&'static str, String)>) -> Self {
        self.labels = labels;
        self
    }

    fn line(&self, level: Level, target: &str, mut fields: FieldList) -> String {
        let severity = match level {
            Level::ERROR => "ERROR",
            Level::WARN => "WARNING",
            Level::INFO => "INFO",
            Level::DEBUG | Level::TRACE => "DEBUG",
        };
        let message = match fields.take("message") {
            Some(Value::String(s)) => s,
            Some(other) => other.to_string(),
            None => String::new(),
        };
        let mut out: Vec<(String, Value)> = vec![
            ("severity".into(), severity.into()),
            ("message".into(), message.into()),
            ("time".into(), self.clock.now().to_rfc3339().into()),
            ("target".into(), target.into()),
            ("service".into(), self.service.as_str().into()),
        ];
        let trace_id = fields.take(TRACE_ID);
        let span_id = fields.take(SPAN_ID);
        let sampled = fields.take(TRACE_SAMPLED);
        for (name, value) in fields.0 {
            let value = match value {
                Value::String(s) if name == HTTP_REQUEST => match serde_json::from_str(&s) {
                    Ok(object @ Value::Object(_)) => object,
                    _ => Value::String(s),
                },
                other => other,
            };
            let key = if RESERVED.contains(&name) { format!("fields.{name}") } else { name.to_owned() };
            out.push((key, value));
        }
        if let Some(Value::String(trace_id)) = trace_id {
            let trace = match &self.project_id {
                Some(project) => format!("projects/{project}/traces/{trace_id}"),
                None => trace_id,
            };
            out.push((TRACE_KEY.into(), trace.into()));
            if let Some(span_id @ Value::String(_)) = span_id {
                out.push((SPAN_KEY.into(), span_id));
            }
            if let Some(sampled @ Value::Bool(_)) = sampled {
                out.push((SAMPLED_KEY.into(), sampled));
            }
        }
        if !self.labels.is_empty() {
            let labels: serde_json::Map<String, Value> =
                self.labels.iter().map(|(k, v)| ((*k).to_owned(), Value::String(v.clone()))).collect();
            out.push((LABELS_KEY.into(), Value::Object(labels)));
        }
        // Written by hand rather than through a `Map` so the keys keep this order.
        let mut line = String::from("{");
        for (i, (key, value)) in out.into_iter().enumerate() {
            if i > 0 {
                line.push(',');
            }
            line.push_str(&Value::String(key).to_string());
            line.push(':');
            line.push_str(&value.to_string());
        }
        line.push('}');
        line
    }
}

impl<S, N> FormatEvent<S, N> for CloudLogFormat
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let mut fields = FieldList::default();
        if let Some(scope) = ctx.event_scope() {
            for span in scope.from_root() {
                if let Some(span_fields) = span.extensions().get::<FieldList>() {
                    for (name, value) in &span_fields.0 {
                        fields.set(name, value.clone());
                    }
                }
            }
        }
        event.record(&mut fields);
        let meta = event.metadata();
        writeln!(writer, "{}", self.line(*meta.level(), meta.target(), fields))
    }
}

/// Keeps each span's fields, as JSON values, in the span's extensions.
#[derive(Debug, Clone, Copy, Default)]
pub struct SpanFieldsLayer;

impl<S> Layer<S> for SpanFieldsLayer
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        if let Some(span) = ctx.span(id) {
            let mut fields = FieldList::default();
            attrs.record(&mut fields);
            span.extensions_mut().insert(fields);
        }
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        if let Some(span) = ctx.span(id)
            && let Some(fields) = span.extensions_mut().get_mut::<FieldList>()
        {
            values.record(fields);
        }
    }
}

/// Named JSON values in first-recorded order; setting a name again replaces its value.
#[derive(Debug, Default)]
struct FieldList(Vec<(&'static str, Value)>);

impl FieldList {
    fn set(&mut self, name: &'static str, value: Value) {
        match self.0.iter_mut().find(|(n, _)| *n == name) {
            Some((_, v)) => *v = value,
            None => self.0.push((name, value)),
        }
    }

    fn take(&mut self, name: &str) -> Option<Value> {
        let i = self.0.iter().position(|(n, _)| *n == name)?;
        Some(self.0.remove(i).1)
    }
}

impl Visit for FieldList {
    fn record_f64(&mut self, field: &Field, value: f64) {
        let value =
            serde_json::Number::from_f64(value).map_or_else(|| value.to_string().into(), Value::Number);
        self.set(field.name(), value);
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.set(field.name(), value.into());
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.set(field.name(), value.into());
    }

    fn record_i128(&mut self, field: &Field, value: i128) {
        let value = i64::try_from(value).map_or_else(|_| value.to_string().into(), Value::from);
        self.set(field.name(), value);
    }

    fn record_u128(&mut self, field: &Field, value: u128) {
        let value = u64::try_from(value).map_or_else(|_| value.to_string().into(), Value::from);
        self.set(field.name(), value);
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.set(field.name(), value.into());
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        self.set(field.name(), value.into());
    }

    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        self.set(field.name(), value.to_string().into());
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.set(field.name(), format!("{value:?}").into());
    }
}

/// How log lines look (`MAPI_LOG_FORMAT`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogFormat {
    /// One Cloud Logging JSON object per line.
    Json,
    /// A short line per event for a person at a terminal: the time, the
    /// level, the message and the event's own fields (no span fields, no
    /// request record). Request lines are left to `debug`.
    Human,
}

/// The filter a human log adds: a line per HTTP request only when asked
/// for (`MAPI_LOG=debug`), failed requests still shown.
pub const HUMAN_QUIET: &str = "mapi_runtime::http=warn";

/// Installs the global subscriber for `format`, writing to `writer`
/// ([`init_logging_to`] for JSON). Only the first call has any effect.
pub fn init_logging_as<W>(format: LogFormat, service: &str, filter: &str, writer: W)
where
    W: for<'w> MakeWriter<'w> + Send + Sync + 'static,
{
    if format == LogFormat::Json {
        return init_logging_to(service, None, filter, writer);
    }
    INIT.call_once(|| {
        let env_filter = EnvFilter::try_new(filter).unwrap_or_else(|_| EnvFilter::new("info"));
        let subscriber = tracing_subscriber::fmt()
            .event_format(HumanFormat { clock: Arc::new(SystemClock) })
            .with_env_filter(env_filter)
            .with_writer(writer)
            .finish();
        let _ = tracing::subscriber::set_global_default(subscriber);
    });
}

/// Formats each event as `HH:MM:SS LEVEL message key=value …`.
#[derive(Debug, Clone)]
pub struct HumanFormat {
    pub clock: Arc<dyn Clock>,
}

impl HumanFormat {
    fn line(&self, level: Level, mut fields: FieldList) -> String {
        let message = fields.take("message").map(|m| m.as_str().map_or_else(|| m.to_string(), str::to_owned));
        let _ = fields.take(HTTP_REQUEST);
        let time = self.clock.now().to_rfc3339();
        let hms = time.get(11..19).unwrap_or(&time);
        let mut line = format!("{hms} {:<5} {}", level.as_str(), message.unwrap_or_default());
        for (name, value) in fields.0 {
            let text = value.as_str().map_or_else(|| value.to_string(), str::to_owned);
            line.push_str(&format!(" {name}={text}"));
        }
        line
    }
}

impl<S, N> FormatEvent<S, N> for HumanFormat
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        _: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let mut fields = FieldList::default();
        event.record(&mut fields);
        writeln!(writer, "{}", self.line(*event.metadata().level(), fields))
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use std::io;
    use std::sync::Mutex;

    use mapi_clock::VirtualClock;
    use mapi_domain::Timestamp;
    use serde_json::Map;

    use super::*;

    /// An in-memory log sink.
    #[derive(Clone, Default)]
    pub(crate) struct Buf(Arc<Mutex<Vec<u8>>>);

    impl io::Write for Buf {
        fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
            self.0.lock().expect("log buffer").extend_from_slice(bytes);
            Ok(bytes.len())
        }

        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    impl Buf {
        /// Every line written so far, each parsed as a JSON object.
        pub(crate) fn lines(&self) -> Vec<Map<String, Value>> {
            let bytes = self.0.lock().expect("log buffer").clone();
            let text = String::from_utf8(bytes).expect("utf-8 log");
            text.lines()
                .map(|l| match serde_json::from_str(l) {
                    Ok(Value::Object(o)) => o,
                    other => panic!("not a JSON object line: {l:?} ({other:?})"),
                })
                .collect()
        }
    }

    /// A subscriber at `debug` writing to the returned buffer, stamped 2026-11-30T06:15:40.123456Z.
    pub(crate) fn capture(project: Option<&str>) -> (impl Subscriber + Send + Sync, Buf) {
        let buf = Buf::default();
        let clock = Arc::new(VirtualClock::new(Timestamp::from_micros(1_796_019_340_123_456)));
        let format = CloudLogFormat::new("submit", project, clock);
        let writer = buf.clone();
        (subscriber(format, EnvFilter::new("trace"), move || writer.clone()), buf)
    }

    fn one_line(buf: &Buf) -> Map<String, Value> {
        let mut lines = buf.lines();
        assert_eq!(lines.len(), 1, "{lines:?}");
        lines.remove(0)
    }

    #[test]
    fn a_labelled_format_tags_every_line_with_its_build() {
        let buf = Buf::default();
        let clock = Arc::new(VirtualClock::new(Timestamp::from_micros(1_796_019_340_123_456)));
        let labels =
            vec![("git_commit", "abc123".to_owned()), ("build_time", "2026-12-06T04:00:00Z".to_owned())];
        let format = CloudLogFormat::new("submit", None, clock).labelled(labels);
        let writer = buf.clone();
        let sub = subscriber(format, EnvFilter::new("trace"), move || writer.clone());
        tracing::subscriber::with_default(sub, || {
            tracing::info!(git_commit = "a field keeps its place", "listening");
        });
        let line = one_line(&buf);
        let labels = &line["logging.googleapis.com/labels"];
        assert_eq!(labels["git_commit"], "abc123");
        assert_eq!(labels["build_time"], "2026-12-06T04:00:00Z");
        assert_eq!(line["git_commit"], "a field keeps its place", "a field named so stays a field");
    }

    #[test]
    fn core_keys_and_typed_fields() {
        let (sub, buf) = capture(None);
        tracing::subscriber::with_default(sub, || {
            tracing::info!(run = "r-1", attempt = 3u64, delta = -2i64, ratio = 0.5, ok = true, big = u128::MAX,
                state = ?Some("queued"), "run {} started", "r-1");
        });
        let line = one_line(&buf);
        assert_eq!(line["severity"], "INFO");
        assert_eq!(line["message"], "run r-1 started");
        assert_eq!(line["time"], "2026-11-30T06:15:40.123456Z");
        assert_eq!(line["target"], "mapi_runtime::logging::tests");
        assert_eq!(line["service"], "submit");
        assert_eq!(line["run"], "r-1");
        assert_eq!(line["attempt"], 3);
        assert_eq!(line["delta"], -2);
        assert_eq!(line["ratio"], 0.5);
        assert_eq!(line["ok"], true);
        assert_eq!(line["big"], u128::MAX.to_string());
        assert_eq!(line["state"], "Some(\"queued\")");
        assert!(!line.contains_key(TRACE_KEY), "no trace outside a traced span");
    }

    #[test]
    fn severity_mapping() {
        let (sub, buf) = capture(None);
        tracing::subscriber::with_default(sub, || {
            tracing::error!("e");
            tracing::warn!("w");
            tracing::info!("i");
            tracing::debug!("d");
            tracing::trace!("t");
        });
        let severities: Vec<Value> = buf.lines().into_iter().map(|l| l["severity"].clone()).collect();
        assert_eq!(severities, ["ERROR", "WARNING", "INFO", "DEBUG", "DEBUG"]);
    }

    #[test]
    fn quotes_and_newlines_are_escaped_one_object_per_line() {
        let (sub, buf) = capture(None);
        tracing::subscriber::with_default(sub, || {
            tracing::warn!(detail = "a \"b\"\nc", "line one\nline \"two\"\t\\");
            tracing::info!("next");
        });
        let lines = buf.lines();
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[0]["message"], "line one\nline \"two\"\t\\");
        assert_eq!(lines[0]["detail"], "a \"b\"\nc");
        assert_eq!(lines[1]["message"], "next");
    }

    #[test]
    fn span_fields_and_trace_reach_events_inside() {
        let (sub, buf) = capture(Some("mapi-prod"));
        tracing::subscriber::with_default(sub, || {
            let request = tracing::info_span!(
                "request",
                method = "POST",
                route = "/v1/runs",
                trace_id = tracing::field::Empty,
                span_id = tracing::field::Empty,
                trace_sampled = tracing::field::Empty,
            );
            request.record(TRACE_ID, "105445aa7843bc8bf206b12000100000");
            request.record(SPAN_ID, "00f067aa0ba902b7");
            request.record(TRACE_SAMPLED, true);
            let _request = request.enter();
            let inner = tracing::debug_span!("store", collection = "runs", route = "overridden");
            let _inner = inner.enter();
            tracing::info!(run = "r-1", "written");
        });
        let line = one_line(&buf);
        assert_eq!(line["method"], "POST");
        assert_eq!(line["collection"], "runs");
        assert_eq!(line["route"], "overridden", "inner spans win over outer ones");
        assert_eq!(line["run"], "r-1");
        assert_eq!(line[TRACE_KEY], "projects/mapi-prod/traces/105445aa7843bc8bf206b12000100000");
        assert_eq!(line[SPAN_KEY], "00f067aa0ba902b7");
        assert_eq!(line[SAMPLED_KEY], true);
        for raw in [TRACE_ID, SPAN_ID, TRACE_SAMPLED] {
            assert!(!line.contains_key(raw), "{raw} must only appear under its Cloud Logging key");
        }
    }

    #[test]
    fn trace_without_project_is_the_bare_id() {
        let (sub, buf) = capture(None);
        tracing::subscriber::with_default(sub, || {
            let span = tracing::info_span!("request", trace_id = "105445aa7843bc8bf206b12000100000");
            span.in_scope(|| tracing::info!("inside"));
        });
        let line = one_line(&buf);
        assert_eq!(line[TRACE_KEY], "105445aa7843bc8bf206b12000100000");
        assert!(!line.contains_key(SPAN_KEY));
        assert!(!line.contains_key(SAMPLED_KEY));
    }

    #[test]
    fn http_request_is_an_object_and_reserved_names_are_moved() {
        let (sub, buf) = capture(None);
        let http = serde_json::json!({"requestMethod": "GET", "status": 200, "latency": "0.012345s"});
        tracing::subscriber::with_default(sub, || {
            tracing::info!(httpRequest = %http, severity = "fake", service = "other", "served");
        });
        let line = one_line(&buf);
        assert_eq!(line[HTTP_REQUEST], http);
        assert_eq!(line["severity"], "INFO");
        assert_eq!(line["service"], "submit");
        assert_eq!(line["fields.severity"], "fake");
        assert_eq!(line["fields.service"], "other");
    }

    #[test]
    fn events_below_the_filter_are_dropped() {
        let buf = Buf::default();
        let writer = buf.clone();
        let format = CloudLogFormat::new("submit", None, Arc::new(SystemClock));
        let sub = subscriber(format, EnvFilter::new("warn"), move || writer.clone());
        tracing::subscriber::with_default(sub, || {
            tracing::info!("hidden");
            tracing::warn!("shown");
        });
        let lines = buf.lines();
        assert_eq!(lines.len(), 1);
        assert_eq!(lines[0]["message"], "shown");
        let time = lines[0]["time"].as_str().expect("time is a string");
        Timestamp::parse_rfc3339(time).expect("time is RFC 3339");
        assert!(time.ends_with('Z'), "{time}");
    }

    #[test]
    fn a_human_line_is_the_time_level_message_and_the_events_own_fields() {
        let clock = Arc::new(mapi_clock::VirtualClock::new(
            mapi_domain::Timestamp::parse_rfc3339("2026-12-02T02:31:07Z").expect("time"),
        ));
        let format = HumanFormat { clock };
        let mut fields = FieldList::default();
        fields.set("message", Value::from("run queued → running"));
        fields.set("run", Value::from("run_01"));
        fields.set("attempt", Value::from(1));
        fields.set(HTTP_REQUEST, Value::from("{\"status\":200}"));
        assert_eq!(
            format.line(Level::INFO, fields),
            "02:31:07 INFO  run queued → running run=run_01 attempt=1"
        );
    }
}
