terraform {
  backend "gcs" {
    bucket = "mapi-prod-tfstate"
    prefix = "envs/prod"
  }
}
