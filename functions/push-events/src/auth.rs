//! Push authentication: who may call `POST /internal/events`.
//!
//! With `MAPI_PUBSUB_PUSH_AUDIENCE` and `MAPI_PUBSUB_PUSH_SERVICE_ACCOUNT`
//! set, a push must carry the OIDC token Pub/Sub mints for the push
//! subscription, and the checks run in this order, each before anything it
//! protects is read:
//!
//! 1. before the body is read ([`Authenticated`], an extractor): the
//!    token's RS256 signature against Google's key set
//!    (`MAPI_GOOGLE_JWKS_URL`, cached by [`mapi_oidc::JwksCache`]); then its
//!    claims: a Google issuer, our audience, not expired (60 s leeway), the
//!    push service account's e-mail, verified;
//! 2. once the body is read, before anything in the message is looked at:
//!    the envelope's `subscription` against `MAPI_PUBSUB_PUSH_SUBSCRIPTIONS`
//!    ([`PushAuth::check_subscription`]). Pub/Sub names the subscription
//!    only in the body, so this is the earliest it can be checked; an
//!    envelope too broken to name one is acknowledged as malformed (only the
//!    push service account got this far).
//!
//! A failed check answers 401 (the token) or 403 (an authentic token of
//! another account, a subscription not on the list, or no push
//! authentication configured), so Pub/Sub retries and, past its limit,
//! dead-letters. Each refusal is counted on `/metrics` by its check
//! (`mapi_push_auth_refused_total{reason}`) and logged; refusals are not
//! audited, because they name no tenant and anyone can send them.
//!
//! Without push authentication configured, the `dev` profile accepts
//! `MAPI_INTERNAL_TOKEN` (what `mapi dev`'s log forwarder sends) and the
//! multi-tenant profile refuses every push. The `dev` profile accepts the
//! internal token beside push tokens when both are configured, and does not
//! hold its pushes to the subscription list, so the local forwarder keeps
//! working whatever is set.
//!
//! A token that passed every token check is remembered by its SHA-256 until
//! it would expire ([`VerifiedTokens`]): Pub/Sub reuses one token for many
//! pushes, and each is then verified once. So a remembered token stays good
//! until its expiry (at most an hour for Google's) even if Google withdraws
//! its key meanwhile; a token is only remembered after every check passed,
//! and with the verifier's own expiry (`exp` plus the leeway).

use std::sync::Arc;

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use mapi_clock::Clock;
use mapi_identity::{InternalCaller, bearer};
use mapi_metrics::{Metrics, PushAuthReason, ReasonLabels};
use mapi_oidc::{AccountRefusal, OidcError, ServiceAccountTokens};
use mapi_platform::{AppState, Config, Profile};
use mapi_problem::{ApiError, ProblemCode};

/// Why a push was refused: one variant per check.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error(
        "push authentication is not configured: set MAPI_PUBSUB_PUSH_AUDIENCE and MAPI_PUBSUB_PUSH_SERVICE_ACCOUNT"
    )]
    NotConfigured,
    #[error("a push needs `Authorization: Bearer <token>`")]
    MissingToken,
    #[error("the push token is not the internal token")]
    BadInternalToken,
    #[error("the push token is refused: {0}")]
    Token(OidcError),
    #[error("the push token is not the push service account's")]
    WrongServiceAccount,
    #[error("pushes from subscription {0:?} are not accepted")]
    Subscription(String),
}

impl Refusal {
    /// The refusal's stable reason: the `reason` label of
    /// `mapi_push_auth_refused_total`. Token failures carry
    /// [`OidcError::reason`], prefixed `token_` where the bare word would be ambiguous.
    pub fn reason(&self) -> PushAuthReason {
        match self {
            Refusal::NotConfigured => PushAuthReason::NotConfigured,
            Refusal::MissingToken => PushAuthReason::MissingToken,
            Refusal::BadInternalToken => PushAuthReason::BadInternalToken,
            Refusal::Token(e) => match e {
                OidcError::Malformed => PushAuthReason::TokenMalformed,
                OidcError::UnsupportedAlgorithm(_) => PushAuthReason::UnsupportedAlgorithm,
                OidcError::MissingKeyId => PushAuthReason::MissingKeyId,
                OidcError::UnknownKey(_) => PushAuthReason::UnknownKey,
                OidcError::BadSignature => PushAuthReason::BadSignature,
                OidcError::WrongIssuer(_) => PushAuthReason::WrongIssuer,
                OidcError::WrongAudience => PushAuthReason::WrongAudience,
                OidcError::Expired => PushAuthReason::Expired,
                OidcError::NotYetValid => PushAuthReason::NotYetValid,
                OidcError::LifetimeTooLong(_) => PushAuthReason::LifetimeTooLong,
                OidcError::NoEmail => PushAuthReason::NoEmail,
                OidcError::EmailNotVerified => PushAuthReason::EmailNotVerified,
                OidcError::JwksUnavailable(_) => PushAuthReason::JwksUnavailable,
            },
            Refusal::WrongServiceAccount => PushAuthReason::WrongServiceAccount,
            Refusal::Subscription(_) => PushAuthReason::SubscriptionNotAllowed,
        }
    }

    /// 401 for a token that is missing or does not verify (including while
    /// Google's keys cannot be had: Pub/Sub retries); 403 for an authentic
    /// token of another account, a subscription not on the list, and a
    /// deployment without push authentication.
    pub fn code(&self) -> ProblemCode {
        match self {
            Refusal::MissingToken | Refusal::BadInternalToken | Refusal::Token(_) => {
                ProblemCode::Unauthenticated
            }
            Refusal::NotConfigured | Refusal::WrongServiceAccount | Refusal::Subscription(_) => {
                ProblemCode::Forbidden
            }
        }
    }
}

/// Who may push, decided once from the configuration.
#[derive(Debug)]
pub struct PushAuth {
    google: Option<ServiceAccountTokens>,
    /// `MAPI_INTERNAL_TOKEN` is accepted (the `dev` profile).
    internal_token: bool,
    /// Accepted subscriptions; empty: any.
    subscriptions: Vec<String>,
    metrics: Metrics,
}

impl PushAuth {
    /// Push authentication as `config` sets it, judged by `clock`, refusals counted in `metrics`.
    pub fn from_config(config: &Config, clock: Arc<dyn Clock>, metrics: Metrics) -> PushAuth {
        let google = config.pubsub_push.as_ref().map(|push| {
            ServiceAccountTokens::google(
                config.google_jwks_url.clone(),
                push.audience.clone(),
                push.service_account.clone(),
                clock,
            )
        });
        PushAuth {
            google,
            internal_token: config.profile == Profile::Dev,
            subscriptions: config.pubsub_push_subscriptions.clone(),
            metrics,
        }
    }

    /// Checks the credential of a push (step 1 of the module's order).
    async fn check_token(&self, parts: &mut Parts, app: &AppState) -> Result<Authenticated, Refusal> {
        if self.google.is_none() && !self.internal_token {
            return Err(Refusal::NotConfigured);
        }
        if bearer(parts).is_none_or(str::is_empty) {
            return Err(Refusal::MissingToken);
        }
        if self.internal_token && InternalCaller::from_request_parts(parts, app).await.is_ok() {
            return Ok(Authenticated::Internal);
        }
        let Some(google) = &self.google else { return Err(Refusal::BadInternalToken) };
        let token = bearer(parts).unwrap_or_default();
        google.check(token).await.map_err(|refusal| match refusal {
            AccountRefusal::Token(e) => Refusal::Token(e),
            AccountRefusal::WrongServiceAccount => Refusal::WrongServiceAccount,
        })?;
        Ok(Authenticated::PubSub)
    }

    /// Checks the subscription a Pub/Sub push names (step 2 of the
    /// module's order). The internal token's holder is not Pub/Sub (and may
    /// call every internal route anyway), so its pushes pass whatever they
    /// name: `mapi dev`'s forwarder keeps working with any list.
    pub fn check_subscription(&self, pusher: Authenticated, subscription: &str) -> Result<(), ApiError> {
        let listed = self.subscriptions.is_empty() || self.subscriptions.iter().any(|s| s == subscription);
        if listed || pusher == Authenticated::Internal {
            return Ok(());
        }
        Err(self.refuse(Refusal::Subscription(subscription.to_owned())))
    }

    /// Counts and logs `refusal`; the answer to send.
    fn refuse(&self, refusal: Refusal) -> ApiError {
        let reason = refusal.reason();
        self.metrics.push_auth_refused.get_or_create(&ReasonLabels { reason }).inc();
        tracing::warn!(reason = reason.as_str(), detail = %refusal, "push refused");
        ApiError::new(refusal.code(), refusal.to_string())
    }
}

/// The state of the push route: the platform and its push authentication.
#[derive(Clone, Debug)]
pub struct PushState {
    pub app: AppState,
    pub auth: Arc<PushAuth>,
}

/// A push whose credential passed (extracted before the body is read), by who sent it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Authenticated {
    /// Pub/Sub, with a push token of the push service account.
    PubSub,
    /// The holder of the internal token (`dev` only): `mapi dev`'s log forwarder.
    Internal,
}

impl FromRequestParts<PushState> for Authenticated {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &PushState) -> Result<Self, ApiError> {
        match state.auth.check_token(parts, &state.app).await {
            Ok(pusher) => Ok(pusher),
            Err(refusal) => Err(state.auth.refuse(refusal)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_have_distinct_reasons_and_retryable_statuses() {
        let all = [
            Refusal::NotConfigured,
            Refusal::MissingToken,
            Refusal::BadInternalToken,
            Refusal::Token(OidcError::Malformed),
            Refusal::Token(OidcError::UnsupportedAlgorithm("none".into())),
            Refusal::Token(OidcError::MissingKeyId),
            Refusal::Token(OidcError::UnknownKey("k".into())),
            Refusal::Token(OidcError::BadSignature),
            Refusal::Token(OidcError::WrongIssuer("i".into())),
            Refusal::Token(OidcError::WrongAudience),
            Refusal::Token(OidcError::Expired),
            Refusal::Token(OidcError::NotYetValid),
            Refusal::Token(OidcError::LifetimeTooLong(86_400)),
            Refusal::Token(OidcError::NoEmail),
            Refusal::Token(OidcError::EmailNotVerified),
            Refusal::Token(OidcError::JwksUnavailable("down".into())),
            Refusal::WrongServiceAccount,
            Refusal::Subscription("projects/p/subscriptions/s".into()),
        ];
        let mut reasons: Vec<&str> = all.iter().map(|r| r.reason().as_str()).collect();
        reasons.sort_unstable();
        reasons.dedup();
        assert_eq!(reasons.len(), all.len());
        assert_eq!(reasons.len(), PushAuthReason::ALL.len());
        // A token failure is labelled with the verifier's own reason, but
        // a token that is not a JWT is `token_malformed`.
        for r in &all {
            if let Refusal::Token(e) = r {
                let expected = if *e == OidcError::Malformed { "token_malformed" } else { e.reason() };
                assert_eq!(r.reason().as_str(), expected, "{r:?}");
            }
        }
        for r in &all {
            let status = r.code().status().as_u16();
            assert!(status == 401 || status == 403, "{r:?}: {status}");
        }
        assert_eq!(Refusal::Token(OidcError::Expired).code(), ProblemCode::Unauthenticated);
        assert_eq!(Refusal::WrongServiceAccount.code(), ProblemCode::Forbidden);
    }
}
