//! A TCP proxy owned by one test, in front of a real server (PostgreSQL), that can stop
//! forwarding bytes and resume: a hung database without touching the shared server.
//!
//! While paused, nothing read from either side is passed on (bytes wait in the proxy and in
//! the kernel's buffers, as they would behind a stalled network path or a stopped process);
//! on resume everything continues where it stopped, so the connections survive.

use std::net::SocketAddr;
use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

#[derive(Debug)]
pub struct TcpProxy {
    pub port: u16,
    paused: Arc<watch::Sender<bool>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for TcpProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn pipe(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    mut paused: watch::Receiver<bool>,
) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        if paused.wait_for(|p| !*p).await.is_err() {
            return;
        }
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => {
                let _ = to.shutdown().await;
                return;
            }
            Ok(n) => n,
        };
        // Bytes read just before a pause are held until the resume.
        if paused.wait_for(|p| !*p).await.is_err() {
            return;
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}

impl TcpProxy {
    pub async fn start(target: SocketAddr) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let (tx, rx) = watch::channel(false);
        let task = tokio::spawn(async move {
            loop {
                let Ok((client, _)) = listener.accept().await else {
                    continue;
                };
                let rx = rx.clone();
                tokio::spawn(async move {
                    let Ok(server) = TcpStream::connect(target).await else {
                        return;
                    };
                    let (cr, cw) = client.into_split();
                    let (sr, sw) = server.into_split();
                    tokio::spawn(pipe(cr, sw, rx.clone()));
                    tokio::spawn(pipe(sr, cw, rx));
                });
            }
        });
        Self { port, paused: Arc::new(tx), task }
    }

    /// Stops forwarding in both directions.
    pub fn pause(&self) {
        self.paused.send_replace(true);
    }

    /// Forwards again, everything held included.
    pub fn resume(&self) {
        self.paused.send_replace(false);
    }
}
