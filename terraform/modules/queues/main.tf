# The Cloud Tasks queues, one per purpose, named as the code names them
# (mapi_platform::QUEUE_ROUTES), each delivering to the service that serves
# its route with an OIDC token of the invoker account for the one task
# audience (MAPI_CLOUDTASKS_SERVICE_ACCOUNT, MAPI_CLOUDTASKS_AUDIENCE).
#
# Rules:
# - Retries and concurrency are the code's (mapi_platform::queue_configs):
#   unlimited attempts (-1), the backoffs and doublings, the concurrency cap.
#   A task's dispatch deadline is set per task by the adapter; the target
#   service's request timeout is above it.
# - Only the services that push to a queue may enqueue on it, and they may
#   act as the invoker account (a task's OIDC token is minted for it).

resource "google_service_account" "invoker" {
  project      = var.project_id
  account_id   = "mapi-${var.env}-tasks-invoker"
  display_name = "mapi ${var.env} internal invoker (Cloud Tasks deliveries and Cloud Scheduler calls)"
}

resource "google_cloud_tasks_queue" "this" {
  for_each = var.queues
  project  = var.project_id
  location = var.region
  name     = each.key

  rate_limits {
    max_dispatches_per_second = each.value.max_dispatches_per_second
    max_concurrent_dispatches = each.value.max_concurrent_dispatches
  }

  retry_config {
    max_attempts  = each.value.max_attempts
    min_backoff   = each.value.min_backoff
    max_backoff   = each.value.max_backoff
    max_doublings = each.value.max_doublings
  }

  http_target {
    http_method = "POST"

    uri_override {
      scheme                    = "HTTPS"
      host                      = each.value.host
      uri_override_enforce_mode = "ALWAYS"
    }

    oidc_token {
      service_account_email = google_service_account.invoker.email
      audience              = var.audience
    }
  }
}

locals {
  enqueue = merge([
    for queue, q in var.queues : {
      for service, account in q.enqueuers : "${queue}/${service}" => { queue = queue, account = account }
    }
  ]...)
  enqueuers = merge([for q in var.queues : q.enqueuers]...)
}

resource "google_cloud_tasks_queue_iam_member" "enqueuers" {
  for_each = local.enqueue
  project  = var.project_id
  location = var.region
  name     = google_cloud_tasks_queue.this[each.value.queue].name
  role     = "roles/cloudtasks.enqueuer"
  member   = "serviceAccount:${each.value.account}"
}

resource "google_service_account_iam_member" "enqueuers_act_as_invoker" {
  for_each           = local.enqueuers
  service_account_id = google_service_account.invoker.name
  role               = "roles/iam.serviceAccountUser"
  member             = "serviceAccount:${each.value}"
}
