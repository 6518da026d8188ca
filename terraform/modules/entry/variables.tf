variable "project_id" {
  type = string
}

variable "region" {
  type = string
}

variable "env" {
  type = string
}

variable "domain" {
  description = "The public host name (MAPI_PUBLIC_URL is https://DOMAIN); its DNS A record points at the output `address`."
  type        = string
}

variable "services" {
  description = "The Cloud Run services behind the entry: short name (submit-api, meter, admin) to service name."
  type        = map(string)
}

variable "default_service" {
  description = "The short name of the service that takes every path no route matches."
  type        = string
}

variable "routes" {
  description = "In priority order: each path (match = prefix, full or template) and the service that serves it."
  type = list(object({
    service = string
    match   = string
    path    = string
  }))

  validation {
    condition     = alltrue([for r in var.routes : contains(["prefix", "full", "template"], r.match)])
    error_message = "a route's match is prefix, full or template."
  }
}

variable "refused_prefixes" {
  description = "Path prefixes answered 404 at the entry, before any route."
  type        = list(string)
  default     = ["/internal/", "/metrics"]
}
