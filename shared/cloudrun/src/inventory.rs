//! The Job inventory: one Job per base image and resource class, named by
//! `MAPI_CLOUDRUN_JOB_TEMPLATE`, and the placement rules that pick one.

use mapi_domain::ResourceClass;

use crate::settings::Settings;

/// The GPU Job exists for this base only.
pub const GPU_BASE: &str = "base-dl";

/// The sentence a GPU spec for a model of another namespace is refused with.
pub use mapi_domain::class::GPU_ONLY_DL;

/// One Job of the inventory.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct JobRef {
    pub base: String,
    pub class: ResourceClass,
    /// The Job id (`mapi-prod-base-bayes-s`).
    pub id: String,
}

/// The Jobs this deployment has, and how an attempt is placed on one.
#[derive(Clone, Debug)]
pub struct Inventory {
    settings: Settings,
    jobs: Vec<JobRef>,
}

/// Classes every base has a Job for.
pub const CPU_CLASSES: [ResourceClass; 3] = [ResourceClass::S, ResourceClass::M, ResourceClass::L];

impl Inventory {
    pub fn new(settings: &Settings) -> Inventory {
        let mut bases: Vec<&str> = settings.plugin_bases.values().map(String::as_str).collect();
        bases.push(&settings.default_base);
        bases.sort_unstable();
        bases.dedup();
        let mut jobs = Vec::new();
        for base in bases {
            for class in CPU_CLASSES {
                jobs.push(JobRef { base: base.to_owned(), class, id: job_id(settings, base, class) });
            }
            if settings.gpu_jobs && base == GPU_BASE {
                let class = ResourceClass::GPU;
                jobs.push(JobRef { base: base.to_owned(), class, id: job_id(settings, base, class) });
            }
        }
        Inventory { settings: settings.clone(), jobs }
    }

    /// Every Job, in a stable order.
    pub fn jobs(&self) -> &[JobRef] {
        &self.jobs
    }

    /// The classes this inventory offers.
    pub fn classes(&self) -> Vec<ResourceClass> {
        let mut c: Vec<ResourceClass> = self.jobs.iter().map(|j| j.class).collect();
        c.sort_unstable();
        c.dedup();
        c
    }

    /// The base image of a method: its namespace's plugin base, else the default.
    pub fn base_of(&self, method: &str) -> &str {
        let ns = method.split('.').next().unwrap_or(method);
        self.settings.plugin_bases.get(ns).map_or(self.settings.default_base.as_str(), String::as_str)
    }

    /// The Job an attempt of `class` running `method` goes to, or the
    /// sentence it is refused with.
    pub fn place(&self, class: ResourceClass, method: &str) -> Result<&JobRef, String> {
        self.place_on(class, self.base_of(method))
    }

    /// The Job an attempt of `class` on image `base` goes to, or the
    /// sentence it is refused with.
    pub fn place_on(&self, class: ResourceClass, base: &str) -> Result<&JobRef, String> {
        match class {
            ResourceClass::XL => {
                return Err("XL runs are for the GKE executor: cloudrun-jobs does not take them".to_owned());
            }
            ResourceClass::GPU if base != GPU_BASE => return Err(GPU_ONLY_DL.to_owned()),
            ResourceClass::GPU if !self.settings.gpu_jobs => {
                return Err("this deployment has no GPU Job (MAPI_CLOUDRUN_GPU_JOBS is off)".to_owned());
            }
            _ => {}
        }
        self.jobs
            .iter()
            .find(|j| j.base == base && j.class == class)
            .ok_or_else(|| format!("the inventory has no Job for base {base} and class {class}"))
    }

    /// `projects/{p}/locations/{r}/jobs/{id}`.
    pub fn job_name(&self, job: &JobRef) -> String {
        format!("projects/{}/locations/{}/jobs/{}", self.settings.project, self.settings.region, job.id)
    }
}

fn job_id(settings: &Settings, base: &str, class: ResourceClass) -> String {
    settings
        .job_template
        .replace("{env}", &settings.env)
        .replace("{base}", base)
        .replace("{class}", &class.as_str().to_ascii_lowercase())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_inventory_is_the_seed_table() {
        let inv = Inventory::new(&Settings::new("p"));
        let ids: Vec<&str> = inv.jobs().iter().map(|j| j.id.as_str()).collect();
        assert_eq!(
            ids,
            [
                "mapi-prod-base-bayes-s",
                "mapi-prod-base-bayes-m",
                "mapi-prod-base-bayes-l",
                "mapi-prod-base-dl-s",
                "mapi-prod-base-dl-m",
                "mapi-prod-base-dl-l",
                "mapi-prod-base-forecast-s",
                "mapi-prod-base-forecast-m",
                "mapi-prod-base-forecast-l",
                "mapi-prod-base-ml-s",
                "mapi-prod-base-ml-m",
                "mapi-prod-base-ml-l",
            ]
        );
        let mut gpu = Settings::new("p");
        gpu.gpu_jobs = true;
        let inv = Inventory::new(&gpu);
        assert_eq!(inv.jobs().len(), 13);
        assert_eq!(
            inv.place(ResourceClass::GPU, "dl.cnn_classifier").expect("gpu").id,
            "mapi-prod-base-dl-gpu"
        );
    }

    #[test]
    fn placement_picks_the_base_of_the_namespace_and_refuses_as_the_seed_says() {
        let inv = Inventory::new(&Settings::new("p"));
        assert_eq!(inv.place(ResourceClass::M, "sklearn.rf").expect("ml").id, "mapi-prod-base-ml-m");
        assert_eq!(inv.place(ResourceClass::S, "describe").expect("default").id, "mapi-prod-base-bayes-s");
        assert_eq!(inv.place(ResourceClass::L, "causal.did").expect("fc").id, "mapi-prod-base-forecast-l");
        assert!(inv.place(ResourceClass::XL, "describe").expect_err("xl").contains("GKE"));
        assert_eq!(inv.place(ResourceClass::GPU, "tabular.linear").expect_err("gpu"), GPU_ONLY_DL);
        assert!(
            inv.place(ResourceClass::GPU, "dl.mlp")
                .expect_err("no gpu job")
                .contains("MAPI_CLOUDRUN_GPU_JOBS")
        );
        assert_eq!(
            inv.job_name(inv.place(ResourceClass::S, "describe").expect("job")),
            "projects/p/locations/europe-west1/jobs/mapi-prod-base-bayes-s"
        );
    }
}
