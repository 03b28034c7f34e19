//! The database going away, PostgreSQL only: clean 503s, no hang, and the
//! service recovers by itself when the database returns. Cached credentials are served for at
//! most `credential_cache.max_feed_lag_ms` (2 s) after the change feed was last read
//! (docs/safeguards.md "Credential cache").

use crate::common;

mod postgres {
    use super::common::*;
    use std::time::{Duration, Instant};

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn database_outage_gives_503_and_recovers() {
        let app = spawn_app_with(Backend::Postgres, |s| {
            s.database.acquire_timeout_secs = 1;
        })
        .await;
        let user = app.new_user("outage").await;
        let key = app.key(&user.token, &["read"]).await;
        app.me(Auth::Bearer(&user.token)).await.data(200);
        pg_set_reachable(&app.database_url, false).await;
        let started = Instant::now();
        // The user and the key were cached by the calls above. A node trusts its caches only
        // while it has read the change feed within `credential_cache.max_feed_lag_ms` (2 s);
        // after that it reads every credential from the database, which is gone: 503 within
        // that bound plus the acquire timeout (1 s), and from then on every time.
        let bound =
            Duration::from_millis(2000) + Duration::from_secs(1) + Duration::from_millis(500);
        for auth in [Auth::Bearer(&user.token), Auth::Raw(&key)] {
            let refused = || async {
                let reply = app.me(auth).await;
                if reply.status == 503 {
                    return Ok(reply);
                }
                reply.data(200);
                Err(started.elapsed())
            };
            let left = bound.saturating_sub(started.elapsed());
            let reply =
                eventually("cached credentials still served into the outage", left, refused).await;
            reply.error(503, "service_unavailable");
        }
        app.me(Auth::Bearer(&user.token)).await.error(503, "service_unavailable");
        app.me(Auth::Bearer(&key)).await.error(503, "service_unavailable");
        app.login_raw(&user.email, PASSWORD).await.error(503, "service_unavailable");
        // A key with one character changed fails its checksum and is refused without any
        // database lookup: 401 even now that the database is gone.
        let mut forged = key.clone().into_bytes();
        let last = forged.len() - 1;
        forged[last] = if forged[last] == b'a' { b'b' } else { b'a' };
        let forged = String::from_utf8(forged).unwrap();
        app.me(Auth::Raw(&forged)).await.unauthorized();
        app.refresh_raw("aigwr_too-short").await.unauthorized();
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "503s must come quickly, took {:?}",
            started.elapsed()
        );
        let ready = app.get("/readyz", Auth::None).await;
        assert_eq!(ready.status, 503, "readyz during the outage: {}", ready.text);
        let health = app.get("/healthz", Auth::None).await;
        assert_eq!(health.status, 200, "healthz is liveness only: {}", health.text);
        // The database returns: service resumes without a restart.
        pg_set_reachable(&app.database_url, true).await;
        let served = || async {
            let reply = app.me(Auth::Bearer(&user.token)).await;
            if reply.status == 200 {
                Ok(())
            } else {
                Err(format!("{} {}", reply.status, reply.text))
            }
        };
        eventually("service did not recover", Duration::from_secs(15), served).await;
        // Nothing acknowledged before the outage was lost.
        app.me(Auth::Bearer(&key)).await.data(200);
        app.login(&user.email, PASSWORD).await;
        let ready = app.get("/readyz", Auth::None).await;
        assert_eq!(ready.status, 200, "{}", ready.text);
    }
}
