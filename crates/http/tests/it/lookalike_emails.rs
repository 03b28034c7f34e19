//! One account per person: e-mail addresses are normalised (NFKC, lower case) and compared by
//! their UTS 39 skeleton, so a look-alike of a registered address (a Cyrillic `а`, a
//! full-width `ａ`) cannot register beside it, logging in with one never enters the other
//! account, and invitations bind the normalised address.

use crate::common;

use aigw_domain::Role;
use aigw_persistence::schema::users;
use aigw_persistence::{DatabaseUrl, DbConnection, Pool, PoolOptions};
use aigw_service::RegistrationMode;
use common::*;
use diesel::prelude::*;
use serde_json::{json, Value};

backend_tests!(
    look_alikes_get_the_duplicate_answer,
    mixed_scripts_are_refused,
    login_matches_the_normalised_address_only,
    concurrent_look_alikes_make_one_account,
    invitations_bind_the_normalised_address,
    existing_accounts_get_their_skeleton_at_start,
);

/// Cyrillic small letters that look like Latin ones.
const CYRILLIC_A: char = '\u{0430}';
const CYRILLIC_ES: char = '\u{0441}';
const CYRILLIC_IE: char = '\u{0435}';

/// `асе` in Cyrillic letters only: one script, the skeleton of Latin `ace`.
fn cyrillic_ace() -> String {
    [CYRILLIC_A, CYRILLIC_ES, CYRILLIC_IE].iter().collect()
}

/// The error of a register with `email`, with `message`, `code` and `details`.
async fn register_error(app: &TestApp, email: &str) -> Value {
    app.register_raw(&json!({"email": email, "password": PASSWORD})).await.invalid("email")
}

async fn look_alikes_get_the_duplicate_answer(backend: Backend) {
    let app = spawn_app(backend).await;
    app.register("ann@example.com", PASSWORD, None).await;
    let duplicate = register_error(&app, "ann@example.com").await;
    assert_eq!(duplicate["details"]["issue"], json!("is already registered"), "{duplicate}");
    // Full-width forms are the plain address (NFKC); case does not count.
    for same in
        ["\u{FF41}nn@example.com", "\u{FF41}\u{FF4E}\u{FF4E}\u{FF20}example.com", "ANN@Example.COM"]
    {
        assert_eq!(register_error(&app, same).await, duplicate, "{same}");
    }
    // An all-Cyrillic look-alike of a registered Latin address: the same answer, no more.
    app.register("ace@example.com", PASSWORD, None).await;
    let duplicate = register_error(&app, "ace@example.com").await;
    let look_alike = format!("{}@example.com", cyrillic_ace());
    assert_eq!(register_error(&app, &look_alike).await, duplicate);
    // And the other way round, and for UTS 39's `rn` / `m`.
    let cyrillic_first = format!("{}@example.org", cyrillic_ace());
    app.register(&cyrillic_first, PASSWORD, None).await;
    assert_eq!(register_error(&app, "ace@example.org").await["details"], duplicate["details"]);
    app.register("modern@example.com", PASSWORD, None).await;
    assert_eq!(register_error(&app, "modem@example.com").await["details"], duplicate["details"]);
    // An address that only shares letters is another person's.
    app.register("anne@example.com", PASSWORD, None).await;
}

async fn mixed_scripts_are_refused(backend: Backend) {
    let app = spawn_app(backend).await;
    for mixed in [
        format!("{CYRILLIC_A}nn@example.com"),
        format!("bob@ex{CYRILLIC_A}mple.com"),
        format!("p{CYRILLIC_A}ypal@example.com"),
    ] {
        let error = register_error(&app, &mixed).await;
        let issue = error["details"]["issue"].as_str().unwrap_or_default();
        assert!(issue.contains("scripts"), "{mixed}: {error}");
        // Whether or not the Latin address exists, the answer is the same.
        app.register(&mixed.replace(CYRILLIC_A, "a"), PASSWORD, None).await;
        assert_eq!(register_error(&app, &mixed).await, error, "{mixed}");
    }
    // One script per part is fine: Cyrillic local part, Latin domain.
    app.register(&format!("{}@example.com", cyrillic_ace()), PASSWORD, None).await;
}

async fn login_matches_the_normalised_address_only(backend: Backend) {
    let app = spawn_app(backend).await;
    let ann = app.register("ann@example.com", PASSWORD, None).await;
    let id = ann["id"].clone();
    for same in
        [" Ann@Example.COM ", "\u{FF21}\u{FF2E}\u{FF2E}@example.com", "\u{FF41}nn@EXAMPLE.com"]
    {
        let data = app.login(same, PASSWORD).await;
        assert_eq!(data["user"]["id"], id, "{same}");
        assert_eq!(data["user"]["email"], json!("ann@example.com"), "{same}");
    }
    // A look-alike with Ann's password is not Ann: the answer of a wrong password.
    let wrong = app.login_raw("ann@example.com", "not the password at all").await;
    wrong.unauthorized();
    for other in [format!("{CYRILLIC_A}nn@example.com"), format!("ann@ex{CYRILLIC_A}mple.com")] {
        let reply = app.login_raw(&other, PASSWORD).await;
        reply.unauthorized();
        assert_eq!(reply.json()["error"], wrong.json()["error"], "{other}");
    }
    app.register("ace@example.com", PASSWORD, None).await;
    app.login_raw(&format!("{}@example.com", cyrillic_ace()), PASSWORD).await.unauthorized();
}

async fn concurrent_look_alikes_make_one_account(backend: Backend) {
    let app = spawn_app(backend).await;
    for round in 0..4 {
        let latin = format!("ace{round}@example.com");
        let spellings = [
            latin.clone(),
            format!("{}{round}@example.com", cyrillic_ace()),
            format!("\u{FF41}ce{round}@example.com"),
            latin.to_uppercase(),
        ];
        let bodies: Vec<Value> =
            spellings.iter().map(|email| json!({"email": email, "password": PASSWORD})).collect();
        let replies =
            futures_util::future::join_all(bodies.iter().map(|body| app.register_raw(body))).await;
        let created = replies.iter().filter(|r| r.status == 201).count();
        assert_eq!(created, 1, "round {round}: {replies:?}");
        for reply in replies.iter().filter(|r| r.status != 201) {
            assert_eq!(reply.invalid("email")["details"]["issue"], json!("is already registered"));
        }
    }
}

async fn invitations_bind_the_normalised_address(backend: Backend) {
    let app = spawn_app_with(backend, |s| s.auth.registration = RegistrationMode::Invite).await;
    let dir = tempfile::tempdir().unwrap();
    let settings = test_settings(dir.path().to_owned(), app.database_url.clone());
    aigw_http::operator::create_user(
        &settings,
        "boss@example.com",
        None,
        Role::Admin,
        PASSWORD.to_owned(),
    )
    .await
    .unwrap();
    let admin = app.login("boss@example.com", PASSWORD).await["token"].as_str().unwrap().to_owned();
    let invite = |email: String| {
        let admin = admin.clone();
        let app = &app;
        async move {
            let body = json!({"email": email});
            let data = app.post("/api/v1/admin/invitations", Auth::Bearer(&admin), &body).await;
            data.data(201)
        }
    };
    let register = |email: String, invitation: &Value| {
        let body = json!({"email": email, "password": PASSWORD, "invitation": invitation});
        let app = &app;
        async move { app.register_raw(&body).await }
    };
    // An invitation for a full-width address is for the plain one.
    let created = invite("\u{FF41}nn@example.com".to_owned()).await;
    assert_eq!(created["email"], json!("ann@example.com"), "{created}");
    register("ANN@example.com".to_owned(), &created["invitation"]).await.data(201);

    // A look-alike cannot use another address's invitation ...
    let for_ace = invite("ace@example.com".to_owned()).await;
    let look_alike = format!("{}@example.com", cyrillic_ace());
    register(look_alike.clone(), &for_ace["invitation"]).await.invalid("invitation");
    register("ace@example.com".to_owned(), &for_ace["invitation"]).await.data(201);
    // ... nor register with its own once the original is registered: the duplicate answer,
    // and the invitation is not spent.
    let own = invite(look_alike.clone()).await;
    let refused = register(look_alike.clone(), &own["invitation"]).await;
    assert_eq!(refused.invalid("email")["details"]["issue"], json!("is already registered"));
    // A mixed-script address cannot even be invited.
    let body = json!({"email": format!("{CYRILLIC_A}nn@example.com")});
    app.post("/api/v1/admin/invitations", Auth::Bearer(&admin), &body).await.invalid("email");
}

/// Runs `f` on a connection to the database at `url`, outside the server.
async fn with_db<T: Send + 'static>(
    url: &str,
    f: impl FnOnce(&mut DbConnection) -> T + Send + 'static,
) -> T {
    let url = DatabaseUrl::parse(url).unwrap();
    tokio::task::spawn_blocking(move || {
        let pool = Pool::new(&url, &PoolOptions::default()).unwrap();
        f(&mut pool.dedicated_connection().unwrap())
    })
    .await
    .unwrap()
}

async fn existing_accounts_get_their_skeleton_at_start(backend: Backend) {
    let app = spawn_app(backend).await;
    let donor = app.new_user("donor").await;
    // Rows as an older aigw wrote them, oldest first: lower-cased only, no skeleton.
    let legacy = [
        "ace@example.com".to_owned(),
        format!("{}@example.com", cyrillic_ace()),
        "\u{FF43}arl@example.com".to_owned(),
        "\u{FF42}ob@example.com".to_owned(),
        "bob@example.com".to_owned(),
    ];
    let ids = with_db(&app.database_url, move |conn| {
        let hash: String = users::table
            .filter(users::email.eq(&donor.email))
            .select(users::password_hash)
            .first(conn)
            .unwrap();
        let now = chrono::Utc::now().naive_utc();
        let mut ids = Vec::new();
        for email in legacy {
            let id = uuid::Uuid::now_v7().to_string();
            diesel::insert_into(users::table)
                .values((
                    users::id.eq(&id),
                    users::email.eq(&email),
                    users::name.eq("legacy"),
                    users::role.eq("user"),
                    users::password_hash.eq(&hash),
                    users::created_at.eq(now),
                    users::updated_at.eq(now),
                ))
                .execute(conn)
                .unwrap();
            ids.push(id);
        }
        ids
    })
    .await;
    // A node starting on the database fills what it can.
    let sibling = app.spawn_sibling(|_| {}).await;
    let rows: Vec<(String, Option<String>)> = with_db(&app.database_url, move |conn| {
        ids.iter()
            .map(|id| {
                users::table
                    .find(id)
                    .select((users::email, users::email_skeleton))
                    .first(conn)
                    .unwrap()
            })
            .collect()
    })
    .await;
    let skeleton = |email: &str| Some(aigw_domain::email_skeleton(email));
    // The oldest of two look-alikes keeps its skeleton; the later one keeps none.
    assert_eq!(rows[0], ("ace@example.com".to_owned(), skeleton("ace@example.com")));
    assert_eq!(rows[1], (format!("{}@example.com", cyrillic_ace()), None));
    // A full-width address is rewritten to its normalised form ...
    assert_eq!(rows[2], ("carl@example.com".to_owned(), skeleton("carl@example.com")));
    // ... unless another row already has that form: then it stays as it was.
    assert_eq!(rows[3], ("\u{FF42}ob@example.com".to_owned(), None));
    assert_eq!(rows[4], ("bob@example.com".to_owned(), skeleton("bob@example.com")));
    // The rewritten account logs in by any form of its address; look-alikes of the filled
    // ones cannot register.
    let carl = sibling.login("\u{FF43}ARL@example.com", PASSWORD).await;
    assert_eq!(carl["user"]["email"], json!("carl@example.com"));
    for taken in ["ace@example.com", "\u{FF41}ce@example.com"] {
        let error = register_error(&sibling, taken).await;
        assert_eq!(error["details"]["issue"], json!("is already registered"), "{taken}");
    }
    drop(sibling);
}
