//! Model versions made the way the platform makes them, for the hosting
//! suites: a `tabular.linear` fit's `model.json` sealed into a signed bundle
//! (local P-256 key), its files as a model server reads them, and a copy
//! changed after signing.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use bytes::Bytes;
use mapi_clock::VirtualClock;
use mapi_domain::Timestamp;
use mapi_hosting::{BundleFile, ModelRef};
use mapi_methods::Context;
use mapi_objects::fs::FsObjectStore;
use mapi_objects::signed::UrlSigner;
use mapi_objects::{IfGeneration, ObjectKey, ObjectStore};
use mapi_signer::Signer;
use mapi_signer::local::LocalSigner;
use serde_json::Value;

/// The data the fixtures fit.
pub const DATA: &str = "y,a,b\n3.1,1,0\n4.9,2,1\n7.2,3,1\n8.8,4,0\n11.1,5,2\n12.9,6,1\n";
/// Another fit's data (another model version).
pub const DATA_2: &str = "y,a,b\n2.0,1,0\n4.1,2,1\n6.2,3,1\n7.9,4,0\n10.2,5,2\n12.1,6,1\n";

struct Quiet;

impl Context for Quiet {
    fn progress(&mut self, _: f64, _: &str) {}
    fn metric(&mut self, _: &str, _: f64) {}
    fn checkpoint(&mut self, _: &Value) -> Result<(), String> {
        Ok(())
    }
    fn resume_from(&self) -> Option<Value> {
        None
    }
    fn stop_requested(&self) -> bool {
        false
    }
}

/// Fits `tabular.linear` (`y` on every other column) and answers `model.json`.
pub fn fit(csv: &str) -> Vec<u8> {
    let spec = mapi_methods::find("tabular.linear").expect("registered");
    let params = BTreeMap::from([("y".to_owned(), Value::from("y"))]);
    let params = mapi_methods::validate(spec, &params).expect("params");
    let outputs = mapi_methods::run("tabular.linear", &params, csv.as_bytes(), &mut Quiet).expect("fit");
    outputs.into_iter().next().expect("model.json").bytes
}

/// Signed bundles in a local object store under `dir`.
#[derive(Debug)]
pub struct Bundles {
    pub objects: FsObjectStore,
    pub signer: LocalSigner,
}

impl Bundles {
    pub fn new(dir: &Path) -> Bundles {
        let clock = Arc::new(VirtualClock::new(Timestamp::from_secs(1_800_000_000)));
        let objects =
            FsObjectStore::open(dir, "data", UrlSigner::new(b"k".to_vec(), "http://127.0.0.1:9"), clock)
                .expect("object store");
        let signer = LocalSigner::from_pem(&LocalSigner::generate_pem().expect("key"), &[]).expect("signer");
        Bundles { objects, signer }
    }

    /// The trusted keys as a model server is told them.
    pub fn trusted_keys(&self) -> String {
        serde_json::to_string(&self.signer.trusted_keys().export()).expect("json")
    }

    /// Seals `model.json` of run `run` (tenant `acme`) and answers the model.
    pub async fn seal(&self, run: &str, model: &[u8]) -> ModelRef {
        let dir = format!("t/acme/p/default/runs/{run}/a1");
        let artifact = ObjectKey::parse(&format!("{dir}/outputs/model.json")).expect("key");
        let written = self
            .objects
            .put(&artifact, Bytes::copy_from_slice(model), "application/json", IfGeneration::ABSENT)
            .await
            .expect("put");
        let prefix = ObjectKey::parse(&format!("{dir}/bundle")).expect("key");
        let pinned = [(artifact, written.generation)];
        let sealed = mapi_bundles::seal(&self.objects, &self.signer, &prefix, &pinned).await.expect("seal");
        let files = mapi_bundles::read_pinned(&self.objects, &self.signer, &prefix, &sealed.sha256)
            .await
            .expect("read");
        ModelRef {
            bundle: prefix.to_string(),
            manifest_sha256: sealed.sha256,
            trusted_keys: self.trusted_keys(),
            files: files
                .into_iter()
                .map(|(k, b)| BundleFile { key: k.to_string(), bytes: b.to_vec() })
                .collect(),
            base: None,
        }
    }
}

/// The same bundle with its model's coefficients changed after signing.
pub fn tampered(model: &ModelRef) -> ModelRef {
    let mut out = model.clone();
    for f in &mut out.files {
        if f.key.ends_with("/model.json") {
            let mut v: Value = serde_json::from_slice(&f.bytes).expect("json");
            v["coefficients"][0]["estimate"] = Value::from(1e6);
            f.bytes = serde_json::to_vec(&v).expect("json");
        }
    }
    out
}

/// Writes a model's files by key under `root` (as a bucket mount shows them).
pub fn write_files(root: &Path, model: &ModelRef) {
    for f in &model.files {
        let path = root.join(&f.key);
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        std::fs::write(&path, &f.bytes).expect("write");
    }
}

/// The example row of a fit and its prediction.
pub fn example(model_json: &[u8]) -> (Value, f64) {
    let v: Value = serde_json::from_slice(model_json).expect("json");
    (v["example"]["inputs"].clone(), v["example"]["prediction"].as_f64().expect("prediction"))
}
