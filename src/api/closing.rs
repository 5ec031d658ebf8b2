//! Streams that end when the engine closes its streams: its node is stopping (cluster mode) or
//! the server is. `WatchTicket` and `ServeMatches` watch for that in their tasks; the admin
//! streams (`WatchEvents`, `ExportPlayers`) are wrapped in [`UntilClosed`]. Without it a stream
//! another node relays, or a slow reader's, would hold the stopping node's front open: it waits
//! for every connection to close, and the engine that would end the stream stops only after.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio_stream::Stream;
use tokio_util::sync::WaitForCancellationFutureOwned;
use tonic::Status;

/// `inner` until the engine's streams close, then the status [`super::error::streams_closed`]
/// gives (on a cluster engine the mark that sends a relayed stream's caller UNAVAILABLE, so it
/// resumes elsewhere: `WatchEvents` after its last cursor, `ExportPlayers` after its last id).
pub(super) struct UntilClosed<S> {
    inner: S,
    closed: Pin<Box<WaitForCancellationFutureOwned>>,
    end: Option<Status>,
    done: bool,
}

impl<S> UntilClosed<S> {
    pub(super) fn new(state: &crate::state::State, inner: S) -> Self {
        Self {
            inner,
            closed: Box::pin(state.streams_closed().cancelled_owned()),
            end: Some(super::error::streams_closed(state)),
            done: false,
        }
    }
}

impl<S, T> Stream for UntilClosed<S>
where
    S: Stream<Item = Result<T, Status>> + Unpin,
{
    type Item = Result<T, Status>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        if self.done {
            return Poll::Ready(None);
        }
        if self.closed.as_mut().poll(cx).is_ready() {
            self.done = true;
            return Poll::Ready(self.end.take().map(Err));
        }
        let next = Pin::new(&mut self.inner).poll_next(cx);
        if matches!(next, Poll::Ready(None)) {
            self.done = true;
        }
        next
    }
}
