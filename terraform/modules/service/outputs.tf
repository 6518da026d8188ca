output "name" {
  value = google_cloud_run_v2_service.this.name
}

output "uri" {
  description = "The service's URL as Cloud Run reports it."
  value       = google_cloud_run_v2_service.this.uri
}

output "service_account_email" {
  value = google_service_account.this.email
}

output "service_account_name" {
  description = "The runtime account's resource name, for bindings on the account itself."
  value       = google_service_account.this.name
}
