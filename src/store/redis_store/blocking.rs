//! Waiting for Redis from the store's synchronous methods (a flush, an erasure's read of the
//! match history): on the server's multi-threaded runtime the wait blocks this worker in place;
//! anywhere else (tests, tools) it runs on a scoped thread with a runtime of its own.

use std::future::Future;

use crate::store::StoreError;

/// Runs `work` to completion from synchronous code.
pub(super) fn run<T: Send>(
    work: impl Future<Output = Result<T, StoreError>> + Send,
) -> Result<T, StoreError> {
    match tokio::runtime::Handle::try_current() {
        Ok(handle) if handle.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
            tokio::task::block_in_place(|| handle.block_on(work))
        }
        _ => std::thread::scope(|s| {
            s.spawn(|| {
                tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .map_err(|e| StoreError::Redis(format!("store runtime: {e}")))?
                    .block_on(work)
            })
            .join()
            .unwrap_or_else(|_| Err(StoreError::Redis("store thread panicked".into())))
        }),
    }
}
