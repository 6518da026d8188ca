output "database" {
  value = google_firestore_database.this.name
}

output "data_bucket" {
  value = google_storage_bucket.data.name
}

output "bootstrap_bucket" {
  value = google_storage_bucket.bootstrap.name
}

output "uploader_email" {
  description = "MAPI_GCS_UPLOADER_SERVICE_ACCOUNT."
  value       = google_service_account.uploader.email
}

output "uploader_name" {
  value = google_service_account.uploader.name
}

output "signing_key_id" {
  description = "projects/P/locations/L/keyRings/R/cryptoKeys/K; a version is this with /cryptoKeyVersions/N."
  value       = google_kms_crypto_key.signing.id
}
