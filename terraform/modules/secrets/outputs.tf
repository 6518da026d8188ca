output "secret_ids" {
  description = "Variable name to its secret's id."
  value       = { for name, s in google_secret_manager_secret.this : name => s.secret_id }
}
