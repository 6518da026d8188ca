output "job_ids" {
  description = "Every Job id of the inventory."
  value       = concat(keys(google_cloud_run_v2_job.cpu), [for j in google_cloud_run_v2_job.gpu : j.name])
}

output "execution_service_account_email" {
  value = google_service_account.execution.email
}
