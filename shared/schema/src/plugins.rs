//! A published plugin version: its manifest, where its package is and the
//! package's digest. Immutable: a version is published once and then only
//! deleted.

use mapi_domain::{ProjectId, TenantId, Timestamp, UserId};
use mapi_plugins::Manifest;
use serde::{Deserialize, Serialize};

use crate::{Doc, named_id};

/// One published version of a project's plugin.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PluginDoc {
    pub tenant: TenantId,
    pub project: ProjectId,
    pub name: String,
    pub version: String,
    /// Lowercase hex SHA-256 of the package.
    pub sha256: String,
    /// The package's object (content-addressed, create-only).
    pub object: String,
    pub size: u64,
    pub manifest: Manifest,
    pub created_by: UserId,
    pub created_at: Timestamp,
}

impl PluginDoc {
    pub fn id_of(tenant: &TenantId, project: &ProjectId, name: &str, version: &str) -> String {
        named_id(tenant, project, &format!("{name}@{version}"))
    }
}

impl Doc for PluginDoc {
    const COLLECTION: &'static str = "plugins";
    fn doc_id(&self) -> String {
        PluginDoc::id_of(&self.tenant, &self.project, &self.name, &self.version)
    }
}
