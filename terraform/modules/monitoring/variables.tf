variable "project_id" {
  type = string
}

variable "env" {
  type = string
}

variable "project_numbers" {
  description = "The control and exec projects' numbers, whose spend the budget counts."
  type        = list(string)
}

variable "billing_account" {
  type = string
}

variable "spend_cap_usd" {
  description = "A budget in USD for Google's bill of both projects in a period: a backstop beside the platform's own spend cap, which the spend_cap_70 and spend_cap_90 alarms watch."
  type        = number
}

variable "spend_cap_period" {
  description = "MONTH or another calendar period of the budget."
  type        = string
  default     = "MONTH"
}

variable "notification_channels" {
  type    = list(string)
  default = []
}

variable "throttled_message" {
  description = "The message of the executor's log line on a jobs.run 429 (mapi_cloudrun::THROTTLED_ALARM)."
  type        = string
  default     = "ALARM cloudrun-jobs: jobs.run answered 429"
}

variable "webhook_sweep_alarm_message" {
  description = "The message of reconcile-tick's log line when a webhook's sweep keeps failing (mapi_reconcile_tick::webhooks::SWEEP_ALARM)."
  type        = string
  default     = "ALARM webhook sweep failing: its events are not being delivered"
}

variable "spend_cap_70_message" {
  description = "The message of reconcile-tick's line at 70 % of the spend cap (mapi_reconcile_tick::spend::SPEND_CAP_70_ALARM)."
  type        = string
  default     = "ALARM spend cap 70 %: the platform's spend reached 70 % of its cap"
}

variable "spend_cap_90_message" {
  description = "The message of reconcile-tick's line at 90 % of the spend cap (mapi_reconcile_tick::spend::SPEND_CAP_90_ALARM)."
  type        = string
  default     = "ALARM spend cap 90 %: the platform's spend reached 90 % of its cap"
}

variable "integrity_alarm_message" {
  description = "The message of the line every bundle integrity failure logs (mapi_bundles::INTEGRITY_ALARM)."
  type        = string
  default     = "ALARM bundle integrity check failed"
}

variable "quota_denied_message" {
  description = "The message of the line each quota denial logs (mapi_admission::quota::DENIED_LINE)."
  type        = string
  default     = "quota denied"
}

variable "quota_denials_per_5m" {
  description = "Quota denials in five minutes above which the alert fires."
  type        = number
  default     = 100
}

variable "server_errors_per_5m" {
  description = "5xx answers in five minutes above which the alert fires."
  type        = number
  default     = 10
}

variable "dead_letter_subscription" {
  description = "The events' dead-letter subscription (its backlog is an alert)."
  type        = string
}
