//! Outgoing webhooks: the pure rules, with no I/O.
//!
//! A tenant registers an HTTPS URL and a signing secret; the platform then
//! POSTs events (a run succeeded, an endpoint is ready, a quota is nearly
//! used up) to it. This crate holds every decision that involves, and none
//! of the doing: it opens no sockets, resolves no names, reads no clock and
//! draws no random numbers. Callers pass the time, the resolved addresses,
//! the random key bytes and the HTTP status in.
//!
//! How a caller uses it:
//!
//! 1. When a webhook is created, parse its URL with [`TargetUrl::parse`]
//!    (https only, no credentials in the URL, no private IP literals, no
//!    `localhost`) and make its secret with [`Secret::from_bytes`] from
//!    fresh random bytes.
//! 2. At each delivery, resolve the host and pass every address to
//!    [`check_resolved`] before connecting, then connect to one of exactly
//!    those addresses (not a second lookup: the name may answer differently
//!    the second time). Do not follow redirects.
//! 3. Build the body from an [`Envelope`], pick the secrets with
//!    [`signing_secrets`] (the current one, plus the previous one during its
//!    grace period) and sign with [`sign`]; send the three [`Headers`].
//! 4. Read the answer with [`classify`] and log [`excerpt`] of its body; on
//!    [`Outcome::Retry`], ask [`next_attempt_delay`] when to try again, and
//!    mark the delivery failed when it answers `None`.

pub mod delivery;
pub mod event;
pub mod rotation;
pub mod signing;
pub mod target;

pub use delivery::{
    DELIVERY_WINDOW_S, EXCERPT_BYTES, MAX_ATTEMPTS, Outcome, classify, excerpt, next_attempt_delay, pace,
};
pub use event::{Envelope, EventType, UnknownEventType};
pub use rotation::{ROTATION_GRACE_S, grace_until, signing_secrets};
pub use signing::{
    DEFAULT_TOLERANCE_S, HEADER_ID, HEADER_SIGNATURE, HEADER_TIMESTAMP, Headers, Received, Secret,
    VerifyError, sign, verify,
};
pub use target::{
    Host, MAX_URL_LEN, Policy, Reason, Scheme, TargetError, TargetUrl, check_address, check_resolved,
};

/// What can go wrong in this crate, as one type for callers that want one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WebhookError {
    /// A secret's text does not start with `whsec_`.
    #[error("webhook secret must start with `whsec_`")]
    SecretPrefix,
    /// The part after `whsec_` is not standard, padded base64.
    #[error("webhook secret must be `whsec_` followed by standard base64 (with `=` padding)")]
    SecretEncoding,
    /// The key is shorter than 24 or longer than 64 bytes.
    #[error("webhook secret key is {len} bytes; it must be 24 to 64 bytes")]
    SecretLength { len: usize },
    #[error(transparent)]
    Verify(#[from] VerifyError),
    #[error(transparent)]
    Target(#[from] TargetError),
    #[error(transparent)]
    EventType(#[from] UnknownEventType),
}
