//! A fault plan for a port's writes, shared by the `Unreliable` wrappers of
//! the store, the object store and the queue: the next writes can be
//! refused before they apply (the service was unavailable), and the writes
//! after them can apply and lose their answers (the connection dropped on
//! the way back). Both look the same to the caller, which is the point: a
//! caller must retry in a way that is right for both.
//!
//! A write the service itself answered with an error is passed on and not
//! counted as lost: only an applied write has an answer worth losing.

use std::sync::atomic::{AtomicU32, Ordering};

/// The detail of a refused write.
pub const REFUSED: &str = "refused on purpose before applying";
/// The detail of a write whose answer was lost.
pub const LOST: &str = "the answer was lost on purpose after applying";

/// How many of the next writes to refuse, and how many after those to lose.
#[derive(Debug, Default)]
pub struct Faults {
    refuse: AtomicU32,
    lose: AtomicU32,
}

fn take(counter: &AtomicU32) -> bool {
    counter.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1)).is_ok()
}

impl Faults {
    /// The next `n` writes are refused and change nothing.
    pub fn refuse_next(&self, n: u32) {
        self.refuse.store(n, Ordering::SeqCst);
    }

    /// The `n` writes after the refused ones apply, then lose their answers.
    pub fn lose_next(&self, n: u32) {
        self.lose.store(n, Ordering::SeqCst);
    }

    /// Runs one write under the plan: `unavailable` makes the port's
    /// error for a refused write or a lost answer, from its detail.
    pub async fn write<T, E>(
        &self,
        apply: impl Future<Output = Result<T, E>>,
        unavailable: impl Fn(&'static str) -> E,
    ) -> Result<T, E> {
        if take(&self.refuse) {
            return Err(unavailable(REFUSED));
        }
        let applied = apply.await;
        if applied.is_ok() && take(&self.lose) {
            return Err(unavailable(LOST));
        }
        applied
    }
}

/// A port `inner` wrapped under a fault plan. Each port crate implements
/// its trait for `Unreliable<'_, dyn Port>`: reads pass through to
/// [`Unreliable::inner`], writes go through [`Unreliable::write`].
#[derive(Debug)]
pub struct Unreliable<'a, P: ?Sized> {
    inner: &'a P,
    faults: Faults,
}

impl<'a, P: ?Sized> Unreliable<'a, P> {
    /// `inner`, with no faults planned yet.
    pub fn new(inner: &'a P) -> Unreliable<'a, P> {
        Unreliable { inner, faults: Faults::default() }
    }

    /// The next `n` writes are refused and change nothing.
    pub fn refuse_next(self, n: u32) -> Self {
        self.faults.refuse_next(n);
        self
    }

    /// The `n` writes after the refused ones apply, then lose their answers.
    pub fn lose_next(self, n: u32) -> Self {
        self.faults.lose_next(n);
        self
    }

    /// The wrapped port.
    pub fn inner(&self) -> &'a P {
        self.inner
    }

    /// Runs one write of the port under the plan ([`Faults::write`]).
    pub async fn write<T, E>(
        &self,
        apply: impl Future<Output = Result<T, E>>,
        unavailable: impl Fn(&'static str) -> E,
    ) -> Result<T, E> {
        self.faults.write(apply, unavailable).await
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicU32;

    use super::*;

    #[tokio::test]
    async fn refusals_come_first_then_losses_then_writes_pass() {
        let faults = Faults::default();
        faults.refuse_next(1);
        faults.lose_next(2);
        let applied = AtomicU32::new(0);
        let write = || async {
            applied.fetch_add(1, Ordering::SeqCst);
            Ok::<_, String>(())
        };
        let answers = [
            faults.write(write(), str::to_owned).await,
            faults.write(write(), str::to_owned).await,
            faults.write(async { Err::<(), _>("no such key".to_owned()) }, str::to_owned).await,
            faults.write(write(), str::to_owned).await,
            faults.write(write(), str::to_owned).await,
        ];
        let refused_or_lost = |detail: &str| Err(detail.to_owned());
        assert_eq!(
            answers,
            [
                refused_or_lost(REFUSED),
                refused_or_lost(LOST),
                Err("no such key".into()),
                refused_or_lost(LOST),
                Ok(())
            ]
        );
        assert_eq!(applied.load(Ordering::SeqCst), 3, "a refused write never ran; lost ones did");
    }
}
