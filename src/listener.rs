//! The listening socket: accepted connections with Nagle off, at most `server.max_connections`
//! of them open at once.
//!
//! The limit is taken before `accept`: at the limit the server stops accepting, and new
//! connections wait in the kernel's backlog (their clients see a slow connect) until one closes.
//! That refusal costs the server nothing, unlike a refused call, which still costs its HTTP/2
//! frames (README, "Measured": overload).

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::server::{Connected, TcpConnectInfo};
use tracing::warn;

use crate::telemetry as m;

/// One accepted connection; its slot under `server.max_connections` is freed when it closes.
pub struct Conn {
    stream: TcpStream,
    slot: Option<Slot>,
}

/// A held place under the connection limit.
struct Slot {
    permit: OwnedSemaphorePermit,
    permits: Arc<Semaphore>,
    max: usize,
}

impl Drop for Conn {
    fn drop(&mut self) {
        if let Some(slot) = self.slot.take() {
            drop(slot.permit);
            report_open(&slot.permits, slot.max);
        }
    }
}

fn report_open(permits: &Semaphore, max: usize) {
    let open = max.saturating_sub(permits.available_permits());
    metrics::gauge!(m::CONNECTIONS_OPEN).set(open as f64);
}

/// How long the accept loop waits after a failure that is not the peer's (no file descriptors).
const ACCEPT_PAUSE: Duration = Duration::from_millis(100);

fn is_peer_error(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::ConnectionRefused
    )
}

/// Accepts connections from `listener` while fewer than `max_connections` are open. The
/// accepting task ends when the server drops the stream.
#[must_use]
pub fn incoming(listener: TcpListener, max_connections: usize) -> ReceiverStream<io::Result<Conn>> {
    let (tx, rx) = mpsc::channel(1);
    let permits = Arc::new(Semaphore::new(max_connections));
    tokio::spawn(async move {
        loop {
            let permit = tokio::select! {
                p = permits.clone().acquire_owned() => p,
                () = tx.closed() => break,
            };
            let Ok(permit) = permit else { break };
            let accepted = tokio::select! {
                a = listener.accept() => a,
                () = tx.closed() => break,
            };
            let stream = match accepted {
                Ok((stream, _)) => stream,
                // The peer gave up before we accepted: nothing to do, and no reason to wait.
                Err(e) if is_peer_error(&e) => continue,
                // Out of file descriptors (`ulimit -n` below `server.max_connections`) or
                // memory: accepting again at once would fail again in a busy loop (tonic drops
                // accept errors silently), so say so and pause.
                Err(e) => {
                    warn!(error = %e, pause_ms = ACCEPT_PAUSE.as_millis() as u64, "accept failed");
                    tokio::time::sleep(ACCEPT_PAUSE).await;
                    continue;
                }
            };
            // tonic sets TCP_NODELAY only on listeners it binds itself; without it every small
            // unary reply waits ~40 ms for the peer's delayed ACK.
            if let Err(e) = stream.set_nodelay(true) {
                warn!(error = %e, "could not set TCP_NODELAY");
            }
            report_open(&permits, max_connections);
            let conn = Conn {
                stream,
                slot: Some(Slot {
                    permit,
                    permits: permits.clone(),
                    max: max_connections,
                }),
            };
            if tx.send(Ok(conn)).await.is_err() {
                break;
            }
        }
    });
    ReceiverStream::new(rx)
}

impl Connected for Conn {
    type ConnectInfo = TcpConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.stream.connect_info()
    }
}

impl AsyncRead for Conn {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for Conn {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_shutdown(cx)
    }
}
