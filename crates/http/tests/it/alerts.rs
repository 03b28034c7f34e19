//! Budget alerts, black box on both backends: two nodes spend a team's budget at once (200
//! concurrent calls of $0.0398 on a $0.80 budget, a fake upstream that bills what it was
//! asked for), and each threshold (50, 80, 100 %) is e-mailed to the team's owner once (to the
//! test's SMTP server) and POSTed once to the team's webhook, signed as Standard Webhooks
//! define and retried after the receiver fails. Webhook URLs are checked; only the team's
//! owners and admins manage them.

use crate::budget_walkarounds::{billing, slow_call};
use crate::common::smtp::SmtpServer;
use crate::common::upstream::FakeUpstream;
use crate::common::webhook_receiver::WebhookReceiver;
use crate::common::*;
use crate::teams::{add, fire, team, team_scoped_key};
use base64::Engine;
use hmac::Mac;
use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::time::Duration;

backend_tests!(
    alerts_are_sent_once_per_threshold_as_two_nodes_spend_at_once,
    webhooks_are_checked_and_kept_to_the_teams_admins,
);

/// The subject of a budget alert e-mail.
const ALERT_SUBJECT: &str = "A budget passed an alert threshold";

async fn put(app: &TestApp, path: &str, auth: Auth<'_>, body: &Value) -> Reply {
    app.send(app.request(reqwest::Method::PUT, path, auth).json(body)).await
}

/// Checks a request's Standard Webhooks signature with `secret` (`whsec_…`), independently of
/// the server's code: HMAC-SHA256 over `id.timestamp.body`, base64.
fn verify(secret: &str, headers: &std::collections::BTreeMap<String, String>, body: &[u8]) {
    let engine = base64::engine::general_purpose::STANDARD;
    let key = engine.decode(secret.strip_prefix("whsec_").unwrap()).unwrap();
    let (id, timestamp) = (&headers["webhook-id"], &headers["webhook-timestamp"]);
    let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(&key).unwrap();
    mac.update(format!("{id}.{timestamp}.").as_bytes());
    mac.update(body);
    let expected = format!("v1,{}", engine.encode(mac.finalize().into_bytes()));
    assert_eq!(headers["webhook-signature"], expected, "signature of {id}");
    let age = chrono::Utc::now().timestamp() - timestamp.parse::<i64>().unwrap();
    assert!((0..60).contains(&age), "webhook-timestamp {timestamp} is {age} s old");
}

async fn alerts_are_sent_once_per_threshold_as_two_nodes_spend_at_once(backend: Backend) {
    let Some(smtp) = SmtpServer::start() else { return };
    let upstream = FakeUpstream::start().await;
    let receiver = WebhookReceiver::start(2).await;
    let tweak = |s: &mut aigw_http::settings::Settings| {
        billing(&upstream.base_url, None)(s);
        smtp.configure(s);
        s.alerts.webhook_allow_private = true;
        s.alerts.webhook_retry_base_secs = 1;
    };
    let a = spawn_app_with(backend, tweak).await;
    let b = a.spawn_sibling(tweak).await;
    let (owner, member) = (a.new_user("al-own").await, a.new_user("al-mem").await);
    let id = team(&a, &owner, json!({"name": "data", "max_budget_usd": 0.80})).await;
    add(&a, &owner, &id, &member, "member").await;
    let path = format!("/api/v1/teams/{id}/webhook");
    let set = put(&a, &path, Auth::Bearer(&owner.token), &json!({"url": receiver.url})).await;
    let set = set.data(200);
    let secret = set["secret"].as_str().unwrap().to_owned();
    assert!(secret.starts_with("whsec_"), "{set}");
    let keys = [team_scoped_key(&a, &owner, &id).await, team_scoped_key(&a, &member, &id).await];
    let (ok, scopes) = fire([&a, &b], &keys, &slow_call(0, 390), 200).await;
    assert!((10..=20).contains(&ok), "{ok} calls of $0.0398 in $0.80");
    assert!(scopes.iter().all(|s| s == "team"), "{scopes:?}");

    // Each threshold once, to the owner (the team's only owner or admin), never to the member.
    for threshold in ["50 %", "80 %", "100 %"] {
        let found = eventually(&format!("the {threshold} alert"), Duration::from_secs(15), || {
            let mails = smtp.messages();
            let mail = mails.into_iter().find(|m| {
                m.to == owner.email
                    && m.subject.contains(ALERT_SUBJECT)
                    && (m.text.contains(threshold)
                        || (threshold == "100 %" && m.text.contains("refused a call")))
            });
            std::future::ready(mail.ok_or("not yet"))
        })
        .await;
        assert!(found.text.contains("the team “data”"), "{}", found.text);
    }
    // Every node has seen every flush by now; wait two flush intervals more for a duplicate.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let alerts: Vec<_> =
        smtp.messages().into_iter().filter(|m| m.subject.contains(ALERT_SUBJECT)).collect();
    assert_eq!(alerts.len(), 3, "one e-mail per threshold: {alerts:?}");
    assert!(alerts.iter().all(|m| m.to == owner.email), "{alerts:?}");

    // The webhook: three events, delivered after the receiver failed twice, all signed.
    let deliveries_path = format!("/api/v1/teams/{id}/webhook/deliveries");
    let listed = eventually("three deliveries delivered", Duration::from_secs(20), || async {
        let page = a.get(&deliveries_path, Auth::Bearer(&owner.token)).await.data(200);
        let list = page["deliveries"].as_array().cloned().unwrap_or_default();
        if list.len() == 3 && list.iter().all(|d| d["status"] == "delivered") {
            Ok(list)
        } else {
            Err(format!("{list:?}"))
        }
    })
    .await;
    let attempts: u64 = listed.iter().map(|d| d["attempts"].as_u64().unwrap()).sum();
    assert_eq!(attempts, 5, "two failed attempts, then one each: {listed:?}");
    let received = receiver.received();
    assert_eq!(received.len(), 5, "{received:?}");
    let mut delivered = BTreeSet::new();
    let mut thresholds = BTreeSet::new();
    for request in &received {
        verify(&secret, &request.headers, &request.body);
        let event: Value = serde_json::from_slice(&request.body).unwrap();
        assert_eq!(event["type"], "budget.threshold_reached");
        assert_eq!(event["id"], json!(request.headers["webhook-id"]));
        assert_eq!(event["data"]["scope"], "team");
        assert_eq!(event["data"]["team_id"], json!(id));
        assert_eq!(event["data"]["limit_usd"], json!(0.8));
        let threshold = event["data"]["threshold_percent"].as_u64().unwrap();
        let spent = event["data"]["spent_usd"].as_f64().unwrap();
        if event["data"]["reason"] == "spent" {
            assert!(spent * 100.0 >= 0.8 * threshold as f64 - 1e-9, "{event}");
        }
        if request.status == 204 {
            delivered.insert(request.headers["webhook-id"].clone());
            thresholds.insert(threshold);
        }
    }
    assert_eq!(delivered.len(), 3, "three distinct events delivered");
    assert_eq!(thresholds, BTreeSet::from([50, 80, 100]));
    let metrics =
        a.get("/metrics", Auth::None).await.text + &b.get("/metrics", Auth::None).await.text;
    let gauge = format!("aigw_team_budget_used_ratio{{team_id=\"{id}\"}}");
    assert!(metrics.contains(&gauge), "no {gauge} in /metrics");
}

async fn webhooks_are_checked_and_kept_to_the_teams_admins(backend: Backend) {
    let app = spawn_app(backend).await;
    let (owner, member) = (app.new_user("wh-own").await, app.new_user("wh-mem").await);
    let id = team(&app, &owner, json!({"name": "ops"})).await;
    add(&app, &owner, &id, &member, "member").await;
    let path = format!("/api/v1/teams/{id}/webhook");
    let auth = Auth::Bearer(&owner.token);
    for bad in [
        "http://hooks.example.com/aigw",
        "https://127.0.0.1/hook",
        "https://[::1]/hook",
        "https://169.254.169.254/latest",
        "https://user:pw@hooks.example.com/",
        "not a url",
    ] {
        put(&app, &path, auth, &json!({"url": bad})).await.invalid("url");
    }
    app.get(&path, auth).await.not_found("webhook", &id);
    let url = "https://hooks.example.com/aigw?team=ops";
    let first = put(&app, &path, auth, &json!({"url": url})).await.data(200);
    assert_eq!(first["url"], url);
    assert_eq!(first["created_by"], json!(owner.id));
    let second = put(&app, &path, auth, &json!({"url": url})).await.data(200);
    assert_ne!(first["secret"], second["secret"], "setting it again makes a new secret");
    let shown = app.get(&path, auth).await.data(200);
    assert_eq!(shown["url"], url);
    assert!(shown.get("secret").is_none(), "the secret is shown once: {shown}");
    let member_auth = Auth::Bearer(&member.token);
    put(&app, &path, member_auth, &json!({"url": url})).await.forbidden("team_admin", "member");
    app.get(&path, member_auth).await.forbidden("team_admin", "member");
    let outsider = app.new_user("wh-out").await;
    app.get(&path, Auth::Bearer(&outsider.token)).await.not_found("team", &id);
    let deliveries = app.get(&format!("{path}/deliveries"), auth).await.data(200);
    assert_eq!(deliveries["deliveries"], json!([]));
    app.delete(&path, auth).await.data(200);
    app.get(&path, auth).await.not_found("webhook", &id);
    app.delete(&path, auth).await.not_found("webhook", &id);
    let audit = app.get("/api/v1/audit?limit=50", auth).await.data(200);
    let actions: Vec<&str> =
        audit["events"].as_array().unwrap().iter().filter_map(|e| e["action"].as_str()).collect();
    assert!(actions.contains(&"team_webhook_set"), "{actions:?}");
    assert!(actions.contains(&"team_webhook_removed"), "{actions:?}");
}
