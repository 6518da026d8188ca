variable "project_id" {
  type = string
}

variable "region" {
  type = string
}

variable "env" {
  type = string
}

variable "service_account_email" {
  description = "The internal invoker account (MAPI_CLOUDTASKS_SERVICE_ACCOUNT)."
  type        = string
}

variable "audience" {
  description = "The task audience (MAPI_CLOUDTASKS_AUDIENCE)."
  type        = string
}

variable "jobs" {
  description = "Job name (as the route table's caller names it) to its schedule, deadline and target URL."
  type = map(object({
    schedule         = string
    attempt_deadline = string
    uri              = string
  }))
}
