output "server_email" {
  description = "MAPI_ENDPOINTS_SERVICE_ACCOUNT: the account model servers run as."
  value       = google_service_account.server.email
}
