variable "project_id" {
  description = "The control project (topics, subscriptions)."
  type        = string
}

variable "exec_project_id" {
  description = "The exec project, whose executions' logs the sink reads."
  type        = string
}

variable "env" {
  type = string
}

variable "push_endpoint" {
  description = "push-events' URL and its route, POST /internal/events."
  type        = string
}

variable "push_audience" {
  description = "The audience of push tokens: MAPI_PUBSUB_PUSH_AUDIENCE on push-events."
  type        = string
}
