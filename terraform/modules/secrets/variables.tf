variable "project_id" {
  type = string
}

variable "env" {
  type = string
}

variable "secrets" {
  description = "Variable name (MAPI_INTERNAL_TOKEN, …) to the secret's short name."
  type        = map(string)
}
