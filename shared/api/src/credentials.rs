//! The file `mapi dev` writes for the CLI (`$MAPI_HOME/credentials.json`):
//! where the platform is and the token that acts as its seeded user.

use mapi_domain::{ProjectId, TenantId};
use serde::{Deserialize, Serialize};

/// The CLI's credentials.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Credentials {
    pub url: String,
    pub token: String,
    pub tenant: TenantId,
    pub project: ProjectId,
}

/// Writes a file only its owner can read, atomically.
pub fn write_private(path: &std::path::Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let tmp = path.with_extension("tmp");
    let mut f = std::fs::OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(&tmp)?;
    f.write_all(bytes)?;
    f.sync_all()?;
    std::fs::rename(tmp, path)
}
