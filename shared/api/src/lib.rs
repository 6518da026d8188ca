//! What crosses the HTTP API: the representations the functions answer
//! with ([`views`], [`endpoints`], [`governance`], [`methods`], [`audit`], [`webhooks`]), the problem body of every
//! error ([`problem`]) and the credentials file `mapi dev` writes for the
//! CLI ([`credentials`]). The functions build these and the clients read
//! them, so a client needs only this crate, never the control plane.
//!
//! Architecture invariant: no I/O but writing the credentials file; nothing
//! here names a store, a queue or an executor.

pub mod audit;
pub mod compare;
pub mod credentials;
pub mod endpoints;
pub mod governance;
pub mod labels;
pub mod methods;
pub mod problem;
pub mod tracking;
pub mod views;
pub mod webhooks;
pub mod words;
pub mod workflows;
