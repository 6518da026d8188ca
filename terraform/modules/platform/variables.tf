variable "project_id" {
  description = "The control project: services, Firestore, buckets, queues, topics."
  type        = string
}

variable "exec_project_id" {
  description = "The exec project: the Job inventory and its network (MAPI_CLOUDRUN_PROJECT)."
  type        = string
}

variable "region" {
  type = string
}

variable "env" {
  description = "MAPI_ENV; part of every resource and account name."
  type        = string

  validation {
    condition     = can(regex("^[a-z][a-z0-9]{1,5}$", var.env))
    error_message = "env is 2 to 6 lowercase letters or digits (account ids are at most 30 characters)."
  }
}

variable "image_digests" {
  description = "Written by deploy.sh to images.auto.tfvars.json: mapi, worker-base-bayes, worker-base-ml, worker-base-forecast, worker-base-dl, each by digest."
  type        = map(string)

  validation {
    condition     = alltrue([for ref in values(var.image_digests) : can(regex("@sha256:[0-9a-f]{64}$", ref))])
    error_message = "every image is pinned by digest (…@sha256:<64 hex>)."
  }
}

variable "gpu_jobs" {
  description = "MAPI_CLOUDRUN_GPU_JOBS: the inventory has the GPU Job of base-dl."
  type        = bool
  default     = false
}

variable "domain" {
  description = "The host people reach the platform at: MAPI_PUBLIC_URL is https://DOMAIN (the entry's certificate is for it)."
  type        = string
}

variable "image_repository" {
  description = "The Artifact Registry repository (in project_id and region) deploy.sh pushes the images to."
  type        = string
  default     = "mapi"
}

variable "oidc_issuer" {
  description = "MAPI_OIDC_ISSUER: the issuer of session ID tokens."
  type        = string
}

variable "oidc_audience" {
  description = "MAPI_OIDC_AUDIENCE: the console's OAuth client id (with Google, a Web application client), the audience of its ID tokens."
  type        = string
}

variable "oidc_cli_audiences" {
  description = "MAPI_OIDC_CLI_AUDIENCES: further OAuth client ids whose ID tokens open sessions (the CLI's Desktop client; gcloud's, for `gcloud auth print-identity-token`)."
  type        = list(string)
  default     = []
}

variable "operator_emails" {
  description = "MAPI_OPERATOR_EMAILS."
  type        = list(string)
  default     = []
}

variable "firestore_location" {
  type = string
}

variable "bucket_location" {
  type = string
}

variable "data_bucket" {
  description = "MAPI_GCS_BUCKET (globally unique)."
  type        = string
}

variable "exec_cidr" {
  type = string
}

variable "signing_key_version" {
  description = "The signing key's version that signs (MAPI_KMS_KEY_VERSION)."
  type        = number
  default     = 1
}

variable "trusted_key_versions" {
  description = "Earlier versions whose signatures still verify (MAPI_KMS_TRUSTED_KEY_VERSIONS)."
  type        = list(number)
  default     = []
}

variable "job_retention_days" {
  description = "MAPI_JOB_RETENTION_DAYS."
  type        = number
  default     = 30
}

variable "run_retention_days" {
  description = "MAPI_RUN_RETENTION_DAYS: how long an ended run's executions and logs are kept."
  type        = number
  default     = 30
}

variable "billing_account" {
  type = string
}

variable "spend_cap_usd" {
  type = number
}

variable "notification_channels" {
  type    = list(string)
  default = []
}

variable "max_instances" {
  type    = number
  default = 10
}

variable "deletion_protection" {
  type    = bool
  default = true
}

variable "console_session_s" {
  description = "MAPI_CONSOLE_SESSION_S: how long a console sign-in lasts, in seconds."
  type        = number
  default     = 3600

  validation {
    condition     = var.console_session_s >= 300 && var.console_session_s <= 43200
    error_message = "A console session lasts from 5 minutes to 12 hours."
  }
}
