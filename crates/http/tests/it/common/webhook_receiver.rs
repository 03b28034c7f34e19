//! A webhook receiver on a random loopback port (raw HTTP/1.1 over tokio, one request per
//! connection): it records every request (headers and body) and answers 500 to the first
//! `fail_first` of them, 204 to the rest.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};

/// One request received.
#[derive(Debug, Clone)]
pub struct Received {
    pub headers: BTreeMap<String, String>,
    pub body: Vec<u8>,
    /// The status it was answered with.
    pub status: u16,
}

pub struct WebhookReceiver {
    pub url: String,
    received: Arc<Mutex<Vec<Received>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for WebhookReceiver {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl WebhookReceiver {
    /// A receiver at `http://127.0.0.1:<port>/hook` failing its first `fail_first` requests.
    pub async fn start(fail_first: usize) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/hook", listener.local_addr().unwrap());
        let received = Arc::new(Mutex::new(Vec::new()));
        let (store, seen) = (received.clone(), Arc::new(AtomicUsize::new(0)));
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let (store, seen) = (store.clone(), seen.clone());
                tokio::spawn(async move {
                    let _ = serve(stream, &store, &seen, fail_first).await;
                });
            }
        });
        Self { url, received, task }
    }

    /// Every request so far.
    pub fn received(&self) -> Vec<Received> {
        self.received.lock().unwrap().clone()
    }
}

async fn serve(
    mut stream: TcpStream,
    store: &Mutex<Vec<Received>>,
    seen: &AtomicUsize,
    fail_first: usize,
) -> std::io::Result<()> {
    let Some(request) = super::upstream::read_request(&mut stream).await? else {
        return Ok(());
    };
    let (headers, body) = (request.headers, request.body);
    let status = if seen.fetch_add(1, Ordering::SeqCst) < fail_first { 500 } else { 204 };
    store.lock().unwrap().push(Received { headers, body, status });
    let reason = if status == 204 { "No Content" } else { "Internal Server Error" };
    let answer =
        format!("HTTP/1.1 {status} {reason}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n");
    stream.write_all(answer.as_bytes()).await?;
    stream.shutdown().await
}
