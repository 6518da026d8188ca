# The platform's one public entry: a global external Application Load
# Balancer on `var.domain` that sends each tenant and operator route to the
# service that serves it. The CLI, the SDKs and people use one base URL
# (MAPI_PUBLIC_URL = https://DOMAIN); the services behind it take only
# internal and load-balancer traffic, so the entry's TLS policy and its
# refusals cannot be bypassed through a run.app URL.
#
# Rules:
# - HTTPS only, TLS 1.2 or later (RESTRICTED profile). There is no port 80
#   listener: a client that sent a bearer token over plain HTTP has already
#   leaked it, and a redirect would hide that.
# - Routes are matched in the order of `var.routes` (priority 10, 11, …);
#   whatever none matches goes to `var.default_service` (submit's API, which
#   serves most routes).
# - `/internal/` and `/metrics` are never reachable from outside: the first
#   rule answers them 404 at the entry. Internal routes are called by Google
#   services on the run.app URLs (internal traffic), and /metrics is scraped
#   inside the project.

resource "google_compute_global_address" "entry" {
  project = var.project_id
  name    = "mapi-${var.env}-entry"
}

resource "google_compute_managed_ssl_certificate" "entry" {
  project = var.project_id
  name    = "mapi-${var.env}-entry"

  managed {
    domains = [var.domain]
  }
}

resource "google_compute_ssl_policy" "entry" {
  project         = var.project_id
  name            = "mapi-${var.env}-entry"
  profile         = "RESTRICTED"
  min_tls_version = "TLS_1_2"
}

resource "google_compute_region_network_endpoint_group" "service" {
  for_each              = var.services
  project               = var.project_id
  name                  = "mapi-${var.env}-${each.key}"
  region                = var.region
  network_endpoint_type = "SERVERLESS"

  cloud_run {
    service = each.value
  }
}

resource "google_compute_backend_service" "service" {
  for_each              = var.services
  project               = var.project_id
  name                  = "mapi-${var.env}-${each.key}"
  protocol              = "HTTPS"
  load_balancing_scheme = "EXTERNAL_MANAGED"

  backend {
    group = google_compute_region_network_endpoint_group.service[each.key].id
  }

  log_config {
    enable      = true
    sample_rate = 1.0
  }
}

resource "google_compute_url_map" "entry" {
  project         = var.project_id
  name            = "mapi-${var.env}-entry"
  default_service = google_compute_backend_service.service[var.default_service].id

  # Every host, the domain's and the bare address's, goes through the one
  # matcher, so the refusals below hold for both.
  host_rule {
    hosts        = ["*"]
    path_matcher = "routes"
  }

  path_matcher {
    name            = "routes"
    default_service = google_compute_backend_service.service[var.default_service].id

    route_rules {
      priority = 1
      service  = google_compute_backend_service.service[var.default_service].id

      dynamic "match_rules" {
        for_each = var.refused_prefixes
        content {
          prefix_match = match_rules.value
        }
      }

      route_action {
        fault_injection_policy {
          abort {
            http_status = 404
            percentage  = 100
          }
        }
      }
    }

    dynamic "route_rules" {
      for_each = var.routes
      content {
        priority = 10 + route_rules.key
        service  = google_compute_backend_service.service[route_rules.value.service].id

        match_rules {
          prefix_match        = route_rules.value.match == "prefix" ? route_rules.value.path : null
          full_path_match     = route_rules.value.match == "full" ? route_rules.value.path : null
          path_template_match = route_rules.value.match == "template" ? route_rules.value.path : null
        }
      }
    }
  }
}

resource "google_compute_target_https_proxy" "entry" {
  project          = var.project_id
  name             = "mapi-${var.env}-entry"
  url_map          = google_compute_url_map.entry.id
  ssl_certificates = [google_compute_managed_ssl_certificate.entry.id]
  ssl_policy       = google_compute_ssl_policy.entry.id
}

resource "google_compute_global_forwarding_rule" "https" {
  project               = var.project_id
  name                  = "mapi-${var.env}-entry-https"
  load_balancing_scheme = "EXTERNAL_MANAGED"
  ip_address            = google_compute_global_address.entry.id
  ip_protocol           = "TCP"
  port_range            = "443"
  target                = google_compute_target_https_proxy.entry.id
}
