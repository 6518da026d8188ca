# The executions' network in the exec project: no route to the internet and a
# firewall that denies all egress but HTTPS to the restricted Google APIs VIP
# (199.36.153.4/30), which every *.googleapis.com name resolves to through a
# private DNS zone. An execution can reach Google APIs (its bootstrap, its
# logs) and nothing else.

locals {
  restricted_vip = ["199.36.153.4", "199.36.153.5", "199.36.153.6", "199.36.153.7"]
}

resource "google_compute_network" "exec" {
  project                         = var.project_id
  name                            = "mapi-${var.env}-exec"
  auto_create_subnetworks         = false
  delete_default_routes_on_create = true
}

resource "google_compute_subnetwork" "exec" {
  project                  = var.project_id
  name                     = "mapi-${var.env}-exec-${var.region}"
  region                   = var.region
  network                  = google_compute_network.exec.id
  ip_cidr_range            = var.cidr
  private_ip_google_access = true

  # Flow logs show any attempt of an execution to reach past the VIP.
  log_config {
    aggregation_interval = "INTERVAL_5_MIN"
    flow_sampling        = 0.5
    metadata             = "INCLUDE_ALL_METADATA"
  }
}

# The only route out: to the restricted VIP, through the default internet
# gateway (traffic to Google's VIP stays on Google's network).
resource "google_compute_route" "restricted_apis" {
  project          = var.project_id
  name             = "mapi-${var.env}-restricted-apis"
  network          = google_compute_network.exec.name
  dest_range       = "199.36.153.4/30"
  next_hop_gateway = "default-internet-gateway"
  priority         = 100
}

resource "google_compute_firewall" "deny_all_egress" {
  project            = var.project_id
  name               = "mapi-${var.env}-exec-deny-all-egress"
  network            = google_compute_network.exec.name
  direction          = "EGRESS"
  priority           = 65534
  destination_ranges = ["0.0.0.0/0"]

  deny {
    protocol = "all"
  }
}

resource "google_compute_firewall" "allow_restricted_apis" {
  project            = var.project_id
  name               = "mapi-${var.env}-exec-allow-restricted-apis"
  network            = google_compute_network.exec.name
  direction          = "EGRESS"
  priority           = 1000
  destination_ranges = ["199.36.153.4/30"]

  allow {
    protocol = "tcp"
    ports    = ["443"]
  }
}

resource "google_dns_managed_zone" "googleapis" {
  project    = var.project_id
  name       = "mapi-${var.env}-googleapis"
  dns_name   = "googleapis.com."
  visibility = "private"

  private_visibility_config {
    networks {
      network_url = google_compute_network.exec.id
    }
  }
}

resource "google_dns_record_set" "restricted" {
  project      = var.project_id
  managed_zone = google_dns_managed_zone.googleapis.name
  name         = "restricted.googleapis.com."
  type         = "A"
  ttl          = 300
  rrdatas      = local.restricted_vip
}

resource "google_dns_record_set" "wildcard" {
  project      = var.project_id
  managed_zone = google_dns_managed_zone.googleapis.name
  name         = "*.googleapis.com."
  type         = "CNAME"
  ttl          = 300
  rrdatas      = ["restricted.googleapis.com."]
}
