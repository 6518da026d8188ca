//! Model endpoints' vocabulary: what an endpoint runs on, who may call it,
//! where its rollout stands, and its alias.

crate::wire_enum!(
    /// The hardware an endpoint's instances have.
    Accelerator {
        /// CPU only: request-billed, 1 vCPU and 2 GiB per instance.
        Cpu => "cpu",
        /// One NVIDIA L4: instance-billed, at least 4 vCPU and 16 GiB per instance.
        L4 => "l4",
    }
);

impl Accelerator {
    /// vCPUs and memory (MiB) of one instance.
    pub fn resources(self) -> (u32, u32) {
        match self {
            Accelerator::Cpu => (1, 2048),
            Accelerator::L4 => (4, 16384),
        }
    }
}

crate::wire_enum!(
    /// Who may score an endpoint. Of an endpoint, at the platform's routes:
    /// members and tokens the matrix lets (`private`), or anyone, without
    /// credentials (`public`). Of a host's service: identities allowed to
    /// invoke it with an ID token, or anyone with the URL; the platform
    /// makes every service private, so no score bypasses it.
    Access {
        /// Endpoint: authorized callers only. Service: invokers with an ID token.
        Private => "private",
        /// Endpoint: anyone, at the platform's routes. Service: anyone with the URL.
        Public => "public",
    }
);

#[allow(clippy::derivable_impls, reason = "`wire_enum!` fixes the derives")]
impl Default for Access {
    fn default() -> Self {
        Access::Private
    }
}

crate::wire_enum!(
    /// Where an endpoint stands.
    EndpointStatus {
        /// Its first revision is rolling out.
        Deploying => "deploying",
        /// It answers scores.
        Ready => "ready",
        /// Its first revision failed to start (the host's message says why).
        Failed => "failed",
        /// It is being removed.
        Deleting => "deleting",
    }
);

/// Checks an endpoint alias: 1–32 lowercase letters, digits and `-`,
/// starting with a letter and not ending with `-` (it becomes part of a
/// service name and of `score:<alias>` scopes).
pub fn check_alias(alias: &str) -> Result<(), String> {
    let ok = (1..=32).contains(&alias.len())
        && alias.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && alias.as_bytes()[0].is_ascii_lowercase()
        && !alias.ends_with('-');
    if ok {
        Ok(())
    } else {
        Err(format!(
            "endpoint alias `{}` is not valid: use 1–32 lowercase letters, digits and `-`, starting with a letter",
            alias.chars().take(48).collect::<String>()
        ))
    }
}

/// Regions where Cloud Run has NVIDIA L4 GPUs.
pub const GPU_REGIONS: &[&str] =
    &["asia-southeast1", "asia-south1", "europe-west1", "europe-west4", "us-central1", "us-east4"];

/// The region `us` stands for (it has L4 GPUs).
pub const US_REGION: &str = "us-central1";
/// The region `eu` stands for (it has L4 GPUs).
pub const EU_REGION: &str = "europe-west4";
/// The region an `asia` tenant's endpoints default to (it has L4 GPUs).
pub const ASIA_REGION: &str = "asia-southeast1";

/// The region an endpoint of a tenant with `residency` runs in when its
/// creator names none: one with L4 GPUs in the residency's area (`eu`,
/// `us`, `asia`), or the one region a residency names.
pub fn default_region(residency: &crate::Residency) -> String {
    match residency.as_str() {
        "eu" => EU_REGION.to_owned(),
        "us" => US_REGION.to_owned(),
        "asia" => ASIA_REGION.to_owned(),
        one => one.to_owned(),
    }
}

/// The region an endpoint runs in: `us` and `eu` name regions with L4 GPUs,
/// any other value must be a region's name; an `l4` endpoint only in a GPU region.
pub fn resolve_region(region: &str, accelerator: Accelerator) -> Result<String, String> {
    let resolved = match region {
        "us" => US_REGION.to_owned(),
        "eu" => EU_REGION.to_owned(),
        r if !r.is_empty()
            && r.len() <= 32
            && r.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && r.contains('-') =>
        {
            r.to_owned()
        }
        r => {
            return Err(format!(
                "region `{}` is not a region: use `us`, `eu` or a region's name such as `europe-west1`",
                r.chars().take(40).collect::<String>()
            ));
        }
    };
    if accelerator == Accelerator::L4 && !GPU_REGIONS.contains(&resolved.as_str()) {
        return Err(format!("region {resolved} has no L4 GPUs: use one of {}", GPU_REGIONS.join(", ")));
    }
    Ok(resolved)
}
