variable "project_id" {
  description = "The exec project the model services run in (MAPI_ENDPOINTS_PROJECT)."
  type        = string
}

variable "env" {
  description = "The environment, in every name."
  type        = string
}

variable "data_bucket" {
  description = "MAPI_ENDPOINTS_BUCKET: the data bucket, where bundles are."
  type        = string
}

variable "hosts" {
  description = "The services that deploy and score endpoints: name => service account e-mail."
  type        = map(string)
}
