//! `mapi webhooks`: a project's webhooks (project admins): create one (its
//! secret is printed once), list, change, delete, rotate the secret, read
//! the delivery log, replay a message.

use std::process::ExitCode;

use clap::Subcommand;
use mapi_api::webhooks::{
    DeliveryPage, DeliveryView, NewWebhook, SecretRotated, WebhookChange, WebhookCreated, WebhookPage,
    WebhookView,
};
use mapi_webhooks::EventType;
use reqwest::Method;

use crate::client::Client;
use crate::output::{Cell, Table, print};

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

#[derive(Debug, clap::Args)]
pub struct Where {
    #[arg(long, env = "MAPI_TENANT")]
    pub(crate) tenant: Option<String>,
    #[arg(long, env = "MAPI_PROJECT")]
    pub(crate) project: Option<String>,
}

#[derive(Debug, Subcommand)]
pub enum WebhooksCmd {
    /// Send events to an https URL; prints the signing secret, once.
    Create {
        /// Where to send: an https URL of a public address.
        #[arg(value_name = "URL")]
        target: String,
        /// Comma-separated: run.started, run.succeeded, run.failed, run.partial, run.cancelled,
        /// endpoint.ready, endpoint.failed.
        #[arg(long, value_delimiter = ',', required = true)]
        events: Vec<String>,
        #[arg(long)]
        description: Option<String>,
        #[command(flatten)]
        at: Where,
    },
    /// List the project's webhooks.
    Ls {
        #[command(flatten)]
        at: Where,
    },
    /// Change a webhook's URL or events, or turn it off and on.
    Update {
        id: String,
        /// A new URL to send to.
        #[arg(long = "to", value_name = "URL")]
        target: Option<String>,
        #[arg(long, value_delimiter = ',')]
        events: Option<Vec<String>>,
        #[arg(long, conflicts_with = "enable")]
        disable: bool,
        #[arg(long)]
        enable: bool,
        #[command(flatten)]
        at: Where,
    },
    /// Delete a webhook and its delivery log.
    Rm {
        id: String,
        #[command(flatten)]
        at: Where,
    },
    /// A new signing secret (printed once); the previous one signs beside it for a day.
    Rotate {
        id: String,
        #[command(flatten)]
        at: Where,
    },
    /// The messages sent to a webhook, newest first, with each attempt.
    Deliveries {
        id: String,
        #[command(flatten)]
        at: Where,
    },
    /// Send one message again now.
    Replay {
        id: String,
        /// The message (`msg_…`, its `webhook-id` header).
        message: String,
        #[command(flatten)]
        at: Where,
    },
}

fn events(names: &[String]) -> Result<Vec<EventType>> {
    names.iter().map(|n| n.trim().parse::<EventType>().map_err(|e| e.to_string().into())).collect()
}

fn row(w: &WebhookView) -> Vec<Cell> {
    let events: Vec<&str> = w.events.iter().map(|e| e.as_str()).collect();
    vec![
        w.id.to_string().into(),
        w.url.as_str().into(),
        events.join(",").into(),
        if w.enabled { "on" } else { "off" }.into(),
        crate::output::ago(w.created_at).into(),
    ]
}

fn describe_delivery(d: &DeliveryView) -> String {
    let mut out = format!(
        "{} {} {} {} ({})\n",
        d.id,
        d.event.as_str(),
        d.subject,
        d.state,
        crate::output::ago(d.created_at)
    );
    for a in &d.attempts {
        let answer = a.status.map_or_else(|| a.error.clone().unwrap_or_default(), |s| s.to_string());
        let kind = if a.replay { "replay" } else { "attempt" };
        out.push_str(&format!(
            "  {kind} {} {} {answer} in {} ms\n",
            a.attempt,
            crate::output::ago(a.at),
            a.latency_ms
        ));
    }
    out
}

pub async fn run(
    client: &Client,
    scope: impl Fn(Option<String>, Option<String>) -> Result<(String, String)>,
    cmd: WebhooksCmd,
    json: bool,
) -> Result<ExitCode> {
    let base = |at: Where| -> Result<String> {
        let (t, p) = scope(at.tenant, at.project)?;
        Ok(format!("/v1/tenants/{t}/projects/{p}/webhooks"))
    };
    match cmd {
        WebhooksCmd::Create { target, events: names, description, at } => {
            let body = NewWebhook { url: target, events: events(&names)?, description };
            let made: WebhookCreated =
                client.send(client.request(Method::POST, &base(at)?).json(&body)).await?;
            print(json, &made, || {
                format!(
                    "webhook {} sends to {}\nsigning secret (shown once, keep it): {}\n",
                    made.webhook.id, made.webhook.url, made.secret
                )
            })?;
        }
        WebhooksCmd::Ls { at } => {
            let page: WebhookPage = client.get(&base(at)?).await?;
            print(json, &page, || {
                let mut table = Table::new(&["ID", "URL", "EVENTS", "ON", "CREATED"]).flex(&[1]);
                page.webhooks.iter().for_each(|w| table.row(row(w)));
                crate::output::listing(
                    &table,
                    "no webhooks yet: mapi webhooks create URL --events run.succeeded",
                )
            })?;
        }
        WebhooksCmd::Update { id, target, events: names, disable, enable, at } => {
            let enabled = (disable || enable).then_some(enable);
            let body = WebhookChange {
                url: target,
                events: names.as_deref().map(events).transpose()?,
                description: None,
                enabled,
            };
            let path = format!("{}/{id}", base(at)?);
            let w: WebhookView = client.send(client.request(Method::PATCH, &path).json(&body)).await?;
            print(json, &w, || format!("webhook {} updated\n", w.id))?;
        }
        WebhooksCmd::Rm { id, at } => {
            let path = format!("{}/{id}", base(at)?);
            client.send::<()>(client.request(Method::DELETE, &path)).await?;
            print(json, &serde_json::json!({"deleted": id}), || format!("deleted {id}\n"))?;
        }
        WebhooksCmd::Rotate { id, at } => {
            let path = format!("{}/{id}/rotate", base(at)?);
            let r: SecretRotated = client.send(client.request(Method::POST, &path)).await?;
            print(json, &r, || {
                format!(
                    "new signing secret (shown once): {}\nthe previous one also signs until {}\n",
                    r.secret,
                    r.previous_valid_until.to_rfc3339()
                )
            })?;
        }
        WebhooksCmd::Deliveries { id, at } => {
            let page: DeliveryPage = client.get(&format!("{}/{id}/deliveries", base(at)?)).await?;
            print(json, &page, || {
                if page.deliveries.is_empty() {
                    return "nothing sent yet\n".to_owned();
                }
                page.deliveries.iter().map(describe_delivery).collect()
            })?;
        }
        WebhooksCmd::Replay { id, message, at } => {
            let path = format!("{}/{id}/deliveries/{message}/replay", base(at)?);
            let d: DeliveryView = client.send(client.request(Method::POST, &path)).await?;
            print(json, &d, || format!("message {} will be sent again now\n", d.id))?;
        }
    }
    Ok(ExitCode::SUCCESS)
}
