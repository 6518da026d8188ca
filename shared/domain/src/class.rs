//! Resource classes, ordered S < M < L < XL < GPU, with the resources each
//! one gets: S 2 vCPU and 8 GiB, M 4 and 16, L 8 and 32, XL 16 and 64 (no
//! Cloud Run Job has it), GPU 8 and 32 with one GPU.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// A resource class, ordered S < M < L < XL < GPU: a limit on the largest
/// class refuses every class above it.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, utoipa::ToSchema,
)]
pub enum ResourceClass {
    S,
    M,
    L,
    XL,
    GPU,
}

impl ResourceClass {
    pub const ALL: [ResourceClass; 5] =
        [ResourceClass::S, ResourceClass::M, ResourceClass::L, ResourceClass::XL, ResourceClass::GPU];

    pub fn as_str(self) -> &'static str {
        match self {
            ResourceClass::S => "S",
            ResourceClass::M => "M",
            ResourceClass::L => "L",
            ResourceClass::XL => "XL",
            ResourceClass::GPU => "GPU",
        }
    }

    /// vCPUs of the class.
    pub fn vcpu(self) -> u32 {
        match self {
            ResourceClass::S => 2,
            ResourceClass::M => 4,
            ResourceClass::L => 8,
            ResourceClass::XL => 16,
            ResourceClass::GPU => 8,
        }
    }

    /// Memory of the class in GiB.
    pub fn memory_gib(self) -> u32 {
        match self {
            ResourceClass::S => 8,
            ResourceClass::M => 16,
            ResourceClass::L => 32,
            ResourceClass::XL => 64,
            ResourceClass::GPU => 32,
        }
    }

    /// Accelerators (one NVIDIA L4 on GPU).
    pub fn gpus(self) -> u32 {
        u32::from(self == ResourceClass::GPU)
    }

    /// The class an out-of-memory attempt retries on: S→M→L, none above L
    /// (XL belongs to another executor; GPU is not a memory upgrade).
    pub fn next_larger(self) -> Option<ResourceClass> {
        match self {
            ResourceClass::S => Some(ResourceClass::M),
            ResourceClass::M => Some(ResourceClass::L),
            _ => None,
        }
    }
}

/// The sentence a GPU-class run of a method other than a deep-learning one
/// is refused with.
pub const GPU_ONLY_DL: &str = "only dl models run on the GPU class";

/// Whether the GPU class may run `method`: only the deep-learning methods
/// (`dl.*`) use an accelerator, so any other method of the GPU class would
/// pay for one that stays idle.
pub fn runs_on_gpu(method: &str) -> bool {
    method.split('.').next() == Some("dl")
}

impl fmt::Display for ResourceClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Error for an unknown class name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown resource class `{0}`: use one of S, M, L, XL, GPU")]
pub struct UnknownClass(pub String);

impl FromStr for ResourceClass {
    type Err = UnknownClass;
    fn from_str(s: &str) -> Result<Self, UnknownClass> {
        ResourceClass::ALL
            .into_iter()
            .find(|c| c.as_str().eq_ignore_ascii_case(s))
            .ok_or_else(|| UnknownClass(s.chars().take(16).collect()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The inventory's classes and their resources, typed by hand.
    #[test]
    fn resources_match_the_inventory_table() {
        let spec = [("S", 2, 8, 0), ("M", 4, 16, 0), ("L", 8, 32, 0), ("GPU", 8, 32, 1)];
        for (name, vcpu, gib, gpu) in spec {
            let c: ResourceClass = name.parse().expect("known class");
            assert_eq!((c.vcpu(), c.memory_gib(), c.gpus()), (vcpu, gib, gpu), "{name}");
        }
    }

    #[test]
    fn classes_are_ordered_and_round_trip() {
        assert!(ResourceClass::S < ResourceClass::M && ResourceClass::XL < ResourceClass::GPU);
        for c in ResourceClass::ALL {
            assert_eq!(c.as_str().parse::<ResourceClass>().ok(), Some(c));
        }
        assert!("XXL".parse::<ResourceClass>().is_err());
        assert_eq!(ResourceClass::S.next_larger(), Some(ResourceClass::M));
        assert_eq!(ResourceClass::L.next_larger(), None);
    }
}
