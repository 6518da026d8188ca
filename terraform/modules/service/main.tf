# One control-plane function as a Cloud Run (v2) service: its own runtime
# service account, its container (the `mapi` image, the function's binary as
# the command), its settings and secrets, its probes, and who may invoke it.
#
# Rules:
# - Every service runs as its own account; no two share one and none uses the
#   default compute account.
# - Secrets reach the container only as Secret Manager references.
# - The image is `var.image` (a digest deploy.sh writes); terraform owns it, so
#   a deploy that changes the digest is a plan. Only fields the deploy tooling
#   stamps on the resource (the client name and version gcloud writes) are
#   ignored.

resource "google_service_account" "this" {
  project      = var.project_id
  account_id   = "mapi-${var.env}-${var.name}"
  display_name = "mapi ${var.env} ${var.name} (Cloud Run runtime)"
}

resource "google_project_iam_member" "roles" {
  for_each = toset(var.project_roles)
  project  = var.project_id
  role     = each.value
  member   = "serviceAccount:${google_service_account.this.email}"
}

resource "google_secret_manager_secret_iam_member" "secrets" {
  for_each  = var.secrets
  project   = var.project_id
  secret_id = each.value
  role      = "roles/secretmanager.secretAccessor"
  member    = "serviceAccount:${google_service_account.this.email}"
}

resource "google_cloud_run_v2_service" "this" {
  project             = var.project_id
  name                = "mapi-${var.env}-${var.name}"
  location            = var.region
  ingress             = var.ingress
  custom_audiences    = var.custom_audiences
  deletion_protection = var.deletion_protection

  template {
    service_account                  = google_service_account.this.email
    timeout                          = var.timeout
    max_instance_request_concurrency = var.concurrency

    scaling {
      min_instance_count = var.min_instances
      max_instance_count = var.max_instances
    }

    containers {
      image   = var.image
      command = [var.binary]

      ports {
        container_port = 8080
      }

      resources {
        limits = {
          cpu    = var.cpu
          memory = var.memory
        }
        cpu_idle = true
      }

      dynamic "env" {
        for_each = var.env_vars
        content {
          name  = env.key
          value = env.value
        }
      }

      dynamic "env" {
        for_each = var.secrets
        content {
          name = env.key
          value_source {
            secret_key_ref {
              secret  = env.value
              version = "latest"
            }
          }
        }
      }

      startup_probe {
        http_get {
          path = "/health"
        }
        period_seconds    = 2
        timeout_seconds   = 2
        failure_threshold = 15
      }

      liveness_probe {
        http_get {
          path = "/health"
        }
        period_seconds    = 15
        timeout_seconds   = 3
        failure_threshold = 3
      }
    }
  }

  lifecycle {
    # gcloud and the console stamp these on every deploy; they carry no
    # configuration.
    ignore_changes = [client, client_version]
  }

  depends_on = [google_secret_manager_secret_iam_member.secrets]
}

resource "google_cloud_run_v2_service_iam_member" "invokers" {
  # Keyed by position: a member may be known only after apply.
  for_each = { for i, member in var.invokers : tostring(i) => member }
  project  = var.project_id
  location = var.region
  name     = google_cloud_run_v2_service.this.name
  role     = "roles/run.invoker"
  member   = each.value
}
