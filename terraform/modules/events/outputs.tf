output "push_service_account_email" {
  description = "MAPI_PUBSUB_PUSH_SERVICE_ACCOUNT."
  value       = google_service_account.push.email
}

output "push_subscription_id" {
  description = "MAPI_PUBSUB_PUSH_SUBSCRIPTIONS: projects/P/subscriptions/S."
  value       = google_pubsub_subscription.push.id
}

output "dead_letter_subscription" {
  description = "The subscription holding events Pub/Sub could not push (its backlog is an alert)."
  value       = google_pubsub_subscription.dead_letter.name
}
