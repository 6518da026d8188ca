//! What compute costs. A [`PriceTable`] is versioned data: every estimate
//! and every ledger entry names the table it used, so a price change never
//! rewrites history. Amounts are integer micros of the table's currency;
//! prices are held in nano-units per resource-second so list prices such as
//! $0.0001867 per accelerator-second stay exact.
//!
//! Architecture invariant: no floating point touches money. Arithmetic is in
//! `i128` nano-units and milliseconds, rounded once, half up, to micros.

use std::time::Duration;

use mapi_domain::ResourceClass;
use serde::{Deserialize, Serialize};

/// Nano-units of currency per resource-second.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rates {
    pub vcpu_second_nanos: i64,
    pub gib_second_nanos: i64,
    pub accelerator_second_nanos: i64,
}

/// A versioned price list.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PriceTable {
    pub version: &'static str,
    pub currency: &'static str,
    pub source: &'static str,
    pub rates: Rates,
}

/// The current table: Cloud Run (jobs, instance-based billing) list prices,
/// Tier 1 regions, as published on cloud.google.com/run/pricing: $0.000018
/// per vCPU-second, $0.000002 per GiB-second, and an NVIDIA L4 without zonal
/// redundancy at $0.0001867 per second. Estimates at list prices.
pub const CLOUD_RUN_2026_11: PriceTable = PriceTable {
    version: "cloudrun-tier1-2026-11",
    currency: "USD",
    source: "Cloud Run list prices, Tier 1, instance-based billing",
    rates: Rates { vcpu_second_nanos: 18_000, gib_second_nanos: 2_000, accelerator_second_nanos: 186_700 },
};

/// The table in force.
pub const CURRENT: PriceTable = CLOUD_RUN_2026_11;

/// Every table ever used, so a ledger entry's table can always be found.
pub const TABLES: &[PriceTable] = &[CLOUD_RUN_2026_11];

pub fn table(version: &str) -> Option<&'static PriceTable> {
    TABLES.iter().find(|t| t.version == version)
}

/// Resources used and what they cost.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Charge {
    pub class: ResourceClass,
    pub tasks: u32,
    /// Wall time of the attempt in milliseconds.
    pub wall_ms: u64,
    /// vCPU-milliseconds: vCPUs × tasks × wall time.
    pub vcpu_ms: u64,
    /// GiB-milliseconds.
    pub gib_ms: u64,
    /// The accelerators each task had: the class's, or fewer where the
    /// executor had none to give (a GPU-class run on the CPU has 0).
    #[serde(default)]
    pub gpus: u32,
    /// Accelerator-milliseconds: GPUs × tasks × wall time.
    pub accelerator_ms: u64,
    pub amount_micros: i64,
    pub currency: String,
    pub price_table: String,
}

impl PriceTable {
    /// The charge for `tasks` tasks of `class` running for `wall`, each with the class's accelerators.
    pub fn charge(&self, class: ResourceClass, tasks: u32, wall: Duration) -> Charge {
        self.charge_used(class, class.gpus(), tasks, wall)
    }

    /// The charge for `tasks` tasks of `class` running for `wall`, each with
    /// `gpus` accelerators (at most the class's): a class's vCPUs and memory
    /// are charged whole, accelerators only as used, so a GPU-class run that
    /// got no GPU pays the class's 8 vCPUs and 32 GiB and no accelerator-seconds.
    pub fn charge_used(&self, class: ResourceClass, gpus: u32, tasks: u32, wall: Duration) -> Charge {
        let gpus = gpus.min(class.gpus());
        let wall_ms = u64::try_from(wall.as_millis()).unwrap_or(u64::MAX);
        let per_task = |units: u32| u64::from(units).saturating_mul(u64::from(tasks)).saturating_mul(wall_ms);
        let (vcpu_ms, gib_ms, accelerator_ms) =
            (per_task(class.vcpu()), per_task(class.memory_gib()), per_task(gpus));
        let nanos_x_ms = i128::from(vcpu_ms) * i128::from(self.rates.vcpu_second_nanos)
            + i128::from(gib_ms) * i128::from(self.rates.gib_second_nanos)
            + i128::from(accelerator_ms) * i128::from(self.rates.accelerator_second_nanos);
        // nano-units × ms → micros: divide by 1000 (ms→s) and by 1000 (nano→micro), half up.
        let micros = (nanos_x_ms + 500_000) / 1_000_000;
        Charge {
            class,
            tasks,
            wall_ms,
            vcpu_ms,
            gib_ms,
            gpus,
            accelerator_ms,
            amount_micros: i64::try_from(micros).unwrap_or(i64::MAX),
            currency: self.currency.to_owned(),
            price_table: self.version.to_owned(),
        }
    }

    /// The most a run can cost on one attempt: its class for its whole timeout.
    pub fn estimate(&self, class: ResourceClass, tasks: u32, timeout: Duration) -> Charge {
        self.charge(class, tasks, timeout)
    }
}

/// Cloud Run's request-based billing (a service whose CPU is allocated only
/// while it answers), Tier 1 list prices from cloud.google.com/run/pricing:
/// $0.000024 per vCPU-second, $0.0000025 per GiB-second and $0.40 per
/// million requests, a request's time rounded up to 100 ms; an idle
/// minimum instance (kept warm by `min_instances`, answering nothing) at
/// $0.0000025 per vCPU-second and $0.0000025 per GiB-second.
pub const REQUEST_BILLING_2026_11: RequestRates = RequestRates {
    version: "cloudrun-requests-tier1-2026-11",
    vcpu_second_nanos: 24_000,
    gib_second_nanos: 2_500,
    request_nanos: 400,
    granularity_ms: 100,
    idle_vcpu_second_nanos: 2_500,
    idle_gib_second_nanos: 2_500,
};

/// Prices of request-billed serving.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RequestRates {
    pub version: &'static str,
    pub vcpu_second_nanos: i64,
    pub gib_second_nanos: i64,
    /// The fee of one request.
    pub request_nanos: i64,
    /// A request's time is billed in whole multiples of this.
    pub granularity_ms: u64,
    /// An idle minimum instance's time.
    pub idle_vcpu_second_nanos: i64,
    pub idle_gib_second_nanos: i64,
}

/// What one score used and costs, in nano-units (a score costs well under
/// a micro-unit: the sum over a period is rounded, once, where it is shown).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScoreCharge {
    /// The score's time as billed.
    pub billed_ms: u64,
    pub vcpu_ms: u64,
    pub gib_ms: u64,
    pub accelerator_ms: u64,
    pub nanos: u64,
}

impl RequestRates {
    /// A score answered in `ms` on an instance of `vcpus` and `gib`, billed
    /// per request. Concurrent scores on one instance are each billed their
    /// whole time, so over a busy minute this is an upper bound.
    pub fn score(&self, vcpus: u32, gib: u32, ms: u64) -> ScoreCharge {
        let g = self.granularity_ms.max(1);
        let billed_ms = ms.max(1).div_ceil(g).saturating_mul(g);
        let (vcpu_ms, gib_ms) = (u64::from(vcpus) * billed_ms, u64::from(gib) * billed_ms);
        let nanos = (i128::from(vcpu_ms) * i128::from(self.vcpu_second_nanos)
            + i128::from(gib_ms) * i128::from(self.gib_second_nanos))
            / 1000
            + i128::from(self.request_nanos);
        ScoreCharge {
            billed_ms,
            vcpu_ms,
            gib_ms,
            accelerator_ms: 0,
            nanos: u64::try_from(nanos).unwrap_or(u64::MAX),
        }
    }
}

impl RequestRates {
    /// `ms` of idle minimum-instance time on instances of `vcpus` and `gib`:
    /// no request fee, no rounding.
    pub fn idle(&self, vcpus: u32, gib: u32, ms: u64) -> ScoreCharge {
        let (vcpu_ms, gib_ms) = (u64::from(vcpus) * ms, u64::from(gib) * ms);
        let nanos = (i128::from(vcpu_ms) * i128::from(self.idle_vcpu_second_nanos)
            + i128::from(gib_ms) * i128::from(self.idle_gib_second_nanos))
            / 1000;
        ScoreCharge {
            billed_ms: ms,
            vcpu_ms,
            gib_ms,
            accelerator_ms: 0,
            nanos: u64::try_from(nanos).unwrap_or(u64::MAX),
        }
    }
}

impl PriceTable {
    /// A score answered in `ms` on an instance-billed GPU instance of
    /// `vcpus`, `gib` and one accelerator: its own time at instance prices,
    /// no request fee. The instance's idle time between scores is not in it.
    pub fn instance_score(&self, vcpus: u32, gib: u32, ms: u64) -> ScoreCharge {
        let ms = ms.max(1);
        let r = &self.rates;
        let (vcpu_ms, gib_ms) = (u64::from(vcpus) * ms, u64::from(gib) * ms);
        let nanos = (i128::from(vcpu_ms) * i128::from(r.vcpu_second_nanos)
            + i128::from(gib_ms) * i128::from(r.gib_second_nanos)
            + i128::from(ms) * i128::from(r.accelerator_second_nanos))
            / 1000;
        ScoreCharge {
            billed_ms: ms,
            vcpu_ms,
            gib_ms,
            accelerator_ms: ms,
            nanos: u64::try_from(nanos).unwrap_or(u64::MAX),
        }
    }
}

/// Nano-units rounded half up to micro-units.
pub fn nanos_to_micros(nanos: u64) -> i64 {
    i64::try_from(nanos.saturating_add(500) / 1000).unwrap_or(i64::MAX)
}

/// Formats micros as a decimal amount, e.g. `0.043200 USD`.
pub fn format_micros(micros: i64, currency: &str) -> String {
    let sign = if micros < 0 { "-" } else { "" };
    let m = micros.unsigned_abs();
    format!("{sign}{}.{:06} {currency}", m / 1_000_000, m % 1_000_000)
}

/// Parses an amount of a currency (`500`, `12.5`, `0.000001`) into exact
/// micros; more than six decimals, signs and anything else are refused.
pub fn parse_micros(s: &str) -> Result<i64, String> {
    let s = s.trim();
    let (whole, frac) = s.split_once('.').unwrap_or((s, ""));
    let digits = |p: &str| p.bytes().all(|b| b.is_ascii_digit());
    if whole.is_empty()
        || !digits(whole)
        || !digits(frac)
        || frac.len() > 6
        || (s.contains('.') && frac.is_empty())
    {
        return Err(format!(
            "`{s}` is not an amount: use digits with at most six decimals, like 250 or 12.5"
        ));
    }
    let too_large = || format!("`{s}` is too large");
    let whole: i64 = whole.parse().map_err(|_| too_large())?;
    let frac: i64 = format!("{frac:0<6}").parse().map_err(|_| too_large())?;
    whole.checked_mul(1_000_000).and_then(|w| w.checked_add(frac)).ok_or_else(too_large)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_hour_of_class_s_at_list_price() {
        // 2 vCPU × 3600 s × $0.000018 = $0.1296; 8 GiB × 3600 s × $0.000002 = $0.0576.
        let c = CURRENT.charge(ResourceClass::S, 1, Duration::from_secs(3600));
        assert_eq!(c.amount_micros, 187_200);
        assert_eq!((c.vcpu_ms, c.gib_ms, c.accelerator_ms), (7_200_000, 28_800_000, 0));
        assert_eq!(format_micros(c.amount_micros, "USD"), "0.187200 USD");
    }

    #[test]
    fn gpu_adds_accelerator_seconds() {
        // 8 vCPU × 10 s × 18 µ$ + 32 GiB × 10 s × 2 µ$ + 10 s × 186.7 µ$ = 1440 + 640 + 1867.
        let c = CURRENT.charge(ResourceClass::GPU, 1, Duration::from_secs(10));
        assert_eq!(c.amount_micros, 3_947);
        assert_eq!(c.accelerator_ms, 10_000);
    }

    #[test]
    fn a_gpu_run_without_a_gpu_pays_the_class_cpu_and_memory_only() {
        // 8 vCPU × 10 s × 18 µ$ + 32 GiB × 10 s × 2 µ$ = 1440 + 640; no accelerator-seconds.
        let c = CURRENT.charge_used(ResourceClass::GPU, 0, 1, Duration::from_secs(10));
        assert_eq!((c.amount_micros, c.gpus, c.accelerator_ms, c.vcpu_ms), (2_080, 0, 0, 80_000));
        // Never more accelerators than the class has.
        assert_eq!(CURRENT.charge_used(ResourceClass::S, 1, 1, Duration::from_secs(10)).accelerator_ms, 0);
        assert_eq!(
            CURRENT.charge_used(ResourceClass::GPU, 4, 1, Duration::from_secs(10)).accelerator_ms,
            10_000
        );
    }

    #[test]
    fn rounding_is_half_up_once_and_tasks_multiply() {
        // S for 1 ms: 2×18000 + 8×2000 = 52000 nano×ms → 0.052 µ$ → 0.
        assert_eq!(CURRENT.charge(ResourceClass::S, 1, Duration::from_millis(1)).amount_micros, 0);
        // 10 ms → 0.52 µ$ → 1 (half up).
        assert_eq!(CURRENT.charge(ResourceClass::S, 1, Duration::from_millis(10)).amount_micros, 1);
        let one = CURRENT.charge(ResourceClass::M, 1, Duration::from_secs(100)).amount_micros;
        let four = CURRENT.charge(ResourceClass::M, 4, Duration::from_secs(100)).amount_micros;
        assert_eq!(four, 4 * one);
    }

    #[test]
    fn a_score_is_billed_per_request_in_100_ms_steps_with_its_fee() {
        // 1 vCPU, 2 GiB, 3 ms → 100 ms: 100 × 24 000 / 1000 + 200 × 2 500 / 1000 + 400 = 2 400 + 500 + 400.
        let c = REQUEST_BILLING_2026_11.score(1, 2, 3);
        assert_eq!((c.billed_ms, c.vcpu_ms, c.gib_ms, c.nanos), (100, 100, 200, 3_300));
        assert_eq!(REQUEST_BILLING_2026_11.score(1, 2, 100).billed_ms, 100);
        assert_eq!(REQUEST_BILLING_2026_11.score(1, 2, 101).billed_ms, 200);
        assert_eq!(REQUEST_BILLING_2026_11.score(1, 2, 0).billed_ms, 100, "a score takes some time");
        // An idle minute of a 1 vCPU, 2 GiB instance: 60 × (2,500 + 2 × 2,500) nanos, no fee.
        let idle = REQUEST_BILLING_2026_11.idle(1, 2, 60_000);
        assert_eq!((idle.nanos, idle.vcpu_ms, idle.gib_ms), (450_000, 60_000, 120_000));
        // A million 100 ms scores: $2.40 + $0.50 + $0.40.
        assert_eq!(nanos_to_micros(1_000_000 * c.nanos), 3_300_000);
        assert_eq!((nanos_to_micros(499), nanos_to_micros(500)), (0, 1));
    }

    #[test]
    fn a_gpu_score_is_its_time_at_instance_prices() {
        // 4 vCPU × 18 000 + 16 GiB × 2 000 + 186 700 per second, for 250 ms.
        let c = CURRENT.instance_score(4, 16, 250);
        assert_eq!(c.nanos, (4 * 18_000 + 16 * 2_000 + 186_700) / 4);
        assert_eq!((c.vcpu_ms, c.gib_ms, c.accelerator_ms), (1_000, 4_000, 250));
    }

    #[test]
    fn every_table_is_findable_by_version() {
        assert_eq!(table(CURRENT.version), Some(&CURRENT));
        assert!(table("nope").is_none());
    }

    #[test]
    fn amounts_parse_to_exact_micros() {
        assert_eq!(parse_micros("500"), Ok(500_000_000));
        assert_eq!(parse_micros("12.5"), Ok(12_500_000));
        assert_eq!(parse_micros("0.000001"), Ok(1));
        assert_eq!(parse_micros("0.1"), Ok(100_000));
        for bad in ["", "-1", "1.", ".5", "1.0000001", "1e3", "12,5", "99999999999999999999"] {
            assert!(parse_micros(bad).is_err(), "{bad}");
        }
    }
}
