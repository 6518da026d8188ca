# Alarms: jobs.run answered 429, a webhook's sweep failing, and the
# platform's spend at 70 % (a ticket) and 90 % (a page) of the cap an
# operator set with `mapi admin kill-switches set --spend-cap`.
#
# The executor logs one error line with the message `var.throttled_message`
# on every 429 (besides counting mapi_executor_submit_throttled_total on its
# /metrics). Cloud Run sends that line to Cloud Logging with no collector to
# run, so the alarm counts those lines through a log-based metric; the
# other alarms are lines of their own in the same way.
#
# The billing budget at the end watches a different figure: Google's bill
# for both projects, which includes what the platform's ledger does not
# price (networking, storage, logging).

resource "google_logging_metric" "jobs_run_throttled" {
  project     = var.project_id
  name        = "mapi-${var.env}-jobs-run-throttled"
  description = "jobs.run answers of 429 the executor logged."
  filter      = "resource.type=\"cloud_run_revision\" AND severity=ERROR AND jsonPayload.message=\"${var.throttled_message}\""

  metric_descriptor {
    metric_kind = "DELTA"
    value_type  = "INT64"
    unit        = "1"
  }
}

resource "google_monitoring_alert_policy" "jobs_run_throttled" {
  project      = var.project_id
  display_name = "MapiJobsRun429 (${var.env}): jobs.run answered 429"
  combiner     = "OR"
  severity     = "WARNING"

  conditions {
    display_name = "a jobs.run 429 was logged"
    condition_threshold {
      filter          = "resource.type=\"cloud_run_revision\" AND metric.type=\"logging.googleapis.com/user/${google_logging_metric.jobs_run_throttled.name}\""
      comparison      = "COMPARISON_GT"
      threshold_value = 0
      duration        = "0s"

      aggregations {
        alignment_period     = "60s"
        per_series_aligner   = "ALIGN_SUM"
        cross_series_reducer = "REDUCE_SUM"
      }
    }
  }

  alert_strategy {
    auto_close = "1800s"
  }

  documentation {
    content   = "Cloud Run refused jobs.run with 429: runs wait in the queue. Lower MAPI_CLOUDRUN_SUBMITS_PER_MINUTE or raise the project's jobs.run quota."
    mime_type = "text/markdown"
  }

  notification_channels = var.notification_channels
}

# reconcile-tick logs one error line with the message
# `var.webhook_sweep_alarm_message` each time a webhook's sweep fails after
# failing five ticks in a row (besides counting
# mapi_webhook_sweep_alarms_total): that webhook's events are not being
# made into messages until the cause is fixed.
resource "google_logging_metric" "webhook_sweep_failing" {
  project     = var.project_id
  name        = "mapi-${var.env}-webhook-sweep-failing"
  description = "Webhook sweeps that failed again after failing tick after tick."
  filter      = "resource.type=\"cloud_run_revision\" AND severity=ERROR AND jsonPayload.message=\"${var.webhook_sweep_alarm_message}\""

  metric_descriptor {
    metric_kind = "DELTA"
    value_type  = "INT64"
    unit        = "1"
  }
}

resource "google_monitoring_alert_policy" "webhook_sweep_failing" {
  project      = var.project_id
  display_name = "MapiWebhookSweepFailing (${var.env}): a webhook's events are not being delivered"
  combiner     = "OR"
  severity     = "ERROR"

  conditions {
    display_name = "a webhook's sweep failed five ticks in a row"
    condition_threshold {
      filter          = "resource.type=\"cloud_run_revision\" AND metric.type=\"logging.googleapis.com/user/${google_logging_metric.webhook_sweep_failing.name}\""
      comparison      = "COMPARISON_GT"
      threshold_value = 0
      duration        = "0s"

      aggregations {
        alignment_period     = "60s"
        per_series_aligner   = "ALIGN_SUM"
        cross_series_reducer = "REDUCE_SUM"
      }
    }
  }

  alert_strategy {
    auto_close = "1800s"
  }

  documentation {
    content   = "A webhook's sweep keeps failing: its tenant's events wait (nothing is lost while the cursor stays put). The ALARM line names the webhook, since when, and the error; an error that says `a bug` needs a code fix, any other a look at the store."
    mime_type = "text/markdown"
  }

  notification_channels = var.notification_channels
}

# reconcile-tick logs one line when the platform's spend in the cap's
# period reaches 70 % of the cap (warning) and one at 90 % (error), once per
# cap and period.
resource "google_logging_metric" "spend_cap_70" {
  project     = var.project_id
  name        = "mapi-${var.env}-spend-cap-70"
  description = "The platform's spend reached 70 % of its spend cap."
  filter      = "resource.type=\"cloud_run_revision\" AND severity=WARNING AND jsonPayload.message=\"${var.spend_cap_70_message}\""

  metric_descriptor {
    metric_kind = "DELTA"
    value_type  = "INT64"
    unit        = "1"
  }
}

resource "google_monitoring_alert_policy" "spend_cap_70" {
  project      = var.project_id
  display_name = "MapiSpendCap70 (${var.env}): spend reached 70 % of the cap"
  combiner     = "OR"
  severity     = "WARNING"

  conditions {
    display_name = "the spend-cap 70 % line was logged"
    condition_threshold {
      filter          = "resource.type=\"cloud_run_revision\" AND metric.type=\"logging.googleapis.com/user/${google_logging_metric.spend_cap_70.name}\""
      comparison      = "COMPARISON_GT"
      threshold_value = 0
      duration        = "0s"

      aggregations {
        alignment_period     = "60s"
        per_series_aligner   = "ALIGN_SUM"
        cross_series_reducer = "REDUCE_SUM"
      }
    }
  }

  alert_strategy {
    auto_close = "86400s"
  }

  documentation {
    content   = "A ticket: the platform has spent 70 % of the spend cap in this period; at 100 % no new compute starts but for internal tenants. docs/runbooks/kill-switches.md."
    mime_type = "text/markdown"
  }

  notification_channels = var.notification_channels
}

resource "google_logging_metric" "spend_cap_90" {
  project     = var.project_id
  name        = "mapi-${var.env}-spend-cap-90"
  description = "The platform's spend reached 90 % of its spend cap."
  filter      = "resource.type=\"cloud_run_revision\" AND severity=ERROR AND jsonPayload.message=\"${var.spend_cap_90_message}\""

  metric_descriptor {
    metric_kind = "DELTA"
    value_type  = "INT64"
    unit        = "1"
  }
}

resource "google_monitoring_alert_policy" "spend_cap_90" {
  project      = var.project_id
  display_name = "MapiSpendCap90 (${var.env}): spend reached 90 % of the cap"
  combiner     = "OR"
  severity     = "CRITICAL"

  conditions {
    display_name = "the spend-cap 90 % line was logged"
    condition_threshold {
      filter          = "resource.type=\"cloud_run_revision\" AND metric.type=\"logging.googleapis.com/user/${google_logging_metric.spend_cap_90.name}\""
      comparison      = "COMPARISON_GT"
      threshold_value = 0
      duration        = "0s"

      aggregations {
        alignment_period     = "60s"
        per_series_aligner   = "ALIGN_SUM"
        cross_series_reducer = "REDUCE_SUM"
      }
    }
  }

  alert_strategy {
    auto_close = "86400s"
  }

  documentation {
    content   = "A page: the platform has spent 90 % of the spend cap in this period; at 100 % no new compute starts but for internal tenants. Raise the cap or find the spender: docs/runbooks/kill-switches.md."
    mime_type = "text/markdown"
  }

  notification_channels = var.notification_channels
}

# An integrity failure: a model version's bundle does not verify (its
# signature or an artifact's SHA-256). One line is a page: someone or
# something changed sealed objects.
resource "google_logging_metric" "integrity_failure" {
  project     = var.project_id
  name        = "mapi-${var.env}-integrity-failure"
  description = "Bundles that failed their integrity check."
  filter      = "resource.type=\"cloud_run_revision\" AND severity=ERROR AND jsonPayload.message=\"${var.integrity_alarm_message}\""

  metric_descriptor {
    metric_kind = "DELTA"
    value_type  = "INT64"
    unit        = "1"
  }
}

resource "google_monitoring_alert_policy" "integrity_failure" {
  project      = var.project_id
  display_name = "MapiIntegrityFailure (${var.env}): a model version's bundle failed its integrity check"
  combiner     = "OR"
  severity     = "CRITICAL"

  conditions {
    display_name = "a bundle integrity ALARM was logged"
    condition_threshold {
      filter          = "resource.type=\"cloud_run_revision\" AND metric.type=\"logging.googleapis.com/user/${google_logging_metric.integrity_failure.name}\""
      comparison      = "COMPARISON_GT"
      threshold_value = 0
      duration        = "0s"

      aggregations {
        alignment_period     = "60s"
        per_series_aligner   = "ALIGN_SUM"
        cross_series_reducer = "REDUCE_SUM"
      }
    }
  }

  alert_strategy {
    auto_close = "1800s"
  }

  documentation {
    content   = "A sealed bundle does not verify: its objects were changed after sealing, or the signing keys are wrong. The ALARM line names the bundle. See docs/runbooks/key-rotation.md and docs/runbooks/sandbox-escape.md."
    mime_type = "text/markdown"
  }

  notification_channels = var.notification_channels
}

# Quota denials: one info line each. Many in five minutes means a tenant is
# hammering a limit or the limits are too tight for its work.
resource "google_logging_metric" "quota_denials" {
  project     = var.project_id
  name        = "mapi-${var.env}-quota-denials"
  description = "Requests refused by a quota or a kill switch."
  filter      = "resource.type=\"cloud_run_revision\" AND jsonPayload.message=\"${var.quota_denied_message}\""

  metric_descriptor {
    metric_kind = "DELTA"
    value_type  = "INT64"
    unit        = "1"
  }
}

resource "google_monitoring_alert_policy" "quota_denials" {
  project      = var.project_id
  display_name = "MapiQuotaDenials (${var.env}): many requests refused by quotas"
  combiner     = "OR"
  severity     = "WARNING"

  conditions {
    display_name = "more quota denials than var.quota_denials_per_5m in five minutes"
    condition_threshold {
      filter          = "resource.type=\"cloud_run_revision\" AND metric.type=\"logging.googleapis.com/user/${google_logging_metric.quota_denials.name}\""
      comparison      = "COMPARISON_GT"
      threshold_value = var.quota_denials_per_5m
      duration        = "0s"

      aggregations {
        alignment_period     = "300s"
        per_series_aligner   = "ALIGN_SUM"
        cross_series_reducer = "REDUCE_SUM"
      }
    }
  }

  alert_strategy {
    auto_close = "1800s"
  }

  documentation {
    content   = "Requests are being refused by quotas at a high rate. The lines name the tenant, the level and the limit; `mapi admin audit --action quota.denied` lists them. docs/runbooks/kill-switches.md."
    mime_type = "text/markdown"
  }

  notification_channels = var.notification_channels
}

# 5xx answers of any service, from Cloud Run's own request log.
resource "google_logging_metric" "server_errors" {
  project     = var.project_id
  name        = "mapi-${var.env}-server-errors"
  description = "Requests the services answered with a 5xx."
  filter      = "resource.type=\"cloud_run_revision\" AND log_id(\"run.googleapis.com/requests\") AND httpRequest.status>=500"

  metric_descriptor {
    metric_kind = "DELTA"
    value_type  = "INT64"
    unit        = "1"
  }
}

resource "google_monitoring_alert_policy" "server_errors" {
  project      = var.project_id
  display_name = "MapiServerErrors (${var.env}): the services answer 5xx"
  combiner     = "OR"
  severity     = "ERROR"

  conditions {
    display_name = "more 5xx answers than var.server_errors_per_5m in five minutes"
    condition_threshold {
      filter          = "resource.type=\"cloud_run_revision\" AND metric.type=\"logging.googleapis.com/user/${google_logging_metric.server_errors.name}\""
      comparison      = "COMPARISON_GT"
      threshold_value = var.server_errors_per_5m
      duration        = "0s"

      aggregations {
        alignment_period     = "300s"
        per_series_aligner   = "ALIGN_SUM"
        cross_series_reducer = "REDUCE_SUM"
      }
    }
  }

  alert_strategy {
    auto_close = "1800s"
  }

  documentation {
    content   = "Services answer 5xx: a 503 says a port (store, queue, executor) is unavailable, a 500 is a bug whose log line carries its cause. docs/runbooks/stuck-queue.md."
    mime_type = "text/markdown"
  }

  notification_channels = var.notification_channels
}

# Events Pub/Sub could not push to push-events after its attempts wait in
# the dead-letter subscription: runs' progress is missing them.
resource "google_monitoring_alert_policy" "dead_letters" {
  project      = var.project_id
  display_name = "MapiDeadLetters (${var.env}): run events could not be pushed"
  combiner     = "OR"
  severity     = "ERROR"

  conditions {
    display_name = "the dead-letter subscription holds messages"
    condition_threshold {
      filter          = "resource.type=\"pubsub_subscription\" AND resource.labels.subscription_id=\"${var.dead_letter_subscription}\" AND metric.type=\"pubsub.googleapis.com/subscription/num_undelivered_messages\""
      comparison      = "COMPARISON_GT"
      threshold_value = 0
      duration        = "300s"

      aggregations {
        alignment_period   = "60s"
        per_series_aligner = "ALIGN_MAX"
      }
    }
  }

  alert_strategy {
    auto_close = "1800s"
  }

  documentation {
    content   = "Run events were dead-lettered: push-events refused or did not answer them ten times. Read push-events' logs for the refusals; the reconcile tick still ends runs from the executor's report, so nothing is lost but progress detail. docs/runbooks/stuck-queue.md."
    mime_type = "text/markdown"
  }

  notification_channels = var.notification_channels
}

resource "google_billing_budget" "spend_cap" {
  billing_account = var.billing_account
  display_name    = "mapi ${var.env} spend cap"

  budget_filter {
    projects               = [for n in var.project_numbers : "projects/${n}"]
    calendar_period        = var.spend_cap_period
    credit_types_treatment = "INCLUDE_ALL_CREDITS"
  }

  amount {
    specified_amount {
      currency_code = "USD"
      units         = tostring(var.spend_cap_usd)
    }
  }

  threshold_rules {
    threshold_percent = 0.7
    spend_basis       = "CURRENT_SPEND"
  }

  threshold_rules {
    threshold_percent = 0.9
    spend_basis       = "CURRENT_SPEND"
  }

  all_updates_rule {
    monitoring_notification_channels = var.notification_channels
    disable_default_iam_recipients   = false
  }
}
