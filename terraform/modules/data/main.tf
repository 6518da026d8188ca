# The platform's state: the Firestore database and its composite indexes, the
# data and bootstrap buckets, the create-only uploader account, and the KMS
# key that signs model-version manifests.
#
# Rules:
# - The indexes are terraform/firestore.indexes.json (generated from the
#   code's declared indexes), one google_firestore_index per entry, so the two
#   cannot drift. Its fieldOverrides are the fields no query reads (tenants'
#   params, items' results), one google_firestore_field each with an empty
#   index_config: Firestore does not index them on its own.
# - The database is delete-protected and keeps point-in-time recovery.
# - Buckets have uniform access and enforced public access prevention; every
#   object is reached through IAM or a signed URL.
# - Job objects are deleted by the housekeeper, not by bucket lifecycle: a
#   tenant's quota policy may keep them longer than MAPI_JOB_RETENTION_DAYS
#   and lifecycle conditions match a key's prefix only (job keys start
#   t/{tenant}/). The bucket rules only clear what nothing else will:
#   incomplete uploads, and bootstraps no execution took.
# - Cloud KMS does not rotate asymmetric keys on a schedule (rotation_period
#   is for symmetric keys only): a new version is created by hand, set as
#   MAPI_KMS_KEY_VERSION, and the old one listed in
#   MAPI_KMS_TRUSTED_KEY_VERSIONS until nothing it signed is in use. The key
#   cannot be destroyed by terraform.

locals {
  indexes         = jsondecode(file("${path.module}/../../firestore.indexes.json")).indexes
  field_overrides = jsondecode(file("${path.module}/../../firestore.indexes.json")).fieldOverrides
}

resource "google_firestore_database" "this" {
  project                           = var.project_id
  name                              = var.database
  location_id                       = var.firestore_location
  type                              = "FIRESTORE_NATIVE"
  delete_protection_state           = "DELETE_PROTECTION_ENABLED"
  point_in_time_recovery_enablement = "POINT_IN_TIME_RECOVERY_ENABLED"
  deletion_policy                   = "ABANDON"
}

resource "google_firestore_index" "this" {
  for_each = {
    for idx in local.indexes :
    "${idx.collectionGroup}(${join(",", [for f in idx.fields : "${f.fieldPath} ${try(f.order, f.arrayConfig)}"])})" => idx
  }
  project     = var.project_id
  database    = google_firestore_database.this.name
  collection  = each.value.collectionGroup
  query_scope = each.value.queryScope

  # A field is ordered, or (an array) indexed by its elements.
  dynamic "fields" {
    for_each = each.value.fields
    content {
      field_path   = fields.value.fieldPath
      order        = try(fields.value.order, null)
      array_config = try(fields.value.arrayConfig, null)
    }
  }
}

resource "google_firestore_field" "unindexed" {
  for_each = {
    for f in local.field_overrides : "${f.collectionGroup}.${f.fieldPath}" => f
  }
  project    = var.project_id
  database   = google_firestore_database.this.name
  collection = each.value.collectionGroup
  field      = each.value.fieldPath

  # Empty: no ascending, descending or array-contains index of the field.
  index_config {}
}

resource "google_storage_bucket" "data" {
  # checkov:skip=CKV_GCP_62: object reads and writes are recorded by Cloud Audit Logs (Data Access), not a legacy usage-log bucket
  # checkov:skip=CKV_GCP_78: writes are guarded by generation preconditions, and a tenant's deleted data must not survive as noncurrent versions
  project                     = var.project_id
  name                        = var.data_bucket
  location                    = var.bucket_location
  uniform_bucket_level_access = true
  public_access_prevention    = "enforced"
  force_destroy               = false

  lifecycle_rule {
    condition {
      age = 1
    }
    action {
      type = "AbortIncompleteMultipartUpload"
    }
  }
}

resource "google_storage_bucket" "bootstrap" {
  # checkov:skip=CKV_GCP_62: object reads and writes are recorded by Cloud Audit Logs (Data Access), not a legacy usage-log bucket
  # checkov:skip=CKV_GCP_78: a bootstrap is a single-use secret deleted when taken; a noncurrent version would keep it
  project                     = var.project_id
  name                        = "${var.data_bucket}-bootstrap"
  location                    = var.bucket_location
  uniform_bucket_level_access = true
  public_access_prevention    = "enforced"
  force_destroy               = false

  # An execution takes its bootstrap when it starts; one still there after
  # the orphan-adoption lookback (26 h) belongs to no execution.
  lifecycle_rule {
    condition {
      age = var.bootstrap_retention_days
    }
    action {
      type = "Delete"
    }
  }

  lifecycle_rule {
    condition {
      age = 1
    }
    action {
      type = "AbortIncompleteMultipartUpload"
    }
  }
}

# Signs create-only POST policies for uploads: it may create objects in the
# data bucket and do nothing else.
resource "google_service_account" "uploader" {
  project      = var.project_id
  account_id   = "mapi-${var.env}-uploader"
  display_name = "mapi ${var.env} create-only uploads"
}

resource "google_storage_bucket_iam_member" "uploader_creates" {
  bucket = google_storage_bucket.data.name
  role   = "roles/storage.objectCreator"
  member = "serviceAccount:${google_service_account.uploader.email}"
}

resource "google_kms_key_ring" "this" {
  project  = var.project_id
  name     = "mapi-${var.env}"
  location = var.kms_location
}

resource "google_kms_crypto_key" "signing" {
  name     = "bundle-signing"
  key_ring = google_kms_key_ring.this.id
  purpose  = "ASYMMETRIC_SIGN"

  version_template {
    algorithm        = "EC_SIGN_P256_SHA256"
    protection_level = var.kms_protection_level
  }

  lifecycle {
    prevent_destroy = true
  }
}
