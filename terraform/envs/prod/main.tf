# The prod environment: the platform module with this environment's projects,
# sizes and identities (every account id carries `env`).

terraform {
  required_version = ">= 1.6"

  required_providers {
    google = {
      source  = "hashicorp/google"
      version = "~> 6.47"
    }
  }
}

provider "google" {
  project = var.project_id
  region  = var.region
}

module "platform" {
  source = "../../modules/platform"

  project_id            = var.project_id
  exec_project_id       = var.exec_project_id
  region                = var.region
  env                   = var.env
  image_digests         = var.image_digests
  gpu_jobs              = var.gpu_jobs
  domain                = var.domain
  oidc_issuer           = var.oidc_issuer
  oidc_audience         = var.oidc_audience
  oidc_cli_audiences    = var.oidc_cli_audiences
  operator_emails       = var.operator_emails
  firestore_location    = var.firestore_location
  bucket_location       = var.bucket_location
  data_bucket           = var.data_bucket
  exec_cidr             = var.exec_cidr
  signing_key_version   = var.signing_key_version
  trusted_key_versions  = var.trusted_key_versions
  job_retention_days    = var.job_retention_days
  run_retention_days    = var.run_retention_days
  billing_account       = var.billing_account
  spend_cap_usd         = var.spend_cap_usd
  notification_channels = var.notification_channels
  max_instances         = var.max_instances
  deletion_protection   = var.deletion_protection
}

output "public_url" {
  value = module.platform.public_url
}

output "entry_address" {
  value = module.platform.entry_address
}

output "urls" {
  value = module.platform.urls
}

output "job_ids" {
  value = module.platform.job_ids
}
