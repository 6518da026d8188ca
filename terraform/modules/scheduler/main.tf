# Cloud Scheduler jobs that call the platform's internal routes: the reconcile
# tick and the retention housekeepers (jobs, and runs' executions). Each call carries an OIDC token of the
# internal invoker account for the task audience, the only ID token an
# internal route accepts besides the internal token (mapi_identity's
# InternalCaller); the target service lists that audience among its custom
# audiences.

resource "google_cloud_scheduler_job" "this" {
  for_each         = var.jobs
  project          = var.project_id
  region           = var.region
  name             = "mapi-${var.env}-${each.key}"
  schedule         = each.value.schedule
  time_zone        = "Etc/UTC"
  attempt_deadline = each.value.attempt_deadline

  retry_config {
    retry_count = 0
  }

  http_target {
    http_method = "POST"
    uri         = each.value.uri

    oidc_token {
      service_account_email = var.service_account_email
      audience              = var.audience
    }
  }
}
