variable "project_id" {
  type = string
}

variable "env" {
  type = string
}

variable "database" {
  description = "MAPI_FIRESTORE_DATABASE."
  type        = string
  default     = "(default)"
}

variable "firestore_location" {
  type = string
}

variable "data_bucket" {
  description = "MAPI_GCS_BUCKET; the bootstrap bucket is this with `-bootstrap`."
  type        = string
}

variable "bucket_location" {
  type = string
}

variable "bootstrap_retention_days" {
  description = "Days an untaken bootstrap is kept: above MAPI_CLOUDRUN_ADOPT_LOOKBACK_S."
  type        = number
  default     = 2
}

variable "kms_location" {
  type = string
}

variable "kms_protection_level" {
  type    = string
  default = "HSM"
}
