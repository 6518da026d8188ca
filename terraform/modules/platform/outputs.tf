output "public_url" {
  description = "MAPI_PUBLIC_URL: where the CLI and people reach the platform."
  value       = module.entry.url
}

output "entry_address" {
  description = "The entry's IP address: point the domain's DNS A record at it."
  value       = module.entry.address
}

output "urls" {
  description = "Each service's URL."
  value = {
    submit-api     = module.submit_api.uri
    submit-tasks   = module.submit_tasks.uri
    push-events    = module.push_events.uri
    reconcile-tick = module.reconcile_tick.uri
    meter          = module.meter.uri
    admin          = module.admin.uri
  }
}

output "job_ids" {
  value = module.jobs.job_ids
}
