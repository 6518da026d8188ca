//! The cause of a port's error, kept.
//!
//! A port's error says what failed in its own words (`context`) and keeps
//! the error underneath (`source`), so an error report (a log line of the
//! chain) says both and a caller may still look at what the source was.
//! Every port's error type holds one in its variants that have a cause
//! (`StoreError::Internal`, `ObjectError::Unavailable`, …), marked
//! `#[source]`.
//!
//! A cause's text is its context and, when it has one, its source's text
//! (`get t/a/b: connection refused`); its [`source`](std::error::Error::source)
//! is the source's own source, so a report walking the chain does not say
//! the source twice. Two causes are equal when they say the same: errors are
//! compared by kind and words (in tests), never by identity.
//!
//! It lives here, in the crate every port crate depends on, and does no I/O.

use std::error::Error;
use std::fmt;
use std::sync::Arc;

/// What failed, and the error underneath it.
#[derive(Clone)]
pub struct Cause {
    context: String,
    source: Option<Arc<dyn Error + Send + Sync + 'static>>,
}

impl Cause {
    /// `context` failed because of `source`.
    pub fn new(context: impl Into<String>, source: impl Error + Send + Sync + 'static) -> Cause {
        Cause { context: context.into(), source: Some(Arc::new(source)) }
    }

    /// `source`, with no words of ours to add.
    pub fn of(source: impl Error + Send + Sync + 'static) -> Cause {
        Cause::new(String::new(), source)
    }

    /// What failed, with no error underneath.
    pub fn message(context: impl Into<String>) -> Cause {
        Cause { context: context.into(), source: None }
    }

    /// The error underneath, if any.
    pub fn inner(&self) -> Option<&(dyn Error + Send + Sync + 'static)> {
        self.source.as_deref()
    }
}

impl fmt::Display for Cause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.source, self.context.is_empty()) {
            (Some(s), true) => write!(f, "{s}"),
            (Some(s), false) => write!(f, "{}: {s}", self.context),
            (None, _) => f.write_str(&self.context),
        }
    }
}

impl fmt::Debug for Cause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("Cause");
        d.field("context", &self.context);
        if let Some(s) = &self.source {
            d.field("source", s);
        }
        d.finish()
    }
}

impl Error for Cause {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        // The source's own text is in this one's: a chain goes on below it.
        self.source.as_deref().and_then(|s| s.source())
    }
}

impl PartialEq for Cause {
    fn eq(&self, other: &Cause) -> bool {
        self.to_string() == other.to_string()
    }
}

impl Eq for Cause {}

impl From<String> for Cause {
    fn from(context: String) -> Cause {
        Cause::message(context)
    }
}

impl From<&str> for Cause {
    fn from(context: &str) -> Cause {
        Cause::message(context)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    struct Io(&'static str, Option<Box<Io>>);

    impl fmt::Display for Io {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str(self.0)
        }
    }

    impl Error for Io {
        fn source(&self) -> Option<&(dyn Error + 'static)> {
            self.1.as_deref().map(|e| e as &(dyn Error + 'static))
        }
    }

    #[test]
    fn a_cause_says_what_failed_and_why_and_keeps_the_chain_below() {
        let c = Cause::new("get t/a", Io("connection reset", Some(Box::new(Io("os error 104", None)))));
        assert_eq!(c.to_string(), "get t/a: connection reset");
        assert_eq!(c.source().map(ToString::to_string).as_deref(), Some("os error 104"));
        assert!(c.inner().is_some_and(|e| e.is::<Io>()), "the source is kept, typed");
        assert_eq!(Cause::of(Io("disk full", None)).to_string(), "disk full");
        assert_eq!(Cause::from("no answer").to_string(), "no answer");
        assert_eq!(Cause::message("x"), Cause::new("", Io("x", None)), "equal when they say the same");
    }
}
