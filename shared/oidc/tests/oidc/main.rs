//! Integration tests of mapi-oidc: tokens from the development identity
//! provider verified against a real JWKS server on 127.0.0.1, in virtual time.

mod attacks;
mod cache;
mod dev_idp;
mod support;
