output "address" {
  description = "The entry's IP address: the DNS A record of the domain."
  value       = google_compute_global_address.entry.address
}

output "url" {
  value = "https://${var.domain}"
}
