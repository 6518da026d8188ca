variable "project_id" {
  description = "The exec project."
  type        = string
}

variable "region" {
  type = string
}

variable "env" {
  type = string
}

variable "cidr" {
  description = "The executions' subnet (Direct VPC egress takes its addresses from it)."
  type        = string
}
