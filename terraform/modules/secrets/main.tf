# The platform's secrets as Secret Manager secrets. Terraform makes the
# secrets, never their values: an operator adds each version
# (`gcloud secrets versions add`), so no secret is in code or in state.

resource "google_secret_manager_secret" "this" {
  for_each  = var.secrets
  project   = var.project_id
  secret_id = "mapi-${var.env}-${each.value}"

  replication {
    auto {}
  }
}
