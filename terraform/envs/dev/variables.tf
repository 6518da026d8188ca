variable "project_id" {
  type = string
}

variable "exec_project_id" {
  type = string
}

variable "region" {
  type = string
}

variable "env" {
  type = string
}

variable "image_digests" {
  description = "Set by deploy.sh in images.auto.tfvars.json."
  type        = map(string)
}

variable "gpu_jobs" {
  type    = bool
  default = false
}

variable "domain" {
  description = "The host people reach the platform at (https://DOMAIN is MAPI_PUBLIC_URL)."
  type        = string
}

variable "oidc_issuer" {
  type = string
}

variable "oidc_audience" {
  description = "The console's OAuth client id (README, first deploy: sign-in)."
  type        = string
}

variable "oidc_cli_audiences" {
  description = "The CLI's OAuth client id, and gcloud's (README, first deploy: sign-in)."
  type        = list(string)
  default     = []
}

variable "operator_emails" {
  type    = list(string)
  default = []
}

variable "firestore_location" {
  type = string
}

variable "bucket_location" {
  type = string
}

variable "data_bucket" {
  type = string
}

variable "exec_cidr" {
  type = string
}

variable "signing_key_version" {
  type    = number
  default = 1
}

variable "trusted_key_versions" {
  type    = list(number)
  default = []
}

variable "job_retention_days" {
  type    = number
  default = 30
}

variable "run_retention_days" {
  type    = number
  default = 30
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
