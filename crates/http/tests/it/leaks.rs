//! Leaked API keys, revoked on report: GitHub's secret-scanning partner program (a report
//! signed with a P-256 key this test makes, the keys document in a file or served over HTTP),
//! an admin's pasted list, and the operator's `aigw admin revoke-leaked`.

use crate::common;
use crate::credential_cache::reply_eventually;

use aigw_domain::Role;
use base64::Engine;
use common::smtp::SmtpServer;
use common::{flip_char, spawn_app, spawn_app_with, test_settings, Auth, Backend, Reply, TestApp};
use p256::ecdsa::signature::Signer as _;
use p256::ecdsa::{Signature, SigningKey};
use p256::pkcs8::{EncodePublicKey, LineEnding};
use serde_json::{json, Value};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// How soon every other node must refuse a revoked key.
const WITHIN: Duration = Duration::from_secs(1);

const GITHUB: &str = "/api/v1/secret-scanning/github";
const ADMIN_LEAKS: &str = "/api/v1/admin/leaked-keys";

/// A key pair standing in for GitHub's, with its key identifier.
struct Signer {
    id: String,
    key: SigningKey,
}

impl Signer {
    fn new(id: &str) -> Self {
        Self { id: id.to_owned(), key: SigningKey::random(&mut rand::rngs::OsRng) }
    }

    /// Base64 of the DER signature of `body`, as GitHub sends it.
    fn sign(&self, body: &[u8]) -> String {
        let signature: Signature = self.key.sign(body);
        base64::engine::general_purpose::STANDARD.encode(signature.to_der().as_bytes())
    }
}

/// A keys document of GitHub's shape holding the public keys of `signers`.
fn keys_document(signers: &[&Signer]) -> String {
    let keys: Vec<Value> = signers
        .iter()
        .map(|s| {
            let pem = s.key.verifying_key().to_public_key_pem(LineEnding::LF).unwrap();
            json!({"key_identifier": s.id, "key": pem, "is_current": true})
        })
        .collect();
    json!({ "public_keys": keys }).to_string()
}

/// An app with the endpoint on, its keys document (of `signer`) in a file of `dir`.
async fn scanning_app(backend: Backend, signer: &Signer, dir: &tempfile::TempDir) -> TestApp {
    scanning_app_mailing(backend, signer, dir, None).await
}

/// [`scanning_app`] whose e-mail goes to `smtp`.
async fn scanning_app_mailing(
    backend: Backend,
    signer: &Signer,
    dir: &tempfile::TempDir,
    smtp: Option<&SmtpServer>,
) -> TestApp {
    let path = dir.path().join("github_keys.json");
    std::fs::write(&path, keys_document(&[signer])).unwrap();
    spawn_app_with(backend, |s| {
        s.secret_scanning.enabled = true;
        s.secret_scanning.github_keys_file = Some(path);
        if let Some(smtp) = smtp {
            smtp.configure(s);
        }
    })
    .await
}

/// Sends `body` to the GitHub endpoint with the given headers (absent when `None`).
async fn send_report(
    app: &TestApp,
    key_id: Option<&str>,
    signature: Option<&str>,
    body: &str,
) -> Reply {
    let mut request = app
        .request(reqwest::Method::POST, GITHUB, Auth::None)
        .header("content-type", "application/json")
        .body(body.to_owned());
    if let Some(id) = key_id {
        request = request.header("Github-Public-Key-Identifier", id);
    }
    if let Some(signature) = signature {
        request = request.header("Github-Public-Key-Signature", signature);
    }
    app.send(request).await
}

/// Sends `body` signed by `signer`.
async fn report(app: &TestApp, signer: &Signer, body: &str) -> Reply {
    send_report(app, Some(&signer.id), Some(&signer.sign(body.as_bytes())), body).await
}

/// A report body naming `tokens`, as GitHub writes one.
fn report_body(tokens: &[&str], url: &str) -> String {
    let items: Vec<Value> = tokens
        .iter()
        .map(|t| json!({"token": t, "type": "aigw_api_key", "url": url, "source": "content"}))
        .collect();
    Value::Array(items).to_string()
}

/// The answer of an accepted GitHub report: (token_hash, label) per secret.
fn labels(reply: &Reply) -> Vec<(String, String)> {
    assert_eq!(reply.status, 200, "{}", reply.text);
    let body = reply.json();
    body.as_array()
        .unwrap_or_else(|| panic!("GitHub's answer is a bare array: {body}"))
        .iter()
        .map(|v| {
            assert_eq!(v["token_type"], json!("aigw_api_key"), "{v}");
            (v["token_hash"].as_str().unwrap().to_owned(), v["label"].as_str().unwrap().to_owned())
        })
        .collect()
}

fn sha256_hex(text: &str) -> String {
    common::sha256(text.as_bytes()).iter().map(|b| format!("{b:02x}")).collect()
}

/// A registered user made an admin the way an operator does.
async fn new_admin(app: &TestApp, tag: &str) -> common::User {
    let user = app.new_user(tag).await;
    let dir = tempfile::tempdir().unwrap();
    let settings = test_settings(dir.path().to_owned(), app.database_url.clone());
    aigw_http::operator::set_role(&settings, &user.email, Role::Admin).await.unwrap();
    user
}

/// The audit events of `action` about key `key_id`, as an admin reads them.
async fn key_events(app: &TestApp, admin: &str, action: &str, key_id: &str) -> Vec<Value> {
    let path = format!("/api/v1/admin/audit?action={action}&limit=200");
    let data = app.get(&path, Auth::Bearer(admin)).await.data(200);
    let events = data["events"].as_array().unwrap().clone();
    events.into_iter().filter(|e| e["target"] == json!(key_id)).collect()
}

/// Waits (10 s at most) until `app` trusts its caches (its change feed is fresh).
async fn feed_is_fresh(app: &TestApp) {
    let fresh = || async {
        let feed = app.get("/readyz", Auth::None).await.json()["change_feed"].take();
        if feed["status"] == "ok" {
            Ok(())
        } else {
            Err(feed)
        }
    };
    common::eventually("the change feed never became fresh", Duration::from_secs(10), fresh).await;
}

async fn a_signed_report_revokes_the_key_on_every_node_within_a_second(backend: Backend) {
    let Some(smtp) = SmtpServer::start() else { return };
    let (dir, signer) = (tempfile::tempdir().unwrap(), Signer::new("k1"));
    let a = scanning_app_mailing(backend, &signer, &dir, Some(&smtp)).await;
    let b = a.spawn_sibling(|_| {}).await;
    feed_is_fresh(&b).await;
    let user = a.new_user("leaky").await;
    let made = a.create_key(&user.token, &["read"], None).await;
    let (key, id) = (made["key"].as_str().unwrap(), made["id"].as_str().unwrap());
    for _ in 0..3 {
        b.me(Auth::Raw(key)).await.data(200); // B holds the key in its cache
    }
    let url = "https://github.com/octo/app/blob/0123abc/config.yml";
    let reply = report(&a, &signer, &report_body(&[key], url)).await;
    let answered = Instant::now();
    assert_eq!(labels(&reply), vec![(sha256_hex(key), "true_positive".to_owned())]);
    assert!(!reply.text.contains(key), "the answer carries the secret: {}", reply.text);
    a.me(Auth::Raw(key)).await.unauthorized();
    reply_eventually(WITHIN, "leaked key on node B", || b.me(Auth::Raw(key)), |r| r.status == 401)
        .await
        .unauthorized();
    let took = answered.elapsed();
    assert!(took < WITHIN, "node B refused the leaked key only after {took:?}");

    // The audit trail: the report with its URL (never the secret), and the revocation.
    let admin = new_admin(&a, "leak-auditor").await;
    let reported = key_events(&a, &admin.token, "api_key_leak_reported", id).await;
    assert_eq!(reported.len(), 1, "{reported:?}");
    let details = &reported[0]["details"];
    assert_eq!(details["url"], json!(url), "{details}");
    assert_eq!(details["source"], json!("content"));
    assert_eq!(details["type"], json!("aigw_api_key"));
    assert_eq!(details["key_prefix"], json!(&key[..12]));
    assert_eq!(details["label"], json!("true_positive"));
    assert_eq!(reported[0]["user_id"], json!(user.id));
    assert_eq!(reported[0]["actor"], json!("github"));
    let revoked = key_events(&a, &admin.token, "api_key_revoked", id).await;
    assert_eq!(revoked.len(), 1, "{revoked:?}");
    assert_eq!(revoked[0]["details"]["reason"], json!("leaked"));
    let everything = a.get("/api/v1/admin/audit?limit=200", Auth::Bearer(&admin.token)).await;
    assert!(!everything.text.contains(key), "an audit event carries the secret");
    // The owner sees both in their own trail.
    let own = a.get("/api/v1/audit?action=api_key_leak_reported", Auth::Bearer(&user.token)).await;
    assert_eq!(own.data(200)["events"].as_array().map(Vec::len), Some(1), "{}", own.text);
    // And the owner is told by e-mail: which key, where it was found.
    let notice = smtp.wait_for(&user.email, "An API key of yours was revoked", 1).await;
    assert!(notice.text.contains(&key[..12]) && notice.text.contains(url), "{}", notice.text);
    assert!(!notice.text.contains(key), "the notice carries the secret: {}", notice.text);
    drop(b);
}

async fn the_answer_labels_true_and_false_positives(backend: Backend) {
    let (dir, signer) = (tempfile::tempdir().unwrap(), Signer::new("k1"));
    let app = scanning_app(backend, &signer, &dir).await;
    let user = app.new_user("labels").await;
    let valid = app.key(&user.token, &["read"]).await;
    let revoked = app.create_key(&user.token, &["read"], None).await;
    let revoked_key = revoked["key"].as_str().unwrap();
    app.revoke_key(Auth::Bearer(&user.token), revoked["id"].as_str().unwrap()).await.data(200);
    let expired_soon = app.create_key(&user.token, &["read"], Some(&common::in_secs(1))).await;
    let random = "ghp_not-an-aigw-key-at-all";
    let broken = flip_char(&valid, valid.len() - 1);
    let unknown = aigw_domain::ApiKeySecret::generate(&mut rand::rngs::OsRng);
    let tokens = [random, broken.as_str(), valid.as_str(), revoked_key, unknown.expose()];
    let reply = report(&app, &signer, &report_body(&tokens, "https://github.com/o/r")).await;
    let want: Vec<(String, String)> = tokens
        .iter()
        .zip([
            "false_positive",
            "false_positive",
            "true_positive",
            "false_positive",
            "false_positive",
        ])
        .map(|(t, l)| (sha256_hex(t), l.to_owned()))
        .collect();
    assert_eq!(labels(&reply), want);
    app.me(Auth::Raw(&valid)).await.unauthorized();

    // An expired key is revoked too: a PATCH of its expiry would otherwise revive it.
    let expired_key = expired_soon["key"].as_str().unwrap();
    reply_eventually(
        Duration::from_secs(3),
        "expiry",
        || app.me(Auth::Raw(expired_key)),
        |r| r.status == 401,
    )
    .await;
    let reply = report(&app, &signer, &report_body(&[expired_key], "https://github.com/o/e")).await;
    assert_eq!(labels(&reply), vec![(sha256_hex(expired_key), "true_positive".to_owned())]);
    let listed = app.list_keys(Auth::Bearer(&user.token)).await.data(200);
    let row = listed["api_keys"]
        .as_array()
        .and_then(|keys| keys.iter().find(|k| k["id"] == expired_soon["id"]).cloned())
        .unwrap_or_else(|| panic!("the expired key is listed: {listed}"));
    assert!(row["revoked_at"].is_string(), "{row}");
}

async fn badly_signed_reports_are_refused_and_change_nothing(backend: Backend) {
    let (dir, signer) = (tempfile::tempdir().unwrap(), Signer::new("k1"));
    let app = scanning_app(backend, &signer, &dir).await;
    let user = app.new_user("forged").await;
    let key = app.key(&user.token, &["read"]).await;
    let body = report_body(&[&key], "https://github.com/o/r");
    let good = signer.sign(body.as_bytes());
    const KEY_ID: &str = "Github-Public-Key-Identifier";
    const SIGNATURE: &str = "Github-Public-Key-Signature";

    // Signed by another key under the right identifier.
    let impostor = Signer::new("k1");
    report(&app, &impostor, &body).await.invalid(SIGNATURE);
    // One byte of the body changed after signing (the same key, now in lower case).
    let flipped = body.replacen(&key, &key.to_lowercase(), 1);
    send_report(&app, Some("k1"), Some(&good), &flipped).await.invalid(SIGNATURE);
    // A key identifier GitHub never published, or none that could be one.
    send_report(&app, Some("k2"), Some(&good), &body).await.invalid(KEY_ID);
    send_report(&app, Some("k 1"), Some(&good), &body).await.invalid(KEY_ID);
    // Missing or malformed headers.
    send_report(&app, None, Some(&good), &body).await.invalid(KEY_ID);
    send_report(&app, Some("k1"), None, &body).await.invalid(SIGNATURE);
    send_report(&app, Some("k1"), Some("not base64!"), &body).await.invalid(SIGNATURE);
    send_report(&app, Some("k1"), Some("AAAA"), &body).await.invalid(SIGNATURE);
    // Signed, but not a report: refused naming the field.
    report(&app, &signer, "{}").await.invalid("body");
    report(&app, &signer, r#"[{"type":"aigw_api_key"}]"#).await.invalid("[0].token");
    report(&app, &signer, r#"[{"token":"x","url":5}]"#).await.invalid("[0].url");
    // Not JSON at all.
    let text = app
        .send(
            app.request(reqwest::Method::POST, GITHUB, Auth::None)
                .header("content-type", "text/plain")
                .header(KEY_ID, "k1")
                .header(SIGNATURE, &good)
                .body(body.clone()),
        )
        .await;
    text.error(415, "unsupported_media_type");

    // Nothing changed: the key works, and no report of it was recorded.
    app.me(Auth::Raw(&key)).await.data(200);
    let admin = new_admin(&app, "forgery-auditor").await;
    let events = app
        .get("/api/v1/admin/audit?action=api_key_leak_reported", Auth::Bearer(&admin.token))
        .await
        .data(200);
    assert_eq!(events["events"], json!([]), "{events}");
    // The genuine report still goes through.
    let reply = send_report(&app, Some("k1"), Some(&good), &body).await;
    assert_eq!(labels(&reply), vec![(sha256_hex(&key), "true_positive".to_owned())]);
}

async fn a_replayed_report_is_refused_and_changes_nothing(backend: Backend) {
    let (dir, signer) = (tempfile::tempdir().unwrap(), Signer::new("k1"));
    let app = scanning_app(backend, &signer, &dir).await;
    let user = app.new_user("replayed").await;
    let made = app.create_key(&user.token, &["read"], None).await;
    let (key, id) = (made["key"].as_str().unwrap(), made["id"].as_str().unwrap());
    let body = report_body(&[key], "https://github.com/o/r");
    let signature = signer.sign(body.as_bytes());
    let first = send_report(&app, Some("k1"), Some(&signature), &body).await;
    assert_eq!(labels(&first), vec![(sha256_hex(key), "true_positive".to_owned())]);
    let admin = new_admin(&app, "replay-auditor").await;
    let before = key_events(&app, &admin.token, "api_key_leak_reported", id).await;
    assert_eq!(before.len(), 1);
    for _ in 0..2 {
        let replay = send_report(&app, Some("k1"), Some(&signature), &body).await;
        let error = replay.error(409, "conflict");
        assert_eq!(error["details"]["field"], json!("body"), "{error}");
    }
    let after = key_events(&app, &admin.token, "api_key_leak_reported", id).await;
    assert_eq!(after, before, "a replay recorded something");
    // The same secrets in another body (GitHub found them elsewhere) are a new report.
    let elsewhere = report_body(&[key], "https://github.com/o/other");
    let reply = report(&app, &signer, &elsewhere).await;
    assert_eq!(labels(&reply), vec![(sha256_hex(key), "false_positive".to_owned())]);
}

async fn admins_revoke_a_pasted_list_and_others_cannot(backend: Backend) {
    let app = spawn_app(backend).await;
    // Off by default: the GitHub endpoint does not exist.
    let signer = Signer::new("k1");
    report(&app, &signer, "[]").await.error(404, "not_found");
    let admin = new_admin(&app, "leak-admin").await;
    let user = app.new_user("pasted").await;
    let made = app.create_key(&user.token, &["read"], None).await;
    let (key, id) = (made["key"].as_str().unwrap(), made["id"].as_str().unwrap());
    let body = json!({"secrets": [format!(" {key} "), "garbage"], "url": "https://paste.example/1", "source": "paste"});
    app.post(ADMIN_LEAKS, Auth::Bearer(&user.token), &body).await.forbidden("admin", "user");
    app.me(Auth::Raw(key)).await.data(200);
    app.post(ADMIN_LEAKS, Auth::Bearer(&admin.token), &json!({"secrets": []}))
        .await
        .invalid("secrets");
    app.post(ADMIN_LEAKS, Auth::Bearer(&admin.token), &json!({"secrets": [" "]}))
        .await
        .invalid("secrets[0]");
    app.post(ADMIN_LEAKS, Auth::Bearer(&admin.token), &json!({"url": "x"}))
        .await
        .invalid("secrets");

    let data = app.post(ADMIN_LEAKS, Auth::Bearer(&admin.token), &body).await.data(200);
    assert_eq!(data["revoked"], json!(1), "{data}");
    let results = data["results"].as_array().unwrap();
    assert_eq!(results[0]["label"], json!("true_positive"), "{data}");
    assert_eq!(results[0]["finding"], json!("revoked"));
    assert_eq!(results[0]["key_id"], json!(id));
    assert_eq!(results[0]["key_prefix"], json!(&key[..12]));
    assert_eq!(results[0]["token_hash"], json!(sha256_hex(key)));
    assert_eq!(results[1]["label"], json!("false_positive"));
    assert_eq!(results[1]["finding"], json!("not_an_api_key"));
    assert_eq!(results[1]["key_id"], Value::Null);
    app.me(Auth::Raw(key)).await.unauthorized();
    let reported = key_events(&app, &admin.token, "api_key_leak_reported", id).await;
    assert_eq!(reported[0]["details"]["url"], json!("https://paste.example/1"));
    assert_eq!(reported[0]["actor"], json!(admin.id));
    // The same list again: the key is already revoked, nothing more happens.
    let again = app.post(ADMIN_LEAKS, Auth::Bearer(&admin.token), &body).await.data(200);
    assert_eq!(again["revoked"], json!(0));
    assert_eq!(again["results"][0]["finding"], json!("already_revoked"));
}

/// `aigw admin revoke-leaked`, the real binary on the app's database, while the server runs:
/// the server refuses the key within a second, through the change feed.
async fn the_operator_command_revokes_a_pasted_list(backend: Backend) {
    let app = spawn_app(backend).await;
    let user = app.new_user("operator-leak").await;
    let made = app.create_key(&user.token, &["read"], None).await;
    let (key, id) = (made["key"].as_str().unwrap().to_owned(), made["id"].as_str().unwrap());
    app.me(Auth::Raw(&key)).await.data(200);
    let dir = tempfile::tempdir().unwrap();
    let secrets = dir.path().join("secrets.txt");
    std::fs::write(&secrets, format!("{key}\n\nnot-a-key\n")).unwrap();
    let args = ["revoke-leaked", "--url", "https://paste.example/2", "--file"];
    let out = crate::operator_lists::admin_command(&app, &args, vec![secrets.into()]).await;
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 3, "stdout holds the result alone: {stdout:?}");
    assert!(lines[0].starts_with("true_positive revoked ") && lines[0].contains(id), "{stdout}");
    assert!(lines[0].contains(&sha256_hex(&key)) && !stdout.contains(&key), "{stdout}");
    assert!(lines[1].starts_with("false_positive not_an_api_key "), "{stdout}");
    assert!(lines[2].starts_with("revoked 1 key(s), report "), "{stdout}");
    reply_eventually(
        WITHIN,
        "operator's revocation",
        || app.me(Auth::Raw(&key)),
        |r| r.status == 401,
    )
    .await
    .unauthorized();
    let admin = new_admin(&app, "operator-auditor").await;
    let reported = key_events(&app, &admin.token, "api_key_leak_reported", id).await;
    assert_eq!(reported[0]["actor"], json!("operator"));
    assert_eq!(reported[0]["details"]["url"], json!("https://paste.example/2"));
}

/// Serves `document` at `GET /keys` on a random port, counting the requests.
async fn keys_server(document: String) -> (String, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let served = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let count = served.clone();
    tokio::spawn(async move {
        loop {
            let Ok((mut socket, _)) = listener.accept().await else { return };
            count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let document = document.clone();
            tokio::spawn(async move {
                let mut buf = vec![0u8; 8192];
                let _ = socket.read(&mut buf).await;
                let answer = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{document}",
                    document.len()
                );
                let _ = socket.write_all(answer.as_bytes()).await;
                let _ = socket.shutdown().await;
            });
        }
    });
    (format!("http://127.0.0.1:{port}/keys"), served)
}

async fn the_keys_document_is_fetched_by_url_and_cached(backend: Backend) {
    let signer = Signer::new("k-url");
    let (url, served) = keys_server(keys_document(&[&signer])).await;
    let app = spawn_app_with(backend, |s| {
        s.secret_scanning.enabled = true;
        s.secret_scanning.github_keys_url = Some(url.clone());
    })
    .await;
    let user = app.new_user("by-url").await;
    let first = app.key(&user.token, &["read"]).await;
    let second = app.key(&user.token, &["read"]).await;
    let reply = report(&app, &signer, &report_body(&[&first], "https://github.com/o/1")).await;
    assert_eq!(labels(&reply), vec![(sha256_hex(&first), "true_positive".to_owned())]);
    let reply = report(&app, &signer, &report_body(&[&second], "https://github.com/o/2")).await;
    assert_eq!(labels(&reply), vec![(sha256_hex(&second), "true_positive".to_owned())]);
    assert_eq!(served.load(std::sync::atomic::Ordering::SeqCst), 1, "the keys are cached");
    // Unknown key ids reload the keys at most once per interval, however many arrive.
    let body = report_body(&["x"], "https://github.com/o/3");
    for _ in 0..5 {
        let signature = signer.sign(body.as_bytes());
        send_report(&app, Some("k-new"), Some(&signature), &body)
            .await
            .invalid("Github-Public-Key-Identifier");
    }
    assert!(served.load(std::sync::atomic::Ordering::SeqCst) <= 2, "reloads are bounded");

    // A node that cannot read any keys document answers 503 and changes nothing.
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("absent.json");
    let blind = app
        .spawn_sibling(|s| {
            s.secret_scanning.enabled = true;
            s.secret_scanning.github_keys_file = Some(missing);
        })
        .await;
    let third = app.key(&user.token, &["read"]).await;
    let reply = report(&blind, &signer, &report_body(&[&third], "https://github.com/o/4")).await;
    reply.error(503, "service_unavailable");
    app.me(Auth::Raw(&third)).await.data(200);
    drop(blind);
}

backend_tests!(
    a_signed_report_revokes_the_key_on_every_node_within_a_second,
    the_answer_labels_true_and_false_positives,
    badly_signed_reports_are_refused_and_change_nothing,
    a_replayed_report_is_refused_and_changes_nothing,
    admins_revoke_a_pasted_list_and_others_cannot,
    the_operator_command_revokes_a_pasted_list,
    the_keys_document_is_fetched_by_url_and_cached,
);
