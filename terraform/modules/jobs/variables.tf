variable "project_id" {
  description = "The exec project that holds the inventory (MAPI_CLOUDRUN_PROJECT)."
  type        = string
}

variable "control_project_id" {
  description = "The control project, which holds the bootstrap bucket."
  type        = string
}

variable "region" {
  description = "MAPI_CLOUDRUN_REGION."
  type        = string
}

variable "env" {
  description = "MAPI_ENV: the {env} of Job names."
  type        = string
}

variable "job_template" {
  description = "MAPI_CLOUDRUN_JOB_TEMPLATE: the rule for Job ids."
  type        = string
  default     = "mapi-{env}-{base}-{class}"
}

variable "bases" {
  description = "The base images: every value of MAPI_CLOUDRUN_PLUGIN_BASES and MAPI_CLOUDRUN_DEFAULT_BASE."
  type        = list(string)
  default     = ["base-bayes", "base-dl", "base-forecast", "base-ml"]
}

variable "gpu_base" {
  description = "The base that has a GPU Job."
  type        = string
  default     = "base-dl"
}

variable "gpu_jobs" {
  description = "MAPI_CLOUDRUN_GPU_JOBS: whether the inventory has the GPU Job."
  type        = bool
  default     = false
}

variable "image_digests" {
  description = "Image references by name (`worker-base-bayes`, …), by digest."
  type        = map(string)
}

variable "bootstrap_bucket" {
  type = string
}

variable "network" {
  type = string
}

variable "subnetwork" {
  type = string
}

variable "orchestrators" {
  description = "Service name to the runtime account of each service that uses the executor (run, poll, cancel, list)."
  type        = map(string)
}

variable "starters" {
  description = "Service name to the runtime account of each service that starts executions, so acts as the execution account."
  type        = map(string)
}

variable "default_timeout" {
  description = "A task's timeout when jobs.run does not override it (it always does)."
  type        = string
  default     = "3600s"
}

variable "deletion_protection" {
  type    = bool
  default = true
}
