//! OpenID Connect ID-token verification and the development identity provider.
//!
//! A [`Verifier`] checks RS256 ID tokens against an identity provider's key
//! set, fetched and cached by a [`JwksCache`] (freshness from `Cache-Control`,
//! refetch on an unknown `kid` at most every [`MIN_REFETCH`], stale keys kept
//! when the provider is down). Every time decision comes from the injected
//! [`mapi_clock::Clock`], so tests run in virtual time. It serves user sessions
//! (the bearer token is the person's ID token) and Pub/Sub push
//! authentication (Google-signed tokens). [`dev`] is the identity provider
//! `mapi dev` runs for its seeded accounts.

pub mod accounts;
pub mod code_flow;
pub mod dev;
mod dev_code;
mod error;
mod jwks;
mod verifier;

pub use accounts::{AccountRefusal, ServiceAccountTokens, VerifiedTokens};
pub use error::OidcError;
pub use jwks::{DEFAULT_MAX_AGE, JwksCache, MAX_MAX_AGE, MIN_REFETCH};
pub use verifier::{Claims, DEFAULT_LEEWAY, GOOGLE_ISSUERS, GOOGLE_JWKS_URL, Verifier, VerifierConfig};
