# Signed event lines from executions to push-events: a Cloud Logging sink in
# the exec project (where executions print) publishes every line with a
# `mapi_event` to a topic; a push subscription delivers each to
# `POST /internal/events` with an OIDC token of its own account, for the
# audience push-events checks (MAPI_PUBSUB_PUSH_*). Deliveries that keep
# failing go to a dead-letter topic, which has a subscription of its own so
# nothing dead-lettered is lost.
#
# Rules:
# - The sink's writer identity may publish to the events topic and nothing else.
# - The Pub/Sub service agent may publish to the dead-letter topic and
#   acknowledge on the push subscription (dead-lettering needs both).

data "google_project" "control" {
  project_id = var.project_id
}

locals {
  pubsub_agent = "serviceAccount:service-${data.google_project.control.number}@gcp-sa-pubsub.iam.gserviceaccount.com"
}

resource "google_pubsub_topic" "events" {
  # checkov:skip=CKV_GCP_83: events are HMAC-signed progress lines holding no tenant data; Google-managed encryption at rest is enough
  project = var.project_id
  name    = "mapi-${var.env}-run-events"
}

resource "google_pubsub_topic" "dead_letter" {
  # checkov:skip=CKV_GCP_83: events are HMAC-signed progress lines holding no tenant data; Google-managed encryption at rest is enough
  project = var.project_id
  name    = "mapi-${var.env}-run-events-dead"
}

resource "google_pubsub_subscription" "dead_letter" {
  project                    = var.project_id
  name                       = "mapi-${var.env}-run-events-dead"
  topic                      = google_pubsub_topic.dead_letter.id
  message_retention_duration = "604800s"
  ack_deadline_seconds       = 60

  expiration_policy {
    ttl = ""
  }
}

resource "google_service_account" "push" {
  project      = var.project_id
  account_id   = "mapi-${var.env}-events-push"
  display_name = "mapi ${var.env} event push subscription (OIDC identity of pushes)"
}

resource "google_pubsub_subscription" "push" {
  project                    = var.project_id
  name                       = "mapi-${var.env}-run-events-push"
  topic                      = google_pubsub_topic.events.id
  ack_deadline_seconds       = 30
  message_retention_duration = "604800s"

  push_config {
    push_endpoint = var.push_endpoint
    oidc_token {
      service_account_email = google_service_account.push.email
      audience              = var.push_audience
    }
  }

  retry_policy {
    minimum_backoff = "5s"
    maximum_backoff = "600s"
  }

  dead_letter_policy {
    dead_letter_topic     = google_pubsub_topic.dead_letter.id
    max_delivery_attempts = 10
  }

  expiration_policy {
    ttl = ""
  }
}

resource "google_logging_project_sink" "events" {
  project                = var.exec_project_id
  name                   = "mapi-${var.env}-run-events"
  destination            = "pubsub.googleapis.com/${google_pubsub_topic.events.id}"
  filter                 = "jsonPayload.mapi_event:*"
  unique_writer_identity = true
}

resource "google_pubsub_topic_iam_member" "sink_publishes" {
  project = var.project_id
  topic   = google_pubsub_topic.events.name
  role    = "roles/pubsub.publisher"
  member  = google_logging_project_sink.events.writer_identity
}

resource "google_pubsub_topic_iam_member" "agent_dead_letters" {
  project = var.project_id
  topic   = google_pubsub_topic.dead_letter.name
  role    = "roles/pubsub.publisher"
  member  = local.pubsub_agent
}

resource "google_pubsub_subscription_iam_member" "agent_acknowledges" {
  project      = var.project_id
  subscription = google_pubsub_subscription.push.name
  role         = "roles/pubsub.subscriber"
  member       = local.pubsub_agent
}

# The service agent mints the pushes' OIDC tokens as the push account only.
resource "google_service_account_iam_member" "agent_mints_push_tokens" {
  service_account_id = google_service_account.push.name
  role               = "roles/iam.serviceAccountTokenCreator"
  member             = local.pubsub_agent
}
