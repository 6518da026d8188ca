//! The platform's secrets: from the environment, or in the dev profile
//! from `$MAPI_HOME/secrets.json`, made there on first use.

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::ConfigError;

/// The platform's secrets.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Secrets {
    /// Presented by the queue, the scheduler and the local event pusher.
    pub internal_token: String,
    /// Keys the stored hashes of API tokens.
    #[serde(with = "hex_bytes")]
    pub token_pepper: Vec<u8>,
    /// Keys the local object store's signed URLs; only a process serving
    /// local objects has one.
    #[serde(with = "hex_bytes_opt")]
    pub url_signing_key: Option<Vec<u8>>,
}

impl std::fmt::Debug for Secrets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secrets(..)")
    }
}

mod hex_bytes {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(v: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&hex::encode(v))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        hex::decode(String::deserialize(d)?).map_err(serde::de::Error::custom)
    }
}

mod hex_bytes_opt {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(v: &Option<Vec<u8>>, s: S) -> Result<S::Ok, S::Error> {
        match v {
            Some(v) => super::hex_bytes::serialize(v, s),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<u8>>, D::Error> {
        Option::<String>::deserialize(d)?
            .map(|h| hex::decode(h).map_err(serde::de::Error::custom))
            .transpose()
    }
}

fn random_secret() -> Result<Vec<u8>, ConfigError> {
    let mut b = vec![0u8; 32];
    getrandom::fill(&mut b).map_err(|e| ConfigError::Invalid(format!("no randomness: {e}")))?;
    Ok(b)
}

/// The dev profile's secrets: from `$MAPI_HOME/secrets.json`, made on first use.
pub(super) fn dev_secrets(home: &Path) -> Result<Secrets, ConfigError> {
    let path = home.join("secrets.json");
    let err = |e: std::io::Error| ConfigError::Invalid(format!("{}: {e}", path.display()));
    match std::fs::read(&path) {
        Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| {
            ConfigError::Invalid(format!("{} is damaged ({e}): delete it to regenerate", path.display()))
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            std::fs::create_dir_all(home).map_err(err)?;
            let secrets = Secrets {
                internal_token: hex::encode(random_secret()?),
                token_pepper: random_secret()?,
                url_signing_key: Some(random_secret()?),
            };
            let json =
                serde_json::to_vec_pretty(&secrets).map_err(|e| ConfigError::Invalid(e.to_string()))?;
            mapi_api::credentials::write_private(&path, &json).map_err(err)?;
            Ok(secrets)
        }
        Err(e) => Err(err(e)),
    }
}
