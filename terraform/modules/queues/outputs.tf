output "invoker_email" {
  description = "MAPI_CLOUDTASKS_SERVICE_ACCOUNT: the identity of deliveries and scheduler calls."
  value       = google_service_account.invoker.email
}

output "queue_ids" {
  value = { for name, q in google_cloud_tasks_queue.this : name => q.id }
}
