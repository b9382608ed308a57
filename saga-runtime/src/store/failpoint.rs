//! Failpoints for the reliability suite (cargo feature `failpoints`, off by
//! default; without it every check compiles to nothing).
//!
//! The store passes a failpoint before and after each write (a batch
//! applied atomically) and each flush. One of them is armed from the
//! environment of the process, so a test can crash a child process at an
//! exact point of a run:
//!
//! ```text
//! SAGA_FAILPOINT=<action>:<point>:<n>
//!   action  abort (the process dies at once, as on SIGKILL) | error (the store call fails)
//!   point   before-write | after-write | before-flush | after-flush
//!   n       the 1-based number of the write (or flush) in this process
//! ```
//!
//! `abort:after-write:3` aborts right after the third write was applied and
//! before it was flushed. Writes and flushes are counted separately.

#[cfg(not(feature = "failpoints"))]
use crate::error::Result;

/// Which store call a failpoint guards.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Call {
    Write,
    Flush,
}

/// Runs before a store call; returns its number in this process (0 when
/// failpoints are compiled out).
#[cfg(not(feature = "failpoints"))]
#[inline(always)]
pub(crate) fn before(_call: Call) -> Result<u64> {
    Ok(0)
}

/// Runs after a store call numbered `_n` by [`before`].
#[cfg(not(feature = "failpoints"))]
#[inline(always)]
pub(crate) fn after(_call: Call, _n: u64) -> Result<()> {
    Ok(())
}

#[cfg(feature = "failpoints")]
pub(crate) use armed::{after, before};

#[cfg(feature = "failpoints")]
mod armed {
    use std::sync::OnceLock;
    use std::sync::atomic::{AtomicU64, Ordering};

    use super::Call;
    use crate::error::{Error, Result};

    /// The environment variable that arms a failpoint.
    const VAR: &str = "SAGA_FAILPOINT";

    static WRITES: AtomicU64 = AtomicU64::new(0);
    static FLUSHES: AtomicU64 = AtomicU64::new(0);

    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    enum Action {
        Abort,
        Error,
    }

    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    enum Side {
        Before,
        After,
    }

    #[derive(Debug)]
    struct Armed {
        action: Action,
        side: Side,
        call: Call,
        n: u64,
    }

    fn armed() -> Option<&'static Armed> {
        static ARMED: OnceLock<Option<Armed>> = OnceLock::new();
        ARMED
            .get_or_init(|| {
                let spec = std::env::var(VAR).ok()?;
                let parsed = parse(&spec);
                if parsed.is_none() {
                    eprintln!(
                        "saga: ignoring {VAR}={spec:?}; expected <abort|error>:<before|after>-<write|flush>:<n>"
                    );
                }
                parsed
            })
            .as_ref()
    }

    // abort:before-write:12
    fn parse(spec: &str) -> Option<Armed> {
        let mut parts = spec.split(':');
        let action = match parts.next()? {
            "abort" => Action::Abort,
            "error" => Action::Error,
            _ => return None,
        };
        let (side, call) = parts.next()?.split_once('-')?;
        let side = match side {
            "before" => Side::Before,
            "after" => Side::After,
            _ => return None,
        };
        let call = match call {
            "write" => Call::Write,
            "flush" => Call::Flush,
            _ => return None,
        };
        let n = parts.next()?.parse().ok()?;
        parts.next().is_none().then_some(Armed {
            action,
            side,
            call,
            n,
        })
    }

    pub(crate) fn before(call: Call) -> Result<u64> {
        let counter = match call {
            Call::Write => &WRITES,
            Call::Flush => &FLUSHES,
        };
        let n = counter.fetch_add(1, Ordering::SeqCst) + 1;
        hit(call, Side::Before, n)?;
        Ok(n)
    }

    pub(crate) fn after(call: Call, n: u64) -> Result<()> {
        hit(call, Side::After, n)
    }

    fn hit(call: Call, side: Side, n: u64) -> Result<()> {
        let Some(armed) = armed() else {
            return Ok(());
        };
        if (armed.call, armed.side, armed.n) != (call, side, n) {
            return Ok(());
        }
        let what = format!("failpoint {side:?} {call:?} #{n}").to_lowercase();
        match armed.action {
            Action::Abort => {
                eprintln!("saga: {what} hit: aborting the process");
                std::process::abort()
            }
            Action::Error => {
                eprintln!("saga: {what} hit: injecting a store error");
                Err(Error::Store(format!("{what} hit: injected error")))
            }
        }
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn parses_the_documented_forms() {
            let armed = parse("abort:after-flush:7").expect("valid");
            assert_eq!(
                (armed.action, armed.side, armed.call, armed.n),
                (Action::Abort, Side::After, Call::Flush, 7)
            );
            assert!(parse("error:before-write:1").is_some());
            assert!(parse("abort:during-write:1").is_none());
            assert!(parse("abort:before-write").is_none());
            assert!(parse("explode:before-write:1").is_none());
        }
    }
}
