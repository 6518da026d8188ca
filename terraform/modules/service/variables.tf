variable "project_id" {
  description = "The control project the service runs in."
  type        = string
}

variable "region" {
  type = string
}

variable "env" {
  description = "The environment (prod, dev): part of every name, so environments never share an identity."
  type        = string
}

variable "name" {
  description = "The service's name as the route table writes it (submit-api, submit-tasks, push-events, reconcile-tick, meter, admin)."
  type        = string
}

variable "image" {
  description = "The control-plane image `mapi`, by digest."
  type        = string
}

variable "binary" {
  description = "The function's binary in the image (its crate's package name)."
  type        = string
}

variable "env_vars" {
  description = "Plain settings: names of the platform's variables to non-secret values."
  type        = map(string)
}

variable "secrets" {
  description = "Secret settings: variable name to the Secret Manager secret id that holds it."
  type        = map(string)
  default     = {}
}

variable "ingress" {
  description = "INGRESS_TRAFFIC_INTERNAL_ONLY unless people call the service."
  type        = string
  default     = "INGRESS_TRAFFIC_INTERNAL_ONLY"
}

variable "invokers" {
  description = "Members granted roles/run.invoker on this service, and no one else."
  type        = list(string)
  default     = []
}

variable "custom_audiences" {
  description = "ID-token audiences Cloud Run accepts besides the service's URL."
  type        = list(string)
  default     = []
}

variable "project_roles" {
  description = "Project-level roles of the runtime account (Firestore access); everything else is granted on the resource."
  type        = list(string)
  default     = []
}

variable "cpu" {
  type    = string
  default = "1"
}

variable "memory" {
  type    = string
  default = "512Mi"
}

variable "timeout" {
  description = "The request timeout; above the dispatch deadline of any queue that calls the service."
  type        = string
  default     = "60s"
}

variable "concurrency" {
  type    = number
  default = 80
}

variable "min_instances" {
  type    = number
  default = 0
}

variable "max_instances" {
  type    = number
  default = 10
}

variable "deletion_protection" {
  type    = bool
  default = true
}
