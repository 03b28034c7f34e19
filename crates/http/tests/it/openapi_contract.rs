//! The OpenAPI description says what clients need: the chat request as OpenAI
//! describes it (content a string or an array of content parts, at least one message, the
//! five roles), both answer media types, logout's optional body; and the server refuses
//! exactly what the description refuses.

use crate::common;

use common::*;
use serde_json::{json, Value};

backend_tests!(
    chat_request_is_described_as_openai_does,
    the_validator_agrees_with_the_schema,
    a_credential_is_asked_for_exactly_where_documented,
);

async fn chat_request_is_described_as_openai_does(backend: Backend) {
    let app = spawn_app(backend).await;
    let doc = app.get("/api/v1/openapi.json", Auth::None).await.json();
    let schemas = &doc["components"]["schemas"];
    assert_eq!(
        schemas["ChatRole"]["enum"],
        json!(["system", "developer", "user", "assistant", "tool"])
    );
    let request = &schemas["ChatCompletionRequest"];
    assert_eq!(request["properties"]["messages"]["minItems"], json!(1));
    let content = schemas["ChatContent"]["oneOf"].as_array().unwrap();
    let kinds: Vec<&Value> = content.iter().map(|c| &c["type"]).collect();
    assert_eq!(kinds, vec![&json!("string"), &json!("array")]);
    assert_eq!(schemas["ChatContentPart"]["required"], json!(["type"]));
    let chat = &doc["paths"]["/api/v1/ai/chat/completions"]["post"];
    let media = chat["responses"]["200"]["content"].as_object().unwrap();
    assert!(media.contains_key("application/json") && media.contains_key("text/event-stream"));
    let logout = &doc["paths"]["/api/v1/auth/logout"]["post"]["requestBody"];
    assert_ne!(logout["required"], json!(true), "{logout}");
    let create = &doc["paths"]["/api/v1/auth/api-keys"]["post"];
    let params = create["parameters"].as_array().unwrap();
    assert!(params
        .iter()
        .any(|p| p["name"] == json!("Idempotency-Key") && p["in"] == json!("header")));
    // An admin's PATCH of a user changes at least one field, neither null (a schemathesis run
    // found `maxProperties: 1` where `minProperties` was meant: two fields are allowed).
    let update_user = &schemas["UpdateUserRequest"];
    assert_eq!(update_user["minProperties"], json!(1), "{update_user}");
    // The audit filters accept exactly the actions the trail records.
    for path in ["/api/v1/audit", "/api/v1/admin/audit"] {
        let params = doc["paths"][path]["get"]["parameters"].as_array().unwrap();
        let action = params.iter().find(|p| p["name"] == json!("action")).unwrap();
        let pattern = action["schema"]["pattern"].as_str().unwrap_or_default();
        assert_eq!(pattern, aigw_domain::AuditAction::pattern(), "{path}");
    }
    assert!(update_user.get("maxProperties").is_none(), "{update_user}");
    assert_eq!(update_user["properties"]["disabled"]["type"], json!("boolean"), "{update_user}");
    let role = &update_user["properties"]["role"];
    assert!(role.to_string().contains("RoleName") && !role.to_string().contains("null"), "{role}");
}

async fn the_validator_agrees_with_the_schema(backend: Backend) {
    let app = spawn_app(backend).await;
    let user = app.new_user("schema").await;
    let key = app.key(&user.token, &["ai_gateway"]).await;
    let chat = |m: Value| json!({"model": "echo", "messages": [m]});
    for (message, field) in [
        (json!({"role": "", "content": "x"}), "messages[0].role"),
        (json!({"role": "root", "content": "x"}), "messages[0].role"),
        (json!({"role": "user", "content": [null, null]}), "messages[0].content[0]"),
        (json!({"role": "user", "content": [{"text": "x"}]}), "messages[0].content[0].type"),
        (json!({"role": "user", "content": 5}), "messages[0].content"),
    ] {
        app.chat(Auth::Bearer(&key), &chat(message)).await.invalid(field);
    }
    app.chat(Auth::Bearer(&key), &json!({"model": "echo", "messages": []}))
        .await
        .invalid("messages");
    for role in ["system", "developer", "user", "assistant", "tool"] {
        let reply = app
            .chat(
                Auth::Bearer(&key),
                &chat(json!({"role": role, "content": [{"type": "text", "text": "hi"}]})),
            )
            .await;
        assert_eq!(reply.status, 200, "{role}: {}", reply.text);
    }
    // Logout with no body, and with a JSON null body, ends the current session.
    app.logout(&user.token, Some(&Value::Null)).await.data(200);
}

/// Every operation of the document asks for a credential exactly when it says so: called with
/// none (path parameters filled with an id that names nothing, a JSON body of `{}`), one with
/// `security` answers 401 `unauthorized` with `WWW-Authenticate`, before it reads its body
/// or looks anything up; one without it answers something else.
async fn a_credential_is_asked_for_exactly_where_documented(backend: Backend) {
    let app = spawn_app_with(backend, |s| s.rate_limit.enabled = false).await;
    let doc = app.get("/api/v1/openapi.json", Auth::None).await.json();
    let (mut secured, mut public) = (0, 0);
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, operation) in item.as_object().unwrap() {
            let Ok(method) = reqwest::Method::from_bytes(method.to_uppercase().as_bytes()) else {
                continue;
            };
            let uri: String = path
                .split('/')
                .map(
                    |s| if s.starts_with('{') { "01a228e4-0000-7000-8000-000000000000" } else { s },
                )
                .collect::<Vec<_>>()
                .join("/");
            let mut request = app.request(method.clone(), &uri, Auth::None);
            if operation.get("requestBody").is_some() {
                request = request.header("content-type", "application/json").body("{}");
            }
            let reply = app.send(request).await;
            let documented = operation["security"].as_array().is_some_and(|s| !s.is_empty());
            if documented {
                assert_eq!(reply.status, 401, "{method} {path}: {}", reply.text);
                assert_eq!(reply.json()["error"]["code"], json!("unauthorized"), "{method} {path}");
                assert!(reply.header("www-authenticate").is_some(), "{method} {path}");
                secured += 1;
            } else {
                assert_ne!(reply.status, 401, "{method} {path}: {}", reply.text);
                public += 1;
            }
        }
    }
    assert!(secured > 60 && public > 10, "{secured} secured and {public} public operations");
}
