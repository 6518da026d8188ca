# Model endpoints as Cloud Run services in the exec project
# (`MAPI_HOSTING=cloud-run`): the account model servers run as, and what the
# services that host endpoints may do.
#
# Rules:
# - Every model server runs as the model-server account, which may only read
#   the data bucket (bundles are mounted read-only from it).
# - The services that deploy, promote and score endpoints (submit-api for
#   create, promote, rollback, delete and scores; reconcile-tick for rollouts
#   and deletions) hold the endpoint-host role (these permissions and no
#   others) and may act as the model-server account, to deploy revisions
#   that run as it. Scoring a private endpoint is `run.routes.invoke`, with
#   an ID token whose audience is the service's URL. Charging an L4
#   endpoint's idle time reads its instance counts from Cloud Monitoring
#   (`monitoring.timeSeries.list`).

resource "google_service_account" "server" {
  project      = var.project_id
  account_id   = "mapi-${var.env}-model"
  display_name = "mapi ${var.env} model servers (read the data bucket, nothing else)"
}

resource "google_storage_bucket_iam_member" "server_reads_bundles" {
  bucket = var.data_bucket
  role   = "roles/storage.objectViewer"
  member = "serviceAccount:${google_service_account.server.email}"
}

resource "google_project_iam_custom_role" "host" {
  project     = var.project_id
  role_id     = "mapi_${var.env}_endpoint_host"
  title       = "mapi ${var.env} endpoint host"
  description = "Create, change, read, delete and invoke the services of model endpoints, and read their instance counts."
  # A public endpoint's service disables invoker IAM, which is an IAM change
  # of the service (run.services.setIamPolicy).
  permissions = [
    "monitoring.timeSeries.list",
    "run.operations.get",
    "run.revisions.get",
    "run.revisions.list",
    "run.routes.invoke",
    "run.services.create",
    "run.services.delete",
    "run.services.get",
    "run.services.list",
    "run.services.setIamPolicy",
    "run.services.update",
  ]
}

resource "google_project_iam_member" "hosts" {
  for_each = var.hosts
  project  = var.project_id
  role     = google_project_iam_custom_role.host.id
  member   = "serviceAccount:${each.value}"
}

resource "google_service_account_iam_member" "hosts_act_as_server" {
  for_each           = var.hosts
  service_account_id = google_service_account.server.name
  role               = "roles/iam.serviceAccountUser"
  member             = "serviceAccount:${each.value}"
}
