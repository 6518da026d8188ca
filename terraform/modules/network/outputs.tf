output "network" {
  value = google_compute_network.exec.name
}

output "subnetwork" {
  value = google_compute_subnetwork.exec.name
}
