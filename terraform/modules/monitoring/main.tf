# Alarms: jobs.run answered 429 (mapi_executor_submit_throttled_total, which
# the executor counts on every 429 besides its ALARM log line), and the
# spend cap at 70 % and 90 % of the period's budget.
#
# The platform's metrics are Prometheus metrics on each service's /metrics,
# read here through Google Cloud Managed Service for Prometheus (PromQL).
# Spend has no platform metric (the spend cap is a kill switch in the
# store), so the 70 % and 90 % alarms are a billing budget on both projects.

resource "google_monitoring_alert_policy" "jobs_run_throttled" {
  project      = var.project_id
  display_name = "MapiJobsRun429 (${var.env}): jobs.run answered 429"
  combiner     = "OR"
  severity     = "WARNING"

  conditions {
    display_name = "mapi_executor_submit_throttled_total increases"
    condition_prometheus_query_language {
      query               = "sum(increase(mapi_executor_submit_throttled_total[5m])) > 0"
      duration            = "0s"
      evaluation_interval = "60s"
    }
  }

  documentation {
    content   = "Cloud Run refused jobs.run with 429: runs wait in the queue. Lower MAPI_CLOUDRUN_SUBMITS_PER_MINUTE or raise the project's jobs.run quota."
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
