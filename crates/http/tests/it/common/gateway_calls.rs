//! What the gateway's tests share: a burst of calls over two nodes, and the per-request
//! records of the calls once the ledger has them.

use super::{chat_body, eventually, Auth, Reply, TestApp, User};
use serde_json::Value;
use std::time::Duration;

/// Sends `body` to `path` `n` times at once, alternately to each of `nodes` and round-robin
/// over `keys`; returns how many got 200 and the `details.scope` of each 429
/// `budget_exceeded` (any other answer fails the test).
pub async fn fire_at(
    nodes: [&TestApp; 2],
    path: &str,
    keys: &[String],
    body: &Value,
    n: usize,
) -> (usize, Vec<String>) {
    let calls = (0..n).map(|i| {
        let node = nodes[i % 2];
        let request = node
            .request(reqwest::Method::POST, path, Auth::Bearer(&keys[i % keys.len()]))
            .json(body);
        async move { node.send(request).await }
    });
    let (mut ok, mut scopes) = (0, Vec::new());
    for reply in futures_util::future::join_all(calls).await {
        match reply.status {
            200 => ok += 1,
            429 => {
                let error = reply.error(429, "budget_exceeded");
                scopes.push(error["details"]["scope"].as_str().unwrap_or_default().to_owned());
            }
            other => panic!("unexpected {other}: {}", reply.text),
        }
    }
    (ok, scopes)
}

/// The per-request records of `users`, newest first per user, once the ledger holds `calls`
/// of them (exactly `calls`: one record per call).
pub async fn records_of(app: &TestApp, users: &[&User], calls: usize) -> Vec<Value> {
    let found = eventually("every call recorded", Duration::from_secs(10), || async {
        let mut found = Vec::new();
        for user in users {
            let page: Reply =
                app.get("/api/v1/usage/requests?limit=200", Auth::Bearer(&user.token)).await;
            found.extend(page.data(200)["requests"].as_array().cloned().unwrap_or_default());
        }
        if found.len() >= calls {
            Ok(found)
        } else {
            Err(format!("{} of {calls} records", found.len()))
        }
    })
    .await;
    assert_eq!(found.len(), calls, "one record per call: {found:?}");
    found
}

/// The summed `cost_usd` of `records`.
pub fn cost_of(records: &[Value]) -> f64 {
    records.iter().map(|r| r["cost_usd"].as_f64().unwrap_or(f64::NAN)).sum()
}

/// Waits (at most `within`) until `node` answers a chat call with `key` 401: a revocation made
/// on another node has reached it through the change feed.
pub async fn refused_by(node: &TestApp, key: &str, within: Duration) {
    eventually("the revocation reached the other node", within, || async {
        let reply = node.chat(Auth::Bearer(key), &chat_body("echo", "hi")).await;
        if reply.status == 401 {
            Ok(())
        } else {
            Err(format!("{}: {}", reply.status, reply.text))
        }
    })
    .await;
}
