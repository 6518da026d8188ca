//! Memory the allocator keeps after the program freed it, given back.
//!
//! glibc's malloc gives a thread that finds the arenas busy an arena of its
//! own (up to eight per core) and returns freed memory to the system only
//! from the top of the main heap, unless asked. A long-lived server whose
//! bursts spread over many threads then holds a resident set that grows
//! with what it once freed, not with what it holds: under the soak's load
//! the live heap stayed under 10 MB while the resident set kept rising,
//! in a dozen arenas each a little larger every minute. So a serving
//! process allows at most [`ARENAS`] arenas and asks malloc to give back
//! the free pages of every arena each [`TRIM_EVERY`].
//!
//! Elsewhere than Linux with glibc both are no-ops: other allocators
//! return memory on their own terms.

use std::sync::Once;
use std::time::Duration;

/// The most arenas malloc may make (glibc's `M_ARENA_MAX`).
pub const ARENAS: i32 = 2;

/// How often free pages are given back (`malloc_trim`). A trim holds each
/// arena's lock while it walks it, about a millisecond for a few tens of
/// megabytes, so not more often than needed.
pub const TRIM_EVERY: Duration = Duration::from_secs(60);

static STARTED: Once = Once::new();

/// Bounds the arenas and starts the trimmer on the current tokio runtime,
/// once per process, whoever calls it first.
pub fn keep_bounded() {
    STARTED.call_once(|| {
        limit_arenas(ARENAS);
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async {
                let mut every = tokio::time::interval(TRIM_EVERY);
                every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
                loop {
                    every.tick().await;
                    give_back();
                }
            });
        }
    });
}

/// Gives the free pages of every arena back to the system; whether any was.
pub fn give_back() -> bool {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    #[allow(unsafe_code)]
    {
        // SAFETY: malloc_trim takes a padding and touches only malloc's
        // own state, under its locks; it is safe to call from any thread.
        unsafe { libc::malloc_trim(0) == 1 }
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    {
        false
    }
}

fn limit_arenas(n: i32) {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    #[allow(unsafe_code)]
    {
        // SAFETY: mallopt sets a malloc parameter under malloc's lock; a
        // lower arena limit only stops new arenas being made.
        let _ = unsafe { libc::mallopt(libc::M_ARENA_MAX, n) };
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    let _ = n;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn freed_memory_is_given_back() {
        // Many small blocks freed in an order that leaves the heap's top
        // in use: only a trim returns the pages below it.
        let blocks: Vec<Vec<u8>> = (0..20_000).map(|i| vec![i as u8; 1024]).collect();
        let keep: Vec<Vec<u8>> =
            blocks.into_iter().enumerate().filter(|(i, _)| i % 1000 == 999).map(|(_, b)| b).collect();
        let freed = give_back();
        assert_eq!(keep.len(), 20);
        #[cfg(all(target_os = "linux", target_env = "gnu"))]
        assert!(freed, "about 20 MB freed below live blocks: malloc_trim gives some back");
        #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
        assert!(!freed);
    }
}
