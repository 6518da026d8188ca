# The whole platform for one environment, composed of the small modules. Each
# environment (envs/prod, envs/dev) calls this once with its own projects and
# sizes, so the environments differ only in their values and every name
# (accounts included) carries `var.env`: dev and prod never share an identity.
#
# Services, ingress and invokers:
# - People reach the platform at one URL, https://DOMAIN (the entry module:
#   a global external Application Load Balancer), which sends each route to
#   submit-api, meter or admin. Those three take INGRESS_TRAFFIC_INTERNAL_LOAD_BALANCER
#   and allUsers as invoker: tenants and operators call them with credentials
#   mapi checks itself (API tokens and session ID tokens), which Cloud Run's
#   IAM cannot. meter's finalize route and every other internal route accept
#   only the internal token or the invoker account's ID token for the task
#   audience (mapi_identity's InternalCaller), and the entry refuses
#   /internal/ outright.
# - submit-tasks, push-events and reconcile-tick are INGRESS_TRAFFIC_INTERNAL_ONLY:
#   only Google services call them (Cloud Tasks, Pub/Sub, Cloud Scheduler), and
#   only the account that calls each may invoke it.
# - Internal calls carry one identity and one audience: the invoker account
#   (MAPI_CLOUDTASKS_SERVICE_ACCOUNT) and the task audience
#   (MAPI_CLOUDTASKS_AUDIENCE), for queue deliveries and scheduler calls alike,
#   because that is the one ID token an internal route accepts. Every service
#   a queue or the scheduler calls lists the task audience as a custom audience.
#
# Service URLs are Cloud Run's deterministic ones
# (https://NAME-PROJECT_NUMBER.REGION.run.app), so services that call each
# other are configured without a dependency cycle.

data "google_project" "control" {
  project_id = var.project_id
}

data "google_project" "exec" {
  project_id = var.exec_project_id
}

locals {
  services = ["submit-api", "submit-tasks", "push-events", "reconcile-tick", "meter", "admin"]
  url = {
    for s in local.services : s => "https://mapi-${var.env}-${s}-${data.google_project.control.number}.${var.region}.run.app"
  }
  public_url     = "https://${var.domain}"
  tasks_audience = "mapi-${var.env}-internal"
  own_account = {
    for s in local.services : s => "mapi-${var.env}-${s}@${var.project_id}.iam.gserviceaccount.com"
  }
  firestore = ["roles/datastore.user"]

  # Settings, by the configuration section that reads them.
  base_env = {
    MAPI_PROFILE            = "multi-tenant"
    MAPI_PUBLIC_URL         = local.public_url
    MAPI_STORE              = "firestore"
    MAPI_FIRESTORE_PROJECT  = var.project_id
    MAPI_FIRESTORE_DATABASE = module.data.database
  }
  sessions_env = {
    MAPI_OIDC_ISSUER        = var.oidc_issuer
    MAPI_OIDC_AUDIENCE      = var.oidc_audience
    MAPI_OIDC_CLI_AUDIENCES = join(",", var.oidc_cli_audiences)
    MAPI_OPERATOR_EMAILS    = join(",", var.operator_emails)
  }
  objects_env = {
    MAPI_OBJECTS              = "gcs"
    MAPI_GCS_BUCKET           = module.data.data_bucket
    MAPI_GCS_BOOTSTRAP_BUCKET = module.data.bootstrap_bucket
  }
  queue_env = {
    MAPI_QUEUE                      = "cloudtasks"
    MAPI_CLOUDTASKS_PROJECT         = var.project_id
    MAPI_CLOUDTASKS_LOCATION        = var.region
    MAPI_SUBMIT_TASKS_URL           = local.url["submit-tasks"]
    MAPI_METER_URL                  = local.url["meter"]
    MAPI_TICK_URL                   = local.url["reconcile-tick"]
    MAPI_CLOUDTASKS_SERVICE_ACCOUNT = module.queues.invoker_email
    MAPI_CLOUDTASKS_AUDIENCE        = local.tasks_audience
  }
  executor_env = {
    MAPI_EXECUTOR          = "cloudrun-jobs"
    MAPI_CLOUDRUN_PROJECT  = var.exec_project_id
    MAPI_CLOUDRUN_REGION   = var.region
    MAPI_ENV               = var.env
    MAPI_CLOUDRUN_GPU_JOBS = tostring(var.gpu_jobs)
  }
  # Endpoints are Cloud Run services in the exec project, served by the
  # worker image (`mapi-worker serve`); a model whose predict is Python by
  # the worker image of its base.
  endpoints_env = {
    MAPI_HOSTING                   = "cloud-run"
    MAPI_ENDPOINTS_PROJECT         = var.exec_project_id
    MAPI_ENDPOINTS_SERVER_IMAGE    = var.image_digests["worker-base-ml"]
    MAPI_ENDPOINTS_BASE_IMAGES = jsonencode({
      for base in ["base-bayes", "base-ml", "base-forecast"] : base => var.image_digests["worker-${base}"]
    })
    MAPI_ENDPOINTS_SERVICE_ACCOUNT = module.endpoints.server_email
    MAPI_ENDPOINTS_BUCKET          = module.data.data_bucket
  }
  signer_env = {
    MAPI_SIGNER                   = "kms"
    MAPI_KMS_KEY_VERSION          = "${module.data.signing_key_id}/cryptoKeyVersions/${var.signing_key_version}"
    MAPI_KMS_TRUSTED_KEY_VERSIONS = join(",", [for v in var.trusted_key_versions : "${module.data.signing_key_id}/cryptoKeyVersions/${v}"])
  }
}

# Every service's secrets. Objects are Cloud Storage's, whose signed URLs
# are Google's, so no service has MAPI_URL_SIGNING_KEY.
module "secrets" {
  source     = "../secrets"
  project_id = var.project_id
  env        = var.env
  secrets = {
    MAPI_INTERNAL_TOKEN = "internal-token"
    MAPI_TOKEN_PEPPER   = "token-pepper"
  }
}

# The console's OIDC client secret, and the CLI's (Google gives its Desktop
# clients one, which admin hands to `mapi login`): only admin may read them.
module "console_secrets" {
  source     = "../secrets"
  project_id = var.project_id
  env        = var.env
  secrets = {
    MAPI_OIDC_CLIENT_SECRET     = "oidc-client-secret"
    MAPI_OIDC_CLI_CLIENT_SECRET = "oidc-cli-client-secret"
  }
}

module "data" {
  source             = "../data"
  project_id         = var.project_id
  env                = var.env
  firestore_location = var.firestore_location
  data_bucket        = var.data_bucket
  bucket_location    = var.bucket_location
  kms_location       = var.region
}

module "network" {
  source     = "../network"
  project_id = var.exec_project_id
  region     = var.region
  env        = var.env
  cidr       = var.exec_cidr
}

module "jobs" {
  source              = "../jobs"
  project_id          = var.exec_project_id
  control_project_id  = var.project_id
  region              = var.region
  env                 = var.env
  gpu_jobs            = var.gpu_jobs
  image_digests       = var.image_digests
  bootstrap_bucket    = module.data.bootstrap_bucket
  network             = module.network.network
  subnetwork          = module.network.subnetwork
  deletion_protection = var.deletion_protection
  orchestrators = {
    submit-api     = module.submit_api.service_account_email
    submit-tasks   = module.submit_tasks.service_account_email
    reconcile-tick = module.reconcile_tick.service_account_email
    meter          = module.meter.service_account_email
    admin          = module.admin.service_account_email
  }
  starters = { submit-tasks = module.submit_tasks.service_account_email }
}

module "endpoints" {
  source      = "../endpoints"
  project_id  = var.exec_project_id
  env         = var.env
  data_bucket = module.data.data_bucket
  hosts = {
    submit-api     = module.submit_api.service_account_email
    reconcile-tick = module.reconcile_tick.service_account_email
  }
}

module "queues" {
  source     = "../queues"
  project_id = var.project_id
  region     = var.region
  env        = var.env
  audience   = local.tasks_audience
  # Retries and concurrency are mapi_platform::queue_configs. dispatch's rate
  # is the jobs.run quota (180 a minute), above the executor's own bucket.
  queues = {
    dispatch = {
      host                      = trimprefix(local.url["submit-tasks"], "https://")
      max_dispatches_per_second = 3
      max_concurrent_dispatches = 16
      max_attempts              = -1
      min_backoff               = "0.5s"
      max_backoff               = "60s"
      max_doublings             = 6
      enqueuers = {
        submit-api     = module.submit_api.service_account_email
        submit-tasks   = module.submit_tasks.service_account_email
        reconcile-tick = module.reconcile_tick.service_account_email
        meter          = module.meter.service_account_email
      }
    }
    finalize = {
      host                      = trimprefix(local.url["meter"], "https://")
      max_dispatches_per_second = 50
      max_concurrent_dispatches = 16
      max_attempts              = -1
      min_backoff               = "0.5s"
      max_backoff               = "60s"
      max_doublings             = 6
      enqueuers                 = { reconcile-tick = module.reconcile_tick.service_account_email }
    }
    # Webhook messages: each attempt is its own task, scheduled by the
    # handler's own back-off; the queue retries only a handler that failed.
    webhooks = {
      host                      = trimprefix(local.url["submit-tasks"], "https://")
      max_dispatches_per_second = 20
      max_concurrent_dispatches = 16
      max_attempts              = -1
      min_backoff               = "0.5s"
      max_backoff               = "60s"
      max_doublings             = 6
      enqueuers = {
        submit-api     = module.submit_api.service_account_email
        submit-tasks   = module.submit_tasks.service_account_email
        reconcile-tick = module.reconcile_tick.service_account_email
      }
    }
    job-fanout = {
      host                      = trimprefix(local.url["submit-tasks"], "https://")
      max_dispatches_per_second = 50
      max_concurrent_dispatches = 16
      max_attempts              = -1
      min_backoff               = "0.5s"
      max_backoff               = "60s"
      max_doublings             = 6
      enqueuers = {
        submit-api   = module.submit_api.service_account_email
        submit-tasks = module.submit_tasks.service_account_email
      }
    }
    job-items = {
      host                      = trimprefix(local.url["submit-tasks"], "https://")
      max_dispatches_per_second = 500
      max_concurrent_dispatches = 32
      max_attempts              = -1
      min_backoff               = "0.2s"
      max_backoff               = "10s"
      max_doublings             = 5
      enqueuers = {
        submit-api   = module.submit_api.service_account_email
        submit-tasks = module.submit_tasks.service_account_email
      }
    }
    # Follow-up ticks (MAPI_TICK_FOLLOW_UP_S): asked for by a tick while work
    # is active, and by a dispatch, a new item job or an endpoint change; one
    # at a time (the tick lease serializes them anyway).
    tick = {
      host                      = trimprefix(local.url["reconcile-tick"], "https://")
      max_dispatches_per_second = 5
      max_concurrent_dispatches = 1
      max_attempts              = -1
      min_backoff               = "0.5s"
      max_backoff               = "60s"
      max_doublings             = 6
      enqueuers = {
        submit-api     = module.submit_api.service_account_email
        submit-tasks   = module.submit_tasks.service_account_email
        reconcile-tick = module.reconcile_tick.service_account_email
      }
    }
    # Workflow runs' advances: served by submit-api, which admits a workflow's
    # child runs, submits its validations and promotes as the tenant API does.
    workflows = {
      host                      = trimprefix(local.url["submit-api"], "https://")
      max_dispatches_per_second = 20
      max_concurrent_dispatches = 16
      max_attempts              = -1
      min_backoff               = "0.5s"
      max_backoff               = "60s"
      max_doublings             = 6
      enqueuers = {
        submit-api     = module.submit_api.service_account_email
        reconcile-tick = module.reconcile_tick.service_account_email
      }
    }
    # A tenant's export and purge: rare, long, one delivery at a time.
    tenant-export = {
      host                      = trimprefix(local.url["submit-tasks"], "https://")
      max_dispatches_per_second = 1
      max_concurrent_dispatches = 1
      max_attempts              = -1
      min_backoff               = "0.5s"
      max_backoff               = "60s"
      max_doublings             = 6
      enqueuers = {
        admin          = module.admin.service_account_email
        reconcile-tick = module.reconcile_tick.service_account_email
      }
    }
    tenant-purge = {
      host                      = trimprefix(local.url["submit-tasks"], "https://")
      max_dispatches_per_second = 1
      max_concurrent_dispatches = 1
      max_attempts              = -1
      min_backoff               = "0.5s"
      max_backoff               = "60s"
      max_doublings             = 6
      enqueuers = {
        admin          = module.admin.service_account_email
        submit-tasks   = module.submit_tasks.service_account_email
        reconcile-tick = module.reconcile_tick.service_account_email
      }
    }
  }
}

module "events" {
  source          = "../events"
  project_id      = var.project_id
  exec_project_id = var.exec_project_id
  env             = var.env
  push_endpoint   = "${local.url["push-events"]}/internal/events"
  push_audience   = local.url["push-events"]
}

module "scheduler" {
  source                = "../scheduler"
  project_id            = var.project_id
  region                = var.region
  env                   = var.env
  service_account_email = module.queues.invoker_email
  audience              = local.tasks_audience
  jobs = {
    reconcile-tick = {
      schedule         = "* * * * *"
      attempt_deadline = "60s"
      uri              = "${local.url["reconcile-tick"]}/internal/tick"
    }
    housekeep = {
      schedule         = "*/10 * * * *"
      attempt_deadline = "300s"
      uri              = "${local.url["submit-tasks"]}/internal/tasks/jobs/housekeep"
    }
    housekeep-runs = {
      schedule         = "5-59/10 * * * *"
      attempt_deadline = "300s"
      uri              = "${local.url["submit-tasks"]}/internal/tasks/runs/housekeep"
    }
  }
}

# The public routes of meter and admin, in the order the entry matches them
# (a template's {name=*} is one path segment); everything else people call
# is submit's API, the entry's default.
locals {
  entry_routes = [
    { service = "meter", match = "template", path = "/v1/tenants/{tenant=*}/usage" },
    { service = "meter", match = "template", path = "/v1/tenants/{tenant=*}/projects/{project=*}/usage" },
    { service = "admin", match = "prefix", path = "/v1/admin/" },
    { service = "admin", match = "full", path = "/v1/sessions" },
    { service = "admin", match = "full", path = "/v1/sessions/cli-client" },
    { service = "admin", match = "full", path = "/console" },
    { service = "admin", match = "prefix", path = "/console/" },
    { service = "admin", match = "full", path = "/v1/whoami" },
    { service = "admin", match = "template", path = "/v1/tenants/{tenant=*}" },
    { service = "admin", match = "template", path = "/v1/tenants/{tenant=*}/members" },
    { service = "admin", match = "template", path = "/v1/tenants/{tenant=*}/members/{email=*}" },
    { service = "admin", match = "template", path = "/v1/tenants/{tenant=*}/audit" },
    { service = "admin", match = "template", path = "/v1/tenants/{tenant=*}/access-checks" },
    { service = "admin", match = "template", path = "/v1/tenants/{tenant=*}/exports" },
    { service = "admin", match = "template", path = "/v1/tenants/{tenant=*}/exports/{id=*}" },
    { service = "admin", match = "template", path = "/v1/tenants/{tenant=*}/deletion" },
    { service = "admin", match = "template", path = "/v1/tenants/{tenant=*}/deletion/cancel" },
    { service = "admin", match = "template", path = "/v1/tenants/{tenant=*}/deletion/purge" },
    { service = "admin", match = "template", path = "/v1/tenants/{tenant=*}/projects" },
    { service = "admin", match = "template", path = "/v1/tenants/{tenant=*}/projects/{project=*}" },
    { service = "admin", match = "template", path = "/v1/tenants/{tenant=*}/projects/{project=*}/members" },
    { service = "admin", match = "template", path = "/v1/tenants/{tenant=*}/projects/{project=*}/members/{email=*}" },
    { service = "admin", match = "template", path = "/v1/tenants/{tenant=*}/projects/{project=*}/tokens" },
    { service = "admin", match = "template", path = "/v1/tenants/{tenant=*}/projects/{project=*}/tokens/{id=*}" },
    { service = "admin", match = "template", path = "/v1/tenants/{tenant=*}/projects/{project=*}/access-checks" },
  ]
}

module "entry" {
  source     = "../entry"
  project_id = var.project_id
  region     = var.region
  env        = var.env
  domain     = var.domain
  services = {
    submit-api = module.submit_api.name
    meter      = module.meter.name
    admin      = module.admin.name
  }
  default_service = "submit-api"
  routes          = local.entry_routes
}

module "monitoring" {
  source                   = "../monitoring"
  project_id               = var.project_id
  env                      = var.env
  project_numbers          = [data.google_project.control.number, data.google_project.exec.number]
  billing_account          = var.billing_account
  spend_cap_usd            = var.spend_cap_usd
  notification_channels    = var.notification_channels
  dead_letter_subscription = module.events.dead_letter_subscription
}

module "submit_api" {
  source              = "../service"
  project_id          = var.project_id
  region              = var.region
  env                 = var.env
  name                = "submit-api"
  binary              = "mapi-submit"
  image               = var.image_digests["mapi"]
  ingress             = "INGRESS_TRAFFIC_INTERNAL_LOAD_BALANCER"
  invokers            = ["allUsers"]
  # The workflows queue's deliveries (their ID tokens name this audience).
  custom_audiences    = [local.tasks_audience]
  memory              = "1Gi"
  max_instances       = var.max_instances
  deletion_protection = var.deletion_protection
  project_roles       = local.firestore
  secrets             = module.secrets.secret_ids
  env_vars = merge(
    local.base_env,
    local.sessions_env,
    local.objects_env,
    {
      MAPI_GCS_SIGNING_SERVICE_ACCOUNT  = local.own_account["submit-api"]
      MAPI_GCS_UPLOADER_SERVICE_ACCOUNT = module.data.uploader_email
    },
    local.queue_env,
    local.executor_env,
    local.endpoints_env,
    local.signer_env,
  )
}

module "submit_tasks" {
  source              = "../service"
  project_id          = var.project_id
  region              = var.region
  env                 = var.env
  name                = "submit-tasks"
  binary              = "mapi-tasks"
  image               = var.image_digests["mapi"]
  invokers            = ["serviceAccount:${module.queues.invoker_email}"]
  custom_audiences    = [local.tasks_audience]
  memory              = "1Gi"
  timeout             = "60s"
  max_instances       = var.max_instances
  deletion_protection = var.deletion_protection
  project_roles       = local.firestore
  secrets             = module.secrets.secret_ids
  env_vars = merge(
    local.base_env,
    {
      MAPI_JOB_RETENTION_DAYS = tostring(var.job_retention_days)
      MAPI_RUN_RETENTION_DAYS = tostring(var.run_retention_days)
      # A dispatch waits for its jobs.run slot less than its 30 s dispatch deadline.
      MAPI_CLOUDRUN_MAX_SUBMIT_WAIT_S  = "20"
      MAPI_GCS_SIGNING_SERVICE_ACCOUNT = local.own_account["submit-tasks"]
    },
    local.objects_env,
    local.queue_env,
    local.executor_env,
  )
}

module "push_events" {
  source              = "../service"
  project_id          = var.project_id
  region              = var.region
  env                 = var.env
  name                = "push-events"
  binary              = "mapi-push-events"
  image               = var.image_digests["mapi"]
  invokers            = ["serviceAccount:${module.events.push_service_account_email}"]
  max_instances       = var.max_instances
  deletion_protection = var.deletion_protection
  project_roles       = local.firestore
  secrets             = module.secrets.secret_ids
  env_vars = merge(
    local.base_env,
    {
      MAPI_PUBSUB_PUSH_AUDIENCE        = local.url["push-events"]
      MAPI_PUBSUB_PUSH_SERVICE_ACCOUNT = module.events.push_service_account_email
      MAPI_PUBSUB_PUSH_SUBSCRIPTIONS   = module.events.push_subscription_id
    },
  )
}

module "reconcile_tick" {
  source              = "../service"
  project_id          = var.project_id
  region              = var.region
  env                 = var.env
  name                = "reconcile-tick"
  binary              = "mapi-reconcile-tick"
  image               = var.image_digests["mapi"]
  invokers            = ["serviceAccount:${module.queues.invoker_email}"]
  custom_audiences    = [local.tasks_audience]
  max_instances       = 2
  deletion_protection = var.deletion_protection
  project_roles       = local.firestore
  secrets             = module.secrets.secret_ids
  env_vars            = merge(local.base_env, local.queue_env, local.executor_env, local.endpoints_env)
}

module "meter" {
  source              = "../service"
  project_id          = var.project_id
  region              = var.region
  env                 = var.env
  name                = "meter"
  binary              = "mapi-meter"
  image               = var.image_digests["mapi"]
  ingress             = "INGRESS_TRAFFIC_INTERNAL_LOAD_BALANCER"
  invokers            = ["allUsers"]
  custom_audiences    = [local.tasks_audience]
  timeout             = "60s"
  max_instances       = var.max_instances
  deletion_protection = var.deletion_protection
  project_roles       = local.firestore
  secrets             = module.secrets.secret_ids
  env_vars = merge(
    local.base_env,
    local.objects_env,
    local.queue_env,
    local.executor_env,
    local.signer_env,
  )
}

module "admin" {
  source              = "../service"
  project_id          = var.project_id
  region              = var.region
  env                 = var.env
  name                = "admin"
  binary              = "mapi-admin"
  image               = var.image_digests["mapi"]
  ingress             = "INGRESS_TRAFFIC_INTERNAL_LOAD_BALANCER"
  invokers            = ["allUsers"]
  max_instances       = var.max_instances
  deletion_protection = var.deletion_protection
  project_roles       = local.firestore
  secrets             = merge(module.secrets.secret_ids, module.console_secrets.secret_ids)
  # The queue: admin pushes tenants' exports and purges.
  env_vars = merge(local.base_env, local.sessions_env, local.queue_env, local.executor_env, {
    # How long a console sign-in lasts (the client id is MAPI_OIDC_AUDIENCE).
    MAPI_CONSOLE_SESSION_S = tostring(var.console_session_s)
  })
}

# Objects: each service on the buckets it touches, nothing project-wide.
resource "google_storage_bucket_iam_member" "objects" {
  for_each = {
    "submit-api/data"        = { bucket = module.data.data_bucket, account = module.submit_api.service_account_email }
    "submit-tasks/data"      = { bucket = module.data.data_bucket, account = module.submit_tasks.service_account_email }
    "submit-tasks/bootstrap" = { bucket = module.data.bootstrap_bucket, account = module.submit_tasks.service_account_email }
    "meter/data"             = { bucket = module.data.data_bucket, account = module.meter.service_account_email }
  }
  bucket = each.value.bucket
  role   = "roles/storage.objectAdmin"
  member = "serviceAccount:${each.value.account}"
}

# Signed URLs are signed by signBlob as the service's own account; upload
# policies as the create-only uploader. Each grant is on one account.
resource "google_service_account_iam_member" "sign_blob" {
  for_each = {
    "submit-api/self"     = { target = module.submit_api.service_account_name, account = module.submit_api.service_account_email }
    "submit-tasks/self"   = { target = module.submit_tasks.service_account_name, account = module.submit_tasks.service_account_email }
    "submit-api/uploader" = { target = module.data.uploader_name, account = module.submit_api.service_account_email }
  }
  service_account_id = each.value.target
  role               = "roles/iam.serviceAccountTokenCreator"
  member             = "serviceAccount:${each.value.account}"
}

# The bundle signer: meter signs; submit-api loads the public keys it verifies
# with (the task routes verify nothing).
resource "google_kms_crypto_key_iam_member" "signer" {
  crypto_key_id = module.data.signing_key_id
  role          = "roles/cloudkms.signerVerifier"
  member        = "serviceAccount:${module.meter.service_account_email}"
}

resource "google_kms_crypto_key_iam_member" "verifiers" {
  for_each = {
    submit-api = module.submit_api.service_account_email
  }
  crypto_key_id = module.data.signing_key_id
  role          = "roles/cloudkms.publicKeyViewer"
  member        = "serviceAccount:${each.value}"
}

# The exec project's Cloud Run agent pulls the worker images from the control
# project's repository (deploy.sh pushes there); reading it is all it may do.
resource "google_artifact_registry_repository_iam_member" "exec_pulls_images" {
  project    = var.project_id
  location   = var.region
  repository = var.image_repository
  role       = "roles/artifactregistry.reader"
  member     = "serviceAccount:service-${data.google_project.exec.number}@serverless-robot-prod.iam.gserviceaccount.com"
}
