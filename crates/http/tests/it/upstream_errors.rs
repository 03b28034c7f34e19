//! What the upstream answers reaches the caller as it should: a
//! 4xx with its status and OpenAI-style message (`upstream_rejected`), a 429 with its
//! `Retry-After`, 401/403 (the gateway's own credentials) and 3xx/5xx as 502; nothing is
//! followed, answers are capped, and no `*_PROXY` variable is honoured unless configured.

use crate::binary::{free_port, wait_until_healthy, write_config, BIN};
use crate::common;

use aigw_service::{ProviderConfig, ProviderKind};
use common::upstream::FakeUpstream;
use common::*;
use serde_json::json;
use std::process::{Command, Stdio};

backend_tests!(
    upstream_4xx_reach_the_caller_with_status_and_reason,
    upstream_429_keeps_its_retry_after,
    upstream_401_403_3xx_are_502_and_nothing_is_followed,
    upstream_answers_are_capped,
);

const PROVIDER_KEY: &str = "sk-provider-secret-9876543210";

async fn app_with(
    backend: Backend,
    upstream: &FakeUpstream,
    cap: Option<usize>,
) -> (TestApp, String) {
    let base = upstream.base_url.clone();
    let app = spawn_app_with(backend, move |s| {
        s.providers = vec![ProviderConfig {
            name: "fake".into(),
            kind: ProviderKind::Openai,
            base_url: Some(base),
            api_key: Some(secrecy::SecretString::from(PROVIDER_KEY.to_owned())),
            models: ["up-400", "up-401", "up-403", "up-429", "up-302", "up-huge", "up-json"]
                .iter()
                .map(|m| (*m).to_owned())
                .collect(),
            tokenizers: Default::default(),
            prices: Default::default(),
            ..ProviderConfig::default()
        }];
        if let Some(cap) = cap {
            s.gateway.max_response_bytes = cap;
        }
    })
    .await;
    let user = app.new_user("upstream").await;
    let key = app.key(&user.token, &["ai_gateway"]).await;
    (app, key)
}

async fn upstream_4xx_reach_the_caller_with_status_and_reason(backend: Backend) {
    let upstream = FakeUpstream::start().await;
    let (app, key) = app_with(backend, &upstream, None).await;
    let reply = app.chat(Auth::Bearer(&key), &chat_body("up-400", "x")).await;
    let error = reply.error(400, "upstream_rejected");
    assert!(
        error["message"].as_str().unwrap().starts_with("This model's maximum context length"),
        "{error}"
    );
    assert!(!reply.text.contains(PROVIDER_KEY), "the provider's key leaked: {}", reply.text);
    assert!(!reply.text.contains(&key), "the caller's key leaked: {}", reply.text);
    assert_eq!(error["details"]["provider"], json!("fake"));
    assert_eq!(error["details"]["upstream_status"], json!(400));
    assert_eq!(error["details"]["code"], json!("context_length_exceeded"));
    assert_eq!(error["details"]["type"], json!("invalid_request_error"));
    assert_eq!(error["details"]["param"], json!("messages"));
    assert_eq!(upstream.requests().len(), 1, "a 400 is not retried");
}

async fn upstream_429_keeps_its_retry_after(backend: Backend) {
    let upstream = FakeUpstream::start().await;
    let (app, key) = app_with(backend, &upstream, None).await;
    let reply = app.chat(Auth::Bearer(&key), &chat_body("up-429", "x")).await;
    let error = reply.error(429, "upstream_rejected");
    assert_eq!(reply.header("retry-after"), Some("7"));
    assert_eq!(error["message"], json!("Rate limit reached"));
    assert_eq!(error["details"]["code"], json!("rate_limit_exceeded"));
}

async fn upstream_401_403_3xx_are_502_and_nothing_is_followed(backend: Backend) {
    let upstream = FakeUpstream::start().await;
    let (app, key) = app_with(backend, &upstream, None).await;
    for model in ["up-401", "up-403", "up-302"] {
        let reply = app.chat(Auth::Bearer(&key), &chat_body(model, "x")).await;
        reply.error(502, "upstream_error");
        assert!(!reply.text.contains(PROVIDER_KEY), "{}", reply.text);
    }
    let paths: Vec<String> = upstream.requests().into_iter().map(|r| r.path).collect();
    assert_eq!(paths, vec!["/chat/completions"; 3], "the redirect must not be followed");
}

async fn upstream_answers_are_capped(backend: Backend) {
    let upstream = FakeUpstream::start().await;
    let (app, key) = app_with(backend, &upstream, Some(1024 * 1024)).await;
    app.chat(Auth::Bearer(&key), &chat_body("up-huge", "x")).await.error(502, "upstream_error");
    let reply = app.chat(Auth::Bearer(&key), &chat_body("up-json", "x")).await;
    assert_eq!(reply.status, 200, "{}", reply.text);
}

async fn post_json(
    client: &reqwest::Client,
    url: &str,
    bearer: Option<&str>,
    body: &serde_json::Value,
) -> serde_json::Value {
    let mut request = client.post(url).json(body);
    if let Some(token) = bearer {
        request = request.bearer_auth(token);
    }
    request.send().await.unwrap().json().await.unwrap()
}

/// `HTTP_PROXY` and friends are ignored; `gateway.proxy_url` is used when set.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proxy_variables_are_ignored_unless_configured() {
    let upstream = FakeUpstream::start().await;
    let proxy = FakeUpstream::start().await;
    let upstream_port: u16 = upstream.base_url.rsplit(':').next().unwrap().parse().unwrap();
    for configured in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let port = free_port();
        let config = write_config(dir.path(), port, upstream_port);
        let mut command = Command::new(BIN);
        command.arg("--config").arg(&config).current_dir(dir.path());
        for var in
            ["HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"]
        {
            command.env(var, &proxy.base_url);
        }
        command.env_remove("NO_PROXY").env_remove("no_proxy");
        if configured {
            command.env("AIGW__GATEWAY__PROXY_URL", &proxy.base_url);
        }
        let mut child = command.stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap();
        let client = reqwest::Client::builder().no_proxy().build().unwrap();
        let base = format!("http://127.0.0.1:{port}");
        wait_until_healthy(&client, &base).await;
        let register = json!({"email": "proxy@example.com", "password": "a long passphrase"});
        let data =
            post_json(&client, &format!("{base}/api/v1/auth/register"), None, &register).await;
        let token = data["data"]["token"].as_str().unwrap().to_owned();
        let create = json!({"name": "p", "permissions": ["ai_gateway"]});
        let data =
            post_json(&client, &format!("{base}/api/v1/auth/api-keys"), Some(&token), &create)
                .await;
        let key = data["data"]["key"].as_str().unwrap().to_owned();
        let status = client
            .post(format!("{base}/api/v1/ai/chat/completions"))
            .header("authorization", key)
            .json(&chat_body("slow-model", "x"))
            .send()
            .await
            .unwrap()
            .status()
            .as_u16();
        let _ = child.kill();
        let _ = child.wait();
        if configured {
            assert_eq!(proxy.requests().len(), 1, "gateway.proxy_url was not used");
        } else {
            assert_eq!(status, 200);
            assert_eq!(proxy.requests().len(), 0, "an environment proxy was used");
            assert_eq!(upstream.requests().len(), 1);
        }
    }
}
