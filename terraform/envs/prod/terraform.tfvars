# Non-secret values of prod. Secrets are Secret Manager versions added by an
# operator; image digests come from deploy.sh (images.auto.tfvars.json).
project_id          = "mapi-prod-control"
exec_project_id     = "mapi-prod-exec-paid"
region              = "europe-west1"
env                 = "prod"
gpu_jobs            = false
domain              = "api.mapi.example.com"
# Sign-in (README, first deploy): Google's issuer; the console's Web
# application client; the CLI's Desktop client and gcloud's own client
# (whose ID tokens `gcloud auth print-identity-token` prints).
oidc_issuer         = "https://accounts.google.com"
oidc_audience       = "000000000000-mapiconsole.apps.googleusercontent.com"
oidc_cli_audiences  = ["000000000000-mapicli.apps.googleusercontent.com", "32555940559.apps.googleusercontent.com"]
operator_emails     = []
firestore_location  = "eur3"
bucket_location     = "EU"
data_bucket         = "mapi-prod-control-data"
exec_cidr           = "10.10.0.0/20"
signing_key_version = 1
job_retention_days  = 30
run_retention_days  = 30
billing_account     = "000000-000000-000000"
spend_cap_usd       = 5000
max_instances       = 20
deletion_protection = true
