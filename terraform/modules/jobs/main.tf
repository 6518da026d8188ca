# The cloudrun-jobs executor's fixed inventory in the exec project: one Job per
# base image and resource class, named as the executor names them
# (`MAPI_CLOUDRUN_JOB_TEMPLATE`), and the GPU Job of base-dl when `gpu_jobs`.
#
# Rules:
# - A Job never retries a task (`max_retries = 0`): the platform decides what
#   a failed attempt means and starts the next one itself.
# - Every Job runs as the execution account, which may only take (get, then
#   delete) objects of the bootstrap bucket.
# - Every Job sends ALL_TRAFFIC into the deny-all-egress network.
# - A Job's task timeout and environment are overridden per attempt
#   (`jobs.run`: MAPI_RUN_ID, MAPI_NONCE, task count, timeout); its static
#   environment is MAPI_BOOTSTRAP_URL, where the worker takes its bootstrap.
# - The services that run, poll and cancel executions hold the orchestrator
#   role (these permissions and no others), and only the dispatcher may act
#   as the execution account.

locals {
  # The resources of each class (mapi_domain::ResourceClass).
  classes = {
    S = { cpu = "2", memory = "8Gi" }
    M = { cpu = "4", memory = "16Gi" }
    L = { cpu = "8", memory = "32Gi" }
  }
  gpu = { cpu = "8", memory = "32Gi", gpus = "1", accelerator = "nvidia-l4" }

  cpu_jobs = merge([
    for base in var.bases : {
      for class, size in local.classes :
      replace(replace(replace(var.job_template, "{env}", var.env), "{base}", base), "{class}", lower(class)) => {
        base   = base
        cpu    = size.cpu
        memory = size.memory
      }
    }
  ]...)
  gpu_job_id = replace(replace(replace(var.job_template, "{env}", var.env), "{base}", var.gpu_base), "{class}", "gpu")

  bootstrap_url = "gs://${var.bootstrap_bucket}/{nonce}"
}

resource "google_service_account" "execution" {
  project      = var.project_id
  account_id   = "mapi-${var.env}-exec"
  display_name = "mapi ${var.env} executions (takes its bootstrap, nothing else)"
}

resource "google_project_iam_custom_role" "bootstrap_taker" {
  project     = var.control_project_id
  role_id     = "mapi_${var.env}_bootstrap_taker"
  title       = "mapi ${var.env} bootstrap taker"
  description = "Read, then delete, one bootstrap object."
  permissions = ["storage.objects.delete", "storage.objects.get"]
}

resource "google_storage_bucket_iam_member" "execution_takes_bootstrap" {
  bucket = var.bootstrap_bucket
  role   = google_project_iam_custom_role.bootstrap_taker.id
  member = "serviceAccount:${google_service_account.execution.email}"
}

resource "google_project_iam_custom_role" "orchestrator" {
  project     = var.project_id
  role_id     = "mapi_${var.env}_orchestrator"
  title       = "mapi ${var.env} orchestrator"
  description = "Start executions of the inventory's Jobs (with overrides), poll and cancel them, read what they printed."
  # jobs.run with container, task-count and timeout overrides needs
  # run.jobs.runWithOverrides besides run.jobs.run. `GET /v1/runs/{id}/logs` lists the
  # execution's entries in this project's Cloud Logging (logging.logEntries.list).
  permissions = [
    "logging.logEntries.list",
    "run.executions.cancel",
    "run.executions.get",
    "run.executions.list",
    "run.jobs.run",
    "run.jobs.runWithOverrides",
    "run.tasks.list",
  ]
}

resource "google_project_iam_member" "orchestrators" {
  for_each = var.orchestrators
  project  = var.project_id
  role     = google_project_iam_custom_role.orchestrator.id
  member   = "serviceAccount:${each.value}"
}

resource "google_service_account_iam_member" "starters_act_as_execution" {
  for_each           = var.starters
  service_account_id = google_service_account.execution.name
  role               = "roles/iam.serviceAccountUser"
  member             = "serviceAccount:${each.value}"
}

resource "google_cloud_run_v2_job" "cpu" {
  for_each            = local.cpu_jobs
  project             = var.project_id
  name                = each.key
  location            = var.region
  deletion_protection = var.deletion_protection

  template {
    task_count = 1

    template {
      service_account       = google_service_account.execution.email
      max_retries           = 0
      timeout               = var.default_timeout
      execution_environment = "EXECUTION_ENVIRONMENT_GEN2"

      containers {
        image = var.image_digests["worker-${each.value.base}"]

        resources {
          limits = {
            cpu    = each.value.cpu
            memory = each.value.memory
          }
        }

        env {
          name  = "MAPI_BOOTSTRAP_URL"
          value = local.bootstrap_url
        }
      }

      vpc_access {
        egress = "ALL_TRAFFIC"
        network_interfaces {
          network    = var.network
          subnetwork = var.subnetwork
        }
      }
    }
  }

  lifecycle {
    ignore_changes = [client, client_version]
  }
}

resource "google_cloud_run_v2_job" "gpu" {
  count               = var.gpu_jobs ? 1 : 0
  project             = var.project_id
  name                = local.gpu_job_id
  location            = var.region
  deletion_protection = var.deletion_protection

  template {
    task_count = 1

    template {
      service_account               = google_service_account.execution.email
      max_retries                   = 0
      timeout                       = var.default_timeout
      execution_environment         = "EXECUTION_ENVIRONMENT_GEN2"
      gpu_zonal_redundancy_disabled = true

      node_selector {
        accelerator = local.gpu.accelerator
      }

      containers {
        image = var.image_digests["worker-${var.gpu_base}"]

        resources {
          limits = {
            cpu              = local.gpu.cpu
            memory           = local.gpu.memory
            "nvidia.com/gpu" = local.gpu.gpus
          }
        }

        env {
          name  = "MAPI_BOOTSTRAP_URL"
          value = local.bootstrap_url
        }
      }

      vpc_access {
        egress = "ALL_TRAFFIC"
        network_interfaces {
          network    = var.network
          subnetwork = var.subnetwork
        }
      }
    }
  }

  lifecycle {
    ignore_changes = [client, client_version]
  }
}
