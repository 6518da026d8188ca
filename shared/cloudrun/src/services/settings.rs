//! The cloud-run hosting adapter's settings: every `MAPI_ENDPOINTS_*`
//! variable it reads, with its default and meaning.

use mapi_domain::endpoint::Accelerator;
use mapi_hosting::HostingError;
use mapi_settings::{Env, Var};

/// `MAPI_ENDPOINTS_PROJECT`.
pub const PROJECT: Var = Var::required(
    "MAPI_ENDPOINTS_PROJECT",
    "none (necessary for cloud-run endpoints)",
    "cloud-run endpoints: the project the model services run in",
);
/// `MAPI_ENDPOINTS_US_REGION`.
pub const US_REGION: Var =
    Var::new("MAPI_ENDPOINTS_US_REGION", "us-central1", "cloud-run endpoints: the region `us` stands for");
/// `MAPI_ENDPOINTS_EU_REGION`.
pub const EU_REGION: Var =
    Var::new("MAPI_ENDPOINTS_EU_REGION", "europe-west4", "cloud-run endpoints: the region `eu` stands for");
/// `MAPI_ENDPOINTS_GPU_REGIONS`.
pub const GPU_REGIONS: Var = Var::new(
    "MAPI_ENDPOINTS_GPU_REGIONS",
    "asia-southeast1,asia-south1,europe-west1,europe-west4,us-central1,us-east4",
    "cloud-run endpoints: the regions with NVIDIA L4 GPUs (an `l4` endpoint elsewhere is refused)",
);
/// `MAPI_ENDPOINTS_REGIONS`.
pub const REGIONS: Var = Var::derived(
    "MAPI_ENDPOINTS_REGIONS",
    "the us and eu regions, then the GPU regions",
    "cloud-run endpoints: the regions services may be made in, where get and list look for them",
);
/// `MAPI_ENDPOINTS_SERVER_IMAGE`.
pub const SERVER_IMAGE: Var = Var::required(
    "MAPI_ENDPOINTS_SERVER_IMAGE",
    "none (necessary for cloud-run endpoints)",
    "cloud-run endpoints: the model server's image (the worker image; revisions run `serve`)",
);
/// `MAPI_ENDPOINTS_BASE_IMAGES`.
pub const BASE_IMAGES: Var = Var::new(
    "MAPI_ENDPOINTS_BASE_IMAGES",
    "{}",
    "cloud-run endpoints: base to worker image (JSON object), for models whose predict is Python on that base",
);
/// `MAPI_ENDPOINTS_SERVICE_ACCOUNT`.
pub const SERVICE_ACCOUNT: Var = Var::derived(
    "MAPI_ENDPOINTS_SERVICE_ACCOUNT",
    "Cloud Run's default",
    "cloud-run endpoints: the e-mail of the account model servers run as (reads the data bucket)",
);
/// `MAPI_ENDPOINTS_CONTAINER_SERVICE_ACCOUNT`.
pub const CONTAINER_SERVICE_ACCOUNT: Var = Var::derived(
    "MAPI_ENDPOINTS_CONTAINER_SERVICE_ACCOUNT",
    "none: tenants' own containers are refused",
    "cloud-run endpoints: the account a tenant's own container runs as, `{tenant}` standing for the tenant \
     (e.g. `ep-{tenant}@PROJECT.iam.gserviceaccount.com`): one per tenant, with no role but Secret Manager \
     accessor on that tenant's `mapi-{tenant}-*` secrets, so its code reaches no other tenant's data or secrets",
);
/// `MAPI_ENDPOINTS_CONTAINER_IMAGES`.
pub const CONTAINER_IMAGES: Var = Var::derived(
    "MAPI_ENDPOINTS_CONTAINER_IMAGES",
    "none: tenants' own containers are refused",
    "cloud-run endpoints: where a tenant's own images must be, `{tenant}` standing for the tenant \
     (e.g. `europe-docker.pkg.dev/PROJECT/tenant-{tenant}/`): an image reference must start with it, so \
     no tenant runs another's image",
);
/// `MAPI_ENDPOINTS_BUCKET`.
pub const BUCKET: Var = Var::required(
    "MAPI_ENDPOINTS_BUCKET",
    "none (necessary for cloud-run endpoints)",
    "cloud-run endpoints: the data bucket, mounted read-only where model servers read bundles",
);
/// `MAPI_ENDPOINTS_API_ENDPOINT`.
pub const API_ENDPOINT: Var = Var::derived(
    "MAPI_ENDPOINTS_API_ENDPOINT",
    "Google's",
    "cloud-run endpoints: root of the Cloud Run Admin API (a fake's in tests)",
);

/// `MAPI_ENDPOINTS_MONITORING_ENDPOINT`.
pub const MONITORING_ENDPOINT: Var = Var::derived(
    "MAPI_ENDPOINTS_MONITORING_ENDPOINT",
    "Google's",
    "cloud-run endpoints: root of the Cloud Monitoring API, where instance-billed endpoints' instance time is read (a fake's in tests)",
);

/// `MAPI_ENDPOINTS_METADATA_URL`.
pub const METADATA_URL: Var = Var::derived(
    "MAPI_ENDPOINTS_METADATA_URL",
    "Application Default Credentials",
    "cloud-run endpoints: the metadata server that mints the ID tokens private endpoints are scored with (a fake's in tests)",
);

/// Every variable the adapter reads.
pub const VARIABLES: &[Var] = &[
    PROJECT,
    US_REGION,
    EU_REGION,
    GPU_REGIONS,
    REGIONS,
    SERVER_IMAGE,
    BASE_IMAGES,
    SERVICE_ACCOUNT,
    CONTAINER_SERVICE_ACCOUNT,
    CONTAINER_IMAGES,
    BUCKET,
    API_ENDPOINT,
    MONITORING_ENDPOINT,
    METADATA_URL,
];

/// Settings of the cloud-run hosting adapter.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServicesSettings {
    /// `MAPI_ENDPOINTS_PROJECT`.
    pub project: String,
    /// `MAPI_ENDPOINTS_US_REGION`.
    pub us_region: String,
    /// `MAPI_ENDPOINTS_EU_REGION`.
    pub eu_region: String,
    /// `MAPI_ENDPOINTS_GPU_REGIONS`.
    pub gpu_regions: Vec<String>,
    /// `MAPI_ENDPOINTS_REGIONS`: where services are made and looked for, in order.
    pub regions: Vec<String>,
    /// `MAPI_ENDPOINTS_SERVER_IMAGE`.
    pub server_image: String,
    /// `MAPI_ENDPOINTS_BASE_IMAGES`: the image a Python model of each base is served from.
    pub base_images: std::collections::BTreeMap<String, String>,
    /// `MAPI_ENDPOINTS_SERVICE_ACCOUNT`: `None` runs revisions as Cloud Run's default account.
    pub service_account: Option<String>,
    /// `MAPI_ENDPOINTS_CONTAINER_SERVICE_ACCOUNT`: the account of a tenant's container, with
    /// `{tenant}` for the tenant; `None` refuses tenants' containers.
    pub container_service_account: Option<String>,
    /// `MAPI_ENDPOINTS_CONTAINER_IMAGES`: the prefix of a tenant's images, with `{tenant}`;
    /// `None` refuses tenants' containers.
    pub container_images: Option<String>,
    /// `MAPI_ENDPOINTS_BUCKET`.
    pub bucket: String,
    /// `MAPI_ENDPOINTS_API_ENDPOINT`.
    pub endpoint: Option<String>,
    /// `MAPI_ENDPOINTS_MONITORING_ENDPOINT`.
    pub monitoring_endpoint: Option<String>,
    /// `MAPI_ENDPOINTS_METADATA_URL`: `None` mints ID tokens through Application Default Credentials.
    pub metadata_url: Option<String>,
}

fn is_region(r: &str) -> bool {
    !r.is_empty()
        && r.len() <= 32
        && r.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && r.contains('-')
}

impl ServicesSettings {
    /// The declared defaults for `project`, `server_image` and `bucket`.
    ///
    /// # Panics
    /// Never: every declared default parses (a test holds it).
    pub fn new(project: &str, server_image: &str, bucket: &str) -> ServicesSettings {
        let set = [(PROJECT.name, project), (SERVER_IMAGE.name, server_image), (BUCKET.name, bucket)];
        let env = |k: &str| set.iter().find(|(n, _)| *n == k).map(|(_, v)| (*v).to_owned());
        ServicesSettings::from_env(&env).expect("the declared defaults are valid settings")
    }

    /// Reads the settings through `env` (the environment in production).
    pub fn from_env(env: Env<'_>) -> Result<ServicesSettings, String> {
        const FOR: &str = "cloud-run endpoints";
        let text = |v: &Var| v.raw(env).unwrap_or_default();
        let gpu_regions = GPU_REGIONS.list(env);
        let (us_region, eu_region) = (text(&US_REGION), text(&EU_REGION));
        let regions = match REGIONS.get(env) {
            Some(_) => REGIONS.list(env),
            None => {
                let mut all = vec![us_region.clone(), eu_region.clone()];
                all.extend(gpu_regions.iter().cloned());
                all
            }
        };
        let mut unique = Vec::new();
        for r in regions {
            if !unique.contains(&r) {
                unique.push(r);
            }
        }
        let s = ServicesSettings {
            project: PROJECT.require(env, FOR).map_err(|e| e.0)?,
            us_region,
            eu_region,
            gpu_regions,
            regions: unique,
            server_image: SERVER_IMAGE.require(env, FOR).map_err(|e| e.0)?,
            base_images: serde_json::from_str(&text(&BASE_IMAGES)).map_err(|_| {
                format!(
                    "{} is not a JSON object of base to image, e.g. {{\"base-ml\": \"…\"}}",
                    BASE_IMAGES.name
                )
            })?,
            service_account: SERVICE_ACCOUNT.get(env),
            container_service_account: CONTAINER_SERVICE_ACCOUNT.get(env),
            container_images: CONTAINER_IMAGES.get(env),
            bucket: BUCKET.require(env, FOR).map_err(|e| e.0)?,
            endpoint: API_ENDPOINT.get(env),
            monitoring_endpoint: MONITORING_ENDPOINT.get(env),
            metadata_url: METADATA_URL.get(env),
        };
        s.validate()?;
        Ok(s)
    }

    /// Refuses settings the adapter cannot honour.
    pub fn validate(&self) -> Result<(), String> {
        if let Some(prefix) = &self.container_images
            && (!prefix.contains("{tenant}") || !prefix.ends_with('/'))
        {
            return Err(format!(
                "{} is `{prefix}`: it must hold `{{tenant}}` and end with `/` (a repository of the tenant's own)",
                CONTAINER_IMAGES.name
            ));
        }
        if let Some(account) = &self.container_service_account
            && (!account.contains("{tenant}") || !account.contains('@'))
        {
            return Err(format!(
                "{} is `{account}`: it must be an e-mail with `{{tenant}}` in it, one account per tenant",
                CONTAINER_SERVICE_ACCOUNT.name
            ));
        }
        for (var, r) in [(&US_REGION, &self.us_region), (&EU_REGION, &self.eu_region)]
            .into_iter()
            .chain(self.gpu_regions.iter().map(|r| (&GPU_REGIONS, r)))
            .chain(self.regions.iter().map(|r| (&REGIONS, r)))
        {
            if !is_region(r) {
                return Err(format!("{} names `{r}`, which is not a region such as europe-west1", var.name));
            }
        }
        for r in [&self.us_region, &self.eu_region] {
            if !self.regions.contains(r) {
                return Err(format!("{} must include the us and eu regions ({r} is missing)", REGIONS.name));
            }
        }
        Ok(())
    }

    /// The region a service runs in: `us` and `eu` are mapped, any other
    /// value must be one of [`ServicesSettings::regions`]; an `l4` service
    /// only in a GPU region.
    pub fn region_of(&self, region: &str, accelerator: Accelerator) -> Result<String, HostingError> {
        let resolved = match region {
            "us" => self.us_region.clone(),
            "eu" => self.eu_region.clone(),
            r if is_region(r) => r.to_owned(),
            r => {
                return Err(HostingError::Invalid(format!(
                    "region `{}` is not a region: use `us`, `eu` or a region's name such as europe-west1",
                    r.chars().take(40).collect::<String>()
                )));
            }
        };
        if accelerator == Accelerator::L4 && !self.gpu_regions.contains(&resolved) {
            return Err(HostingError::Invalid(format!(
                "region {resolved} has no L4 GPUs: use one of {}",
                self.gpu_regions.join(", ")
            )));
        }
        if !self.regions.contains(&resolved) {
            return Err(HostingError::Invalid(format!(
                "region {resolved} is not one this platform hosts endpoints in: use one of {} (or add it to {})",
                self.regions.join(", "),
                REGIONS.name
            )));
        }
        Ok(resolved)
    }
}

#[cfg(test)]
mod tests {
    use mapi_settings::env_of as env;

    use super::*;

    const NEEDED: [(&str, &str); 3] = [
        ("MAPI_ENDPOINTS_PROJECT", "p"),
        ("MAPI_ENDPOINTS_SERVER_IMAGE", "europe-docker.pkg.dev/p/mapi/worker:1"),
        ("MAPI_ENDPOINTS_BUCKET", "mapi-prod-data"),
    ];

    #[test]
    fn defaults_are_the_hosting_packages_regions() {
        let s = ServicesSettings::from_env(&env(&NEEDED)).expect("settings");
        assert_eq!((s.us_region.as_str(), s.eu_region.as_str()), ("us-central1", "europe-west4"));
        // The regions with L4 GPUs, written out by hand, and the domain's copy of them.
        let seed =
            ["asia-southeast1", "asia-south1", "europe-west1", "europe-west4", "us-central1", "us-east4"];
        assert_eq!(s.gpu_regions, seed);
        assert_eq!(s.gpu_regions, mapi_domain::endpoint::GPU_REGIONS);
        assert_eq!(
            (s.us_region.as_str(), s.eu_region.as_str()),
            (mapi_domain::endpoint::US_REGION, mapi_domain::endpoint::EU_REGION)
        );
        assert_eq!(
            s.regions,
            ["us-central1", "europe-west4", "asia-southeast1", "asia-south1", "europe-west1", "us-east4"]
        );
        assert_eq!((&s.service_account, &s.endpoint), (&None, &None));
        assert_eq!(s, ServicesSettings::new(NEEDED[0].1, NEEDED[1].1, NEEDED[2].1));
        mapi_settings::assert_reads_exactly(VARIABLES, &env(&NEEDED), |e| {
            ServicesSettings::from_env(e).expect("settings");
        });
    }

    #[test]
    fn regions_resolve_and_l4_needs_a_gpu_region() {
        let s = ServicesSettings::from_env(&env(&NEEDED)).expect("settings");
        assert_eq!(s.region_of("us", Accelerator::L4), Ok("us-central1".to_owned()));
        assert_eq!(s.region_of("eu", Accelerator::Cpu), Ok("europe-west4".to_owned()));
        assert_eq!(s.region_of("europe-west1", Accelerator::L4), Ok("europe-west1".to_owned()));
        let Err(HostingError::Invalid(e)) = s.region_of("europe-west2", Accelerator::L4) else {
            panic!("no GPUs in europe-west2")
        };
        assert!(e.contains("europe-west2"), "{e}");
        assert!(e.contains(&s.gpu_regions.join(", ")), "names the GPU regions: {e}");
        assert!(matches!(s.region_of("Mars", Accelerator::Cpu), Err(HostingError::Invalid(_))));
        assert!(
            matches!(s.region_of("europe-west2", Accelerator::Cpu), Err(HostingError::Invalid(e)) if e.contains(REGIONS.name)),
            "a region outside the list cannot be found again by get and list"
        );
        let mut vars = NEEDED.to_vec();
        vars.push(("MAPI_ENDPOINTS_REGIONS", "us-central1,europe-west4,europe-west2"));
        let s = ServicesSettings::from_env(&env(&vars)).expect("settings");
        assert_eq!(s.region_of("europe-west2", Accelerator::Cpu), Ok("europe-west2".to_owned()));
    }

    #[test]
    fn bad_settings_name_the_variable() {
        let e = ServicesSettings::from_env(&env(&NEEDED[1..])).expect_err("no project");
        assert!(e.contains("MAPI_ENDPOINTS_PROJECT"), "{e}");
        let mut vars = NEEDED.to_vec();
        vars.push(("MAPI_ENDPOINTS_US_REGION", "central"));
        let e = ServicesSettings::from_env(&env(&vars)).expect_err("not a region");
        assert!(e.contains("MAPI_ENDPOINTS_US_REGION"), "{e}");
        let mut vars = NEEDED.to_vec();
        vars.push(("MAPI_ENDPOINTS_REGIONS", "europe-west1"));
        let e = ServicesSettings::from_env(&env(&vars)).expect_err("us and eu missing");
        assert!(e.contains("MAPI_ENDPOINTS_REGIONS"), "{e}");
    }
}
