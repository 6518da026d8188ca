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
