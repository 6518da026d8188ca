terraform {
  backend "gcs" {
    bucket = "mapi-dev-tfstate"
    prefix = "envs/dev"
  }
}
