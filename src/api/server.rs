//! The API's connections: accepted by our own loop rather than `axum::serve`, so that no client
//! can hold rtrackd's file descriptors. At most `[api] max_connections` are open: when all are
//! taken, the oldest one with no request in flight is closed to make room (an idle client loses
//! nothing it was told), and if every one is busy the new one is closed at once; both are
//! counted. A connection that has not sent a complete request header within
//! `[api] header_timeout_s`, whether new or idle between requests, is closed. On stop, the
//! loop stops accepting and the requests in flight are drained.
//!
//! In: a listener (the API's Unix socket, or the metrics TCP listener), the router, the
//! [`ConnLimits`] and the stop signal. Out: each connection served over HTTP/1.1 with its peer
//! attached ([`PeerInfo`]), the connections open and refused counted ([`ConnCounters`]), and a
//! drain on stop.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::extract::ConnectInfo;
use axum::Router;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use tokio::sync::{watch, Notify, Semaphore};
use tower::ServiceExt;

use super::PeerInfo;

/// Limits on connections.
#[derive(Debug, Clone, Copy)]
pub struct ConnLimits {
    /// Connections served at once; more are closed at once.
    pub max_connections: usize,
    /// How long a connection may take to send a request header (also the idle limit between
    /// requests on a kept-alive connection).
    pub header_timeout: Duration,
}

/// Where connections are counted.
#[derive(Debug, Clone, Default)]
pub struct ConnCounters {
    /// Connections open now.
    pub open: Gauge,
    /// Connections closed because `max_connections` were open: new ones when all were busy,
    /// and idle ones closed to make room.
    pub rejected: Counter,
}

/// An open connection: whether a request is in flight on it, and how to close it.
struct Open {
    busy: Arc<AtomicUsize>,
    close: Arc<Notify>,
}

/// Counts a request in flight on its connection while alive.
struct InFlight(Arc<AtomicUsize>);

impl InFlight {
    fn new(busy: &Arc<AtomicUsize>) -> InFlight {
        busy.fetch_add(1, Ordering::SeqCst);
        InFlight(busy.clone())
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A listener the loop can serve: Unix socket (with the peer's credentials) or TCP (metrics).
pub trait Accept: Send + 'static {
    /// The connection.
    type Io: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static;
    /// Waits for the next connection.
    fn accept(
        &self,
    ) -> impl std::future::Future<Output = std::io::Result<(Self::Io, Option<PeerInfo>)>> + Send;
}

impl Accept for tokio::net::UnixListener {
    type Io = tokio::net::UnixStream;
    async fn accept(&self) -> std::io::Result<(Self::Io, Option<PeerInfo>)> {
        let (stream, _) = tokio::net::UnixListener::accept(self).await?;
        let peer = PeerInfo(Arc::new(crate::api::peer::Peer::of(&stream)));
        Ok((stream, Some(peer)))
    }
}

impl Accept for tokio::net::TcpListener {
    type Io = tokio::net::TcpStream;
    async fn accept(&self) -> std::io::Result<(Self::Io, Option<PeerInfo>)> {
        let (stream, _) = tokio::net::TcpListener::accept(self).await?;
        Ok((stream, None))
    }
}

/// Serves `app` on `listener` until `stop` turns true, then drains what is in flight.
pub async fn serve<L: Accept>(
    listener: L,
    app: Router,
    limits: ConnLimits,
    counters: ConnCounters,
    mut stop: watch::Receiver<bool>,
) {
    let slots = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let open: Arc<parking_lot::Mutex<BTreeMap<u64, Open>>> = Default::default();
    let mut next_id = 0u64;
    let graceful = GracefulShutdown::new();
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout);
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            _ = stop.wait_for(|s| *s) => break,
        };
        let (io, peer) = match accepted {
            Ok(x) => x,
            Err(e) => {
                // Out of descriptors (EMFILE) or the like: let the system breathe, go on.
                tracing::warn!(error = %e, "accepting an API connection failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let slot = match slots.clone().try_acquire_owned() {
            Ok(slot) => slot,
            Err(_) => {
                // Full: close the oldest idle connection to make room, if there is one.
                let idle = open
                    .lock()
                    .values()
                    .find(|c| c.busy.load(Ordering::SeqCst) == 0)
                    .map(|c| c.close.clone());
                counters.rejected.inc();
                let Some(close) = idle else {
                    tracing::debug!(
                        max = limits.max_connections,
                        "API connection closed at once: every connection is busy"
                    );
                    drop(io);
                    continue;
                };
                close.notify_one();
                match tokio::time::timeout(Duration::from_secs(1), slots.clone().acquire_owned())
                    .await
                {
                    Ok(Ok(slot)) => slot,
                    _ => {
                        drop(io);
                        continue;
                    }
                }
            }
        };
        let id = next_id;
        next_id += 1;
        let busy = Arc::new(AtomicUsize::new(0));
        let close = Arc::new(Notify::new());
        open.lock().insert(
            id,
            Open {
                busy: busy.clone(),
                close: close.clone(),
            },
        );
        let app = app.clone();
        let service =
            hyper::service::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                let mut req = req.map(axum::body::Body::new);
                if let Some(p) = &peer {
                    req.extensions_mut().insert(ConnectInfo(p.clone()));
                }
                let in_flight = InFlight::new(&busy);
                let app = app.clone();
                async move {
                    let response = app.oneshot(req).await;
                    drop(in_flight);
                    response
                }
            });
        let conn = graceful.watch(builder.serve_connection(TokioIo::new(io), service));
        let gauge = counters.open.clone();
        gauge.inc();
        let open = open.clone();
        tokio::spawn(async move {
            tokio::select! {
                // Errors here are the client's (a closed connection, a header timeout).
                r = conn => if let Err(e) = r {
                    tracing::debug!(error = %e, "API connection ended");
                },
                _ = close.notified() => tracing::debug!("idle API connection closed to make room"),
            }
            open.lock().remove(&id);
            gauge.dec();
            drop(slot);
        });
    }
    graceful.shutdown().await;
}
