//! The deep-learning methods (`dl.*`, PyTorch on the base-dl image) and the
//! one rule for where their work runs: [`Backend`], asked by the parameter
//! `dl.backend` and settled at placement by [`place`] from the GPUs the
//! execution gets.
//!
//! The rule: a run of the GPU class asks for an accelerator. When its
//! execution gets none (the local executors on a machine where `nvidia-smi`
//! sees no GPU), it runs on the CPU and carries the warning
//! `GPU_UNAVAILABLE`; the run's `dl.backend` is rewritten to the backend its
//! work actually uses (`gpu` or `cpu`), so the run says where it ran. A
//! `dl.backend` of `gpu` needs the GPU class (no other class has one);
//! `cpu` is honoured on any class.

use std::collections::BTreeMap;

use serde_json::Value;

use super::python::{MATPLOTLIB, NUMPY, PANDAS, PNG, TEST_SIZE, bounded, out, required};
use super::{
    Input, JSON, MethodSpec, ModelSpec, ParamError, ParamKind, ParamSpec, Params, PythonCode, param,
};
use crate::registry::Package;
use mapi_domain::ResourceClass;

/// The parameter that asks for a backend and records the one used.
pub const BACKEND_PARAM: &str = "dl.backend";

/// Where a deep-learning method's tensors live.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// The GPU when the execution has one, else the CPU.
    Auto,
    Gpu,
    Cpu,
}

impl Backend {
    pub fn as_str(self) -> &'static str {
        match self {
            Backend::Auto => "auto",
            Backend::Gpu => "gpu",
            Backend::Cpu => "cpu",
        }
    }

    fn parse(s: &str) -> Option<Backend> {
        [Backend::Auto, Backend::Gpu, Backend::Cpu].into_iter().find(|b| b.as_str() == s)
    }
}

/// The backend a method's validated params ask for: `None` for a method
/// without `dl.backend`.
///
/// # Errors
///
/// `dl.backend` is not one of `auto`, `gpu`, `cpu`, or is `gpu` on a class
/// without an accelerator.
pub fn requested(
    spec: &MethodSpec,
    params: &Params,
    class: ResourceClass,
) -> Result<Option<Backend>, ParamError> {
    if spec.param(BACKEND_PARAM).is_none() {
        return Ok(None);
    }
    let text = params.get_str(BACKEND_PARAM).unwrap_or("auto");
    let backend = Backend::parse(text).ok_or_else(|| ParamError::Invalid {
        name: BACKEND_PARAM.to_owned(),
        why: format!("{text:?} is not a backend: use auto, gpu or cpu"),
    })?;
    if backend == Backend::Gpu && class.gpus() == 0 {
        return Err(ParamError::Invalid {
            name: BACKEND_PARAM.to_owned(),
            why: format!(
                "gpu needs the GPU class (class {class} has no accelerator): set class GPU, or use auto or cpu"
            ),
        });
    }
    Ok(Some(backend))
}

/// Why a run's work is not where it asked to be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PlacementWarning {
    /// The run's class has an accelerator, its execution got none: it runs on the CPU.
    GpuUnavailable,
}

/// Where an attempt's work runs, settled at placement.
#[derive(Debug, Clone, PartialEq)]
pub struct Placed {
    /// The GPUs each task of the execution gets.
    pub gpus: u32,
    pub warning: Option<PlacementWarning>,
    /// The parameter to record on the run (the backend actually used), when the method has one.
    pub param: Option<(&'static str, Value)>,
}

/// Settles an attempt of `class` running `method` with `params` on an
/// executor whose GPU-class executions get `offered` GPUs.
pub fn place(method: &str, params: &BTreeMap<String, Value>, class: ResourceClass, offered: u32) -> Placed {
    let gpus = class.gpus().min(offered);
    let warning = (class.gpus() > gpus).then_some(PlacementWarning::GpuUnavailable);
    let asked = params.get(BACKEND_PARAM).and_then(Value::as_str).and_then(Backend::parse);
    let has_param = super::find(method).is_some_and(|m| m.param(BACKEND_PARAM).is_some());
    let param = has_param.then(|| {
        let used = match asked.unwrap_or(Backend::Auto) {
            Backend::Cpu => Backend::Cpu,
            Backend::Auto | Backend::Gpu if gpus > 0 => Backend::Gpu,
            Backend::Auto | Backend::Gpu => Backend::Cpu,
        };
        (BACKEND_PARAM, Value::String(used.as_str().to_owned()))
    });
    Placed { gpus, warning, param }
}

/// PyTorch: Debian's CPU build on one machine, the CUDA wheels on base-dl.
const TORCH: Package = Package { module: "torch", debian: "python3-torch", wheel: Some("torch") };
const DL: &[Package] = &[NUMPY, PANDAS, TORCH, MATPLOTLIB];

const LABELS: ParamSpec =
    required(param("y", ParamKind::AnyColumn, "The target: class labels (text or numbers)."));
const INPUTS: ParamSpec =
    param("x", ParamKind::Columns, "Numeric input columns. Default: every column other than `y`.");
const BATCH: ParamSpec =
    bounded(param("batch_size", ParamKind::Integer, "Rows per mini-batch."), "32", Some(1.0), Some(65_536.0));
const RATE: ParamSpec =
    bounded(param("learning_rate", ParamKind::Number, "Adam's step size."), "0.001", Some(1e-9), Some(10.0));
const SEED: ParamSpec = bounded(
    param("random_state", ParamKind::Integer, "Seeds the weights, the split and each epoch's shuffle."),
    "0",
    Some(0.0),
    Some(4_294_967_295.0),
);
const BACKEND: ParamSpec = bounded(
    param(
        BACKEND_PARAM,
        ParamKind::Text,
        "`auto` (the GPU when the execution has one), `gpu` (class GPU only) or `cpu`; the run records the backend it used.",
    ),
    "\"auto\"",
    None,
    None,
);

const fn epochs(default: &'static str) -> ParamSpec {
    bounded(
        param("epochs", ParamKind::Integer, "Passes over the training rows."),
        default,
        Some(1.0),
        Some(10_000.0),
    )
}

const MODEL_PT: super::OutputSpec = out(
    "model.pt",
    "application/octet-stream",
    "The fitted network (PyTorch weights with its architecture, classes, inputs and scaling), which endpoints serve.",
);
const HISTORY: super::OutputSpec = out(
    "metrics.json",
    JSON,
    "Per-epoch loss, accuracy and seconds, the hold-out accuracy and confusion matrix, and the backend used.",
);
const CURVES: super::OutputSpec = out("plot.png", PNG, "Loss and accuracy per epoch, training and hold-out.");

const fn code(entry: &'static str) -> PythonCode {
    PythonCode { entry, predict: Some("dl:predict"), needs: DL, base: "base-dl" }
}

pub(super) const MLP: MethodSpec = MethodSpec {
    name: "dl.mlp_classifier",
    summary: "A multilayer perceptron classifier (PyTorch, Adam) with a hold-out split, per-epoch metrics and checkpoints; runs on a GPU with class GPU.",
    params: &[
        LABELS,
        INPUTS,
        bounded(
            param("hidden_units", ParamKind::Integer, "Units in each hidden layer."),
            "64",
            Some(1.0),
            Some(4096.0),
        ),
        bounded(
            param("hidden_layers", ParamKind::Integer, "Hidden layers (ReLU)."),
            "2",
            Some(1.0),
            Some(8.0),
        ),
        bounded(
            param("standardize", ParamKind::Boolean, "Standardise the inputs on the training rows first."),
            "true",
            None,
            None,
        ),
        epochs("30"),
        BATCH,
        RATE,
        TEST_SIZE,
        SEED,
        BACKEND,
    ],
    outputs: &[MODEL_PT, HISTORY, CURVES],
    model: Some(ModelSpec { file: "model.pt" }),
    example: r#"{"y": "species", "epochs": 50}"#,
    input: Input::Dataset,
    example_item: None,
    fan_out: None,
    python: Some(code("dl:mlp_classifier")),
};

pub(super) const CNN: MethodSpec = MethodSpec {
    name: "dl.cnn_classifier",
    summary: "A convolutional image classifier (PyTorch: two conv blocks, Adam) on pixel columns, with per-epoch metrics and checkpoints; runs on a GPU with class GPU.",
    params: &[
        LABELS,
        param(
            "x",
            ParamKind::Columns,
            "The pixel columns, row-major, channel after channel. Default: every column other than `y`.",
        ),
        bounded(
            param("image_height", ParamKind::Integer, "Pixels per column of the image; 0: a square image."),
            "0",
            Some(0.0),
            Some(4096.0),
        ),
        bounded(
            param("image_width", ParamKind::Integer, "Pixels per row of the image; 0: a square image."),
            "0",
            Some(0.0),
            Some(4096.0),
        ),
        bounded(param("channels", ParamKind::Integer, "Channels of each pixel."), "1", Some(1.0), Some(16.0)),
        bounded(
            param(
                "filters",
                ParamKind::Integer,
                "Filters of the first conv block (the second has twice as many).",
            ),
            "16",
            Some(1.0),
            Some(512.0),
        ),
        epochs("20"),
        BATCH,
        RATE,
        TEST_SIZE,
        SEED,
        BACKEND,
    ],
    outputs: &[MODEL_PT, HISTORY, CURVES],
    model: Some(ModelSpec { file: "model.pt" }),
    example: r#"{"y": "digit", "epochs": 10}"#,
    input: Input::Dataset,
    example_item: None,
    fan_out: None,
    python: Some(code("dl:cnn_classifier")),
};

#[cfg(test)]
mod tests {
    use super::*;
    use crate::validate;

    fn params(v: Value) -> BTreeMap<String, Value> {
        v.as_object().map(|o| o.clone().into_iter().collect()).unwrap_or_default()
    }

    #[test]
    fn the_backend_used_follows_the_gpus_the_execution_gets() {
        let cnn = "dl.cnn_classifier";
        let auto = params(serde_json::json!({"dl.backend": "auto"}));
        let on_gpu = place(cnn, &auto, ResourceClass::GPU, 1);
        assert_eq!((on_gpu.gpus, on_gpu.warning), (1, None));
        assert_eq!(on_gpu.param, Some((BACKEND_PARAM, Value::from("gpu"))));

        let without = place(cnn, &auto, ResourceClass::GPU, 0);
        assert_eq!((without.gpus, without.warning), (0, Some(PlacementWarning::GpuUnavailable)));
        assert_eq!(without.param, Some((BACKEND_PARAM, Value::from("cpu"))));

        let cpu = place(cnn, &params(serde_json::json!({"dl.backend": "cpu"})), ResourceClass::GPU, 1);
        assert_eq!(
            (cpu.gpus, cpu.param.map(|p| p.1)),
            (1, Some(Value::from("cpu"))),
            "asked cpu, pays the GPU"
        );

        let small = place(cnn, &auto, ResourceClass::S, 1);
        assert_eq!((small.gpus, small.warning), (0, None), "class S asks for no accelerator");
        assert_eq!(small.param.map(|p| p.1), Some(Value::from("cpu")));

        let other = place("tabular.linear", &params(serde_json::json!({})), ResourceClass::S, 1);
        assert_eq!(other, Placed { gpus: 0, warning: None, param: None });
    }

    #[test]
    fn gpu_needs_the_gpu_class_and_a_backend_is_one_of_three() {
        let spec = crate::find("dl.mlp_classifier").expect("registered");
        let check = |v: Value, class| {
            let p = validate(spec, &params(v)).expect("valid params");
            requested(spec, &p, class)
        };
        assert_eq!(check(serde_json::json!({"y": "c"}), ResourceClass::S), Ok(Some(Backend::Auto)));
        assert_eq!(
            check(serde_json::json!({"y": "c", "dl.backend": "gpu"}), ResourceClass::GPU),
            Ok(Some(Backend::Gpu))
        );
        let e = check(serde_json::json!({"y": "c", "dl.backend": "gpu"}), ResourceClass::M)
            .expect_err("no GPU on M");
        assert!(e.to_string().contains("dl.backend") && e.to_string().contains("class GPU"), "{e}");
        let e =
            check(serde_json::json!({"y": "c", "dl.backend": "tpu"}), ResourceClass::GPU).expect_err("tpu");
        assert!(e.to_string().contains("auto, gpu or cpu"), "{e}");
        let linear = crate::find("tabular.linear").expect("registered");
        let p = validate(linear, &params(serde_json::json!({"y": "y"}))).expect("valid");
        assert_eq!(requested(linear, &p, ResourceClass::GPU), Ok(None));
        assert!(mapi_domain::class::runs_on_gpu("dl.cnn_classifier"));
        assert!(!mapi_domain::class::runs_on_gpu("tabular.linear"));
    }
}
