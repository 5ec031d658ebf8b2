//! The listening socket: accepted connections with Nagle off, at most `server.max_connections`
//! of them open at once.
//!
//! The limit is taken before `accept`: at the limit the server stops accepting, and new
//! connections wait in the kernel's backlog (their clients see a slow connect) until one closes.
//! That refusal costs the server nothing, unlike a refused call, which still costs its HTTP/2
//! frames (docs/performance.md, overload).

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
    /// Until the client has sent its opening bytes: when it must have.
    opening: Option<Opening>,
}

/// How long a new connection may take to send its first [`OPENING_BYTES`] (the HTTP/2 client
/// preface, or a TLS hello): a connection that sends nothing would hold its slot under
/// `server.max_connections` for good, and enough of them would lock every client out.
pub const OPENING_TIMEOUT: Duration = Duration::from_secs(10);
/// The HTTP/2 client preface is 24 bytes; a TLS hello is longer.
const OPENING_BYTES: usize = 24;

struct Opening {
    deadline: Pin<Box<tokio::time::Sleep>>,
    read: usize,
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

/// Descriptors the server needs besides its connections (the store's files, the runtime, the
/// listener, the metrics endpoint), with room to spare.
pub const RESERVED_DESCRIPTORS: u64 = 64;

/// The soft open-file limit (`ulimit -n`) from the text of `/proc/self/limits`.
#[must_use]
pub fn open_file_limit(limits: &str) -> Option<u64> {
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    line["Max open files".len()..]
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// `server.max_connections` when the open-file limit is unknown and the config says 0 (auto).
pub const DEFAULT_MAX_CONNECTIONS: usize = 20_000;

/// The connection limit to apply: `configured`, or for 0 the open-file limit minus
/// [`RESERVED_DESCRIPTORS`] (at least 1; [`DEFAULT_MAX_CONNECTIONS`] when unknown).
#[must_use]
pub fn effective_max_connections(configured: usize, open_files: Option<u64>) -> usize {
    if configured > 0 {
        return configured;
    }
    open_files.map_or(DEFAULT_MAX_CONNECTIONS, |n| {
        usize::try_from(n.saturating_sub(RESERVED_DESCRIPTORS).max(1)).unwrap_or(usize::MAX)
    })
}

/// A warning when an explicit `max_connections` cannot be reached under the process's
/// open-file limit: past it `accept` fails and the loop pauses, so connections wait although
/// the configured limit says they may open. `None` when the limit is high enough or unknown.
#[must_use]
pub fn descriptor_shortfall(max_connections: usize, open_files: Option<u64>) -> Option<String> {
    let open_files = open_files?;
    let needed = max_connections as u64 + RESERVED_DESCRIPTORS;
    (open_files < needed).then(|| {
        format!(
            "the open-file limit (ulimit -n) is {open_files}, below server.max_connections \
             ({max_connections}) + {RESERVED_DESCRIPTORS} for the server's own files: raise \
             `ulimit -n` to at least {needed} or lower server.max_connections"
        )
    })
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
    accept(listener, max_connections, OPENING_TIMEOUT)
}

/// [`incoming`], each connection sending its opening bytes within `opening`.
fn accept(
    listener: TcpListener,
    max_connections: usize,
    opening: Duration,
) -> ReceiverStream<io::Result<Conn>> {
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
                opening: Some(Opening {
                    deadline: Box::pin(tokio::time::sleep(opening)),
                    read: 0,
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
        let this = self.get_mut();
        let Some(opening) = &mut this.opening else {
            return Pin::new(&mut this.stream).poll_read(cx, buf);
        };
        let before = buf.filled().len();
        match Pin::new(&mut this.stream).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                opening.read += buf.filled().len() - before;
                if opening.read >= OPENING_BYTES || buf.filled().len() == before {
                    this.opening = None;
                }
                Poll::Ready(Ok(()))
            }
            Poll::Pending if opening.deadline.as_mut().poll(cx).is_ready() => {
                Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "the client sent no request in time",
                )))
            }
            other => other,
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: &str = "Limit                     Soft Limit           Hard Limit           Units     \n\
        Max processes             96365                96365                processes \n\
        Max open files            1024                 524288               files     \n";

    #[tokio::test]
    async fn a_connection_that_sends_nothing_frees_its_slot_after_the_opening_time() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        use tokio_stream::StreamExt;
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let mut conns = accept(listener, 1, Duration::from_millis(200));
        // A client that speaks keeps its connection past the opening time.
        let mut talker = TcpStream::connect(addr).await.unwrap();
        talker.write_all(&[b'P'; OPENING_BYTES]).await.unwrap();
        let mut spoken = conns.next().await.unwrap().unwrap();
        let mut buf = [0u8; 64];
        assert_eq!(spoken.read(&mut buf).await.unwrap(), OPENING_BYTES);
        tokio::time::sleep(Duration::from_millis(300)).await;
        talker.write_all(b"more").await.unwrap();
        assert_eq!(spoken.read(&mut buf).await.unwrap(), 4);
        drop(spoken);
        // One that sends nothing: its read fails after the opening time, and once the server
        // drops it the next client gets the slot.
        let _silent = TcpStream::connect(addr).await.unwrap();
        let mut idle = conns.next().await.unwrap().unwrap();
        let e = tokio::time::timeout(Duration::from_secs(5), idle.read(&mut buf))
            .await
            .expect("the read ends")
            .unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::TimedOut);
        drop(idle);
        let _next = TcpStream::connect(addr).await.unwrap();
        let next = tokio::time::timeout(Duration::from_secs(5), conns.next()).await;
        assert!(matches!(next, Ok(Some(Ok(_)))), "the slot was freed");
    }

    #[test]
    fn the_soft_open_file_limit_is_read_and_compared_with_max_connections() {
        assert_eq!(open_file_limit(LIMITS), Some(1024));
        assert_eq!(
            open_file_limit("Max open files unlimited unlimited files"),
            None
        );
        assert_eq!(open_file_limit(""), None);
        let warning = descriptor_shortfall(20_000, Some(1024)).expect("1024 < 20064");
        assert!(
            warning.contains("1024") && warning.contains("server.max_connections"),
            "{warning}"
        );
        assert!(warning.contains("20064"), "{warning}");
        assert_eq!(descriptor_shortfall(960, Some(1024)), None);
        assert!(descriptor_shortfall(961, Some(1024)).is_some());
        assert_eq!(descriptor_shortfall(20_000, None), None);
    }

    #[test]
    fn zero_means_the_open_file_limit_less_the_servers_own_files() {
        assert_eq!(effective_max_connections(0, Some(1024)), 960);
        assert_eq!(effective_max_connections(0, Some(10)), 1);
        assert_eq!(effective_max_connections(0, None), DEFAULT_MAX_CONNECTIONS);
        assert_eq!(effective_max_connections(500, Some(1024)), 500);
        assert_eq!(effective_max_connections(5000, Some(1024)), 5000);
        // The automatic limit never warns; an explicit one above the file limit does.
        assert_eq!(
            descriptor_shortfall(effective_max_connections(0, Some(1024)), Some(1024)),
            None
        );
    }
}
