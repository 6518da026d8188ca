output "alert_policy" {
  value = google_monitoring_alert_policy.jobs_run_throttled.name
}
