//! The expected wait of one `exec` or `lock` (see [`crate::backend::estimate`]): the key's
//! run history is read once the store says that we wait, never on an uncontended
//! acquisition, and in the background, so that the wait itself is not held up by it. The
//! waiting line shows the estimate as soon as it is known; the estimate made from where
//! the wait stood at its start goes to the `acquired` event and the metrics file, beside
//! the real wait.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use crate::backend::estimate::{self, Estimate};
use crate::backend::{now_ms, Backend, WaitInfo};

/// How long a granted acquisition waits for its history read to land.
const SETTLE: std::time::Duration = std::time::Duration::from_millis(200);

/// What one wait knows of its expected length; cheap to clone into listeners.
#[derive(Clone, Default)]
pub struct Expectation {
    /// How long a run of the key usually takes, once read (never set without history).
    pub typical: Arc<OnceLock<u64>>,
    asked: Arc<AtomicBool>,
    /// Where the wait stood at its first report: our position, how long the holder had run.
    start: Arc<Mutex<Option<Start>>>,
    /// The read of the history, while it runs.
    reading: Arc<Mutex<Option<tokio::task::JoinHandle<()>>>>,
}

/// Our position, and how long the holder had run, when the wait began.
type Start = (u64, Option<u64>);

impl Expectation {
    /// Told of a report about the wait: the first one starts reading the history of `key`.
    pub fn heard(&self, info: &WaitInfo, backend: &Arc<dyn Backend>, key: &str) {
        if self.asked.swap(true, Ordering::SeqCst) {
            return;
        }
        *self.start.lock().unwrap_or_else(PoisonError::into_inner) =
            Some((info.position.unwrap_or(1), holder_ran_ms(info)));
        let (typical, backend, key) = (
            Arc::clone(&self.typical),
            Arc::clone(backend),
            key.to_string(),
        );
        let reading = tokio::spawn(async move {
            // No history, or a store that cannot read it: no estimate, the wait goes on.
            if let Ok(runs) = backend.last_runs(&key).await {
                if let Some(t) = estimate::typical(&runs) {
                    let _ = typical.set(t);
                }
            }
        });
        *self.reading.lock().unwrap_or_else(PoisonError::into_inner) = Some(reading);
    }

    /// Lets a read still on its way land, for at most [`SETTLE`]: a store that answers
    /// in order (Redis's one connection) answers it only after the wake-up that ended the
    /// wait. Nothing to wait for when the acquisition did not wait.
    pub async fn settle(&self) {
        let reading = self
            .reading
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(reading) = reading {
            let _ = tokio::time::timeout(SETTLE, reading).await;
        }
    }

    /// The estimate for the wait as `info` tells it now, when the history is known.
    pub fn now(&self, info: &WaitInfo) -> Option<Estimate> {
        let typical = *self.typical.get()?;
        Some(Estimate::new(
            typical,
            info.position.unwrap_or(1),
            holder_ran_ms(info),
        ))
    }

    /// The estimate for the wait as it stood at its start, when the history is known.
    pub fn at_start(&self) -> Option<Estimate> {
        let typical = *self.typical.get()?;
        let start = *self.start.lock().unwrap_or_else(PoisonError::into_inner);
        let (position, ran) = start?;
        Some(Estimate::new(typical, position, ran))
    }
}

/// How long the holder a report names has held the key.
fn holder_ran_ms(info: &WaitInfo) -> Option<u64> {
    let h = info.holder.as_ref()?;
    Some(now_ms().saturating_sub(h.holder.acquired_at_ms))
}
