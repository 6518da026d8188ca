variable "project_id" {
  type = string
}

variable "region" {
  description = "MAPI_CLOUDTASKS_LOCATION."
  type        = string
}

variable "env" {
  type = string
}

variable "audience" {
  description = "MAPI_CLOUDTASKS_AUDIENCE: the one audience of every delivery's token."
  type        = string
}

variable "queues" {
  description = "Queue name to its target host, limits, retries and the accounts that push to it (service name to account)."
  type = map(object({
    host                      = string
    max_dispatches_per_second = number
    max_concurrent_dispatches = number
    max_attempts              = number
    min_backoff               = string
    max_backoff               = string
    max_doublings             = number
    enqueuers                 = map(string)
  }))
}
