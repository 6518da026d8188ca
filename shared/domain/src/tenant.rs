//! What a tenant is: its trust tier, status and data residency.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

crate::wire_enum!(
    /// Where a tenant's runs may execute, and its default quotas.
    Tier {
        Internal => "internal",
        Verified => "verified",
        Public => "public",
        SelfHostedTrusted => "self-hosted-trusted",
    }
);

crate::wire_enum!(
    /// A tenant's status.
    TenantStatus {
        /// Normal.
        Active => "active",
        /// Members can read and download; every change is refused.
        Suspended => "suspended",
        /// No access for members.
        Deleting => "deleting",
    }
);

/// Where a tenant's data lives: `eu`, `us`, `asia`, or one region such as
/// `europe-west1`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Residency(String);

impl Residency {
    /// What `parse` accepts, as the API document states it: 2 to 30 of
    /// lowercase letters, digits and `-`, starting with a letter.
    pub const PATTERN: &str = "^[a-z][a-z0-9-]{1,29}$";

    pub fn parse(s: &str) -> Result<Residency, String> {
        let ok = (2..=30).contains(&s.len())
            && s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && s.as_bytes()[0].is_ascii_lowercase();
        if ok {
            Ok(Residency(s.to_owned()))
        } else {
            Err(format!("residency `{s}` is invalid: use eu, us, asia or a region such as europe-west1"))
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether a run of a tenant with this residency may execute in
    /// `region` (a Cloud Run region such as `europe-west1`): `eu` takes the
    /// `europe-…` regions, `us` the `us-…` ones, `asia` the `asia-…` ones,
    /// and a residency naming one region takes that region only.
    pub fn admits(&self, region: &str) -> bool {
        match self.area_prefix() {
            Some(prefix) => region.starts_with(prefix),
            None => region == self.0,
        }
    }

    /// What this residency requires of an executor, in words for a detail.
    pub fn requirement(&self) -> String {
        match self.0.as_str() {
            "eu" => "a region in the EU (europe-…)".to_owned(),
            "us" => "a region in the US (us-…)".to_owned(),
            "asia" => "a region in Asia (asia-…)".to_owned(),
            one => format!("the region {one}"),
        }
    }

    fn area_prefix(&self) -> Option<&'static str> {
        match self.0.as_str() {
            "eu" => Some("europe-"),
            "us" => Some("us-"),
            "asia" => Some("asia-"),
            _ => None,
        }
    }
}

impl fmt::Display for Residency {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl Serialize for Residency {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for Residency {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Residency::parse(&String::deserialize(d)?).map_err(serde::de::Error::custom)
    }
}

impl utoipa::PartialSchema for Residency {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        crate::schema::string_matching(Residency::PATTERN)
            .description(Some("eu, us, asia, or a region such as europe-west1"))
            .into()
    }
}

impl utoipa::ToSchema for Residency {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stated_pattern_is_what_parse_accepts() {
        let re = regex::Regex::new(Residency::PATTERN).expect("compiles");
        let long = format!("a{}", "b".repeat(29));
        let too_long = format!("a{}", "b".repeat(30));
        for s in ["eu", "europe-west1", "e", "", "1eu", "EU", "eu_1", "-eu", "eu-", &long, &too_long] {
            assert_eq!(re.is_match(s), Residency::parse(s).is_ok(), "{s:?}");
        }
    }

    #[test]
    fn wire_names_are_the_seeds() {
        let tiers: Vec<&str> = Tier::ALL.iter().map(|t| t.as_str()).collect();
        assert_eq!(tiers, ["internal", "verified", "public", "self-hosted-trusted"]);
        let statuses: Vec<&str> = TenantStatus::ALL.iter().map(|t| t.as_str()).collect();
        assert_eq!(statuses, ["active", "suspended", "deleting"]);
        assert!(Residency::parse("europe-west1").is_ok());
        assert!(Residency::parse("EU").is_err() && Residency::parse("e").is_err());
    }

    #[test]
    fn a_residency_admits_the_regions_of_its_area_or_its_one_region() {
        let cases = [
            ("eu", "europe-west1", true),
            ("eu", "europe-north2", true),
            ("eu", "us-central1", false),
            ("eu", "eu", false),
            ("us", "us-central1", true),
            ("us", "northamerica-northeast1", false),
            ("us", "australia-southeast1", false),
            ("asia", "asia-northeast1", true),
            ("asia", "europe-west1", false),
            ("europe-west4", "europe-west4", true),
            ("europe-west4", "europe-west1", false),
            ("europe-west4", "europe-west45", false),
        ];
        for (residency, region, admitted) in cases {
            let r = Residency::parse(residency).expect("a residency");
            assert_eq!(r.admits(region), admitted, "{residency} in {region}");
        }
        let one = Residency::parse("europe-west4").expect("a residency");
        assert_eq!(one.requirement(), "the region europe-west4");
        assert!(Residency::parse("us").expect("us").requirement().contains("us-"));
    }
}
