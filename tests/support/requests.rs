//! Requests and wait options for tests that call the library directly.

/// Wait options that wait forever, and a receiver that fires once the waiter has been
/// refused and is waiting: every backend reports progress after its first refused attempt
/// (by then queued, where the backend keeps a queue). Tests await it instead of sleeping.
/// The receiver fails if the acquisition ended without ever waiting.
pub fn waiting_forever() -> (
    dlock::backend::WaitOptions,
    tokio::sync::oneshot::Receiver<()>,
) {
    let (tx, rx) = tokio::sync::oneshot::channel();
    let tx = std::sync::Mutex::new(Some(tx));
    let told = move |_: &dlock::backend::WaitInfo| {
        if let Some(tx) = tx.lock().unwrap().take() {
            let _ = tx.send(());
        }
    };
    let wait = dlock::backend::WaitOptions {
        progress: Some(std::sync::Arc::new(told)),
        ..dlock::backend::WaitOptions::until(None)
    };
    (wait, rx)
}
