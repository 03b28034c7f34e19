//! The console's stylesheet and script, compiled into the binary and served from this origin
//! (the Content-Security-Policy allows no other). Their URLs carry a digest of their content
//! (`?v=…`), so browsers may keep them for a year.

use actix_web::http::header;
use actix_web::HttpResponse;
use sha2::{Digest, Sha256};
use std::sync::OnceLock;

const CSS: &str = include_str!("../../assets/console.css");
const JS: &str = include_str!("../../assets/console.js");

/// The first 12 hex digits of the SHA-256 of both files: the `v` of their URLs.
pub(crate) fn version() -> &'static str {
    static VERSION: OnceLock<String> = OnceLock::new();
    VERSION.get_or_init(|| {
        let digest = Sha256::new().chain_update(CSS).chain_update(JS).finalize();
        base16ct::lower::encode_string(&digest[..6])
    })
}

fn asset(content_type: &'static str, body: &'static str) -> HttpResponse {
    HttpResponse::Ok()
        .insert_header((header::CONTENT_TYPE, content_type))
        .insert_header((header::CACHE_CONTROL, "public, max-age=31536000, immutable"))
        .insert_header((header::X_CONTENT_TYPE_OPTIONS, "nosniff"))
        .body(body)
}

/// `GET /console/assets/console.css`.
pub(crate) async fn css() -> HttpResponse {
    asset("text/css; charset=utf-8", CSS)
}

/// `GET /console/assets/console.js`.
pub(crate) async fn js() -> HttpResponse {
    asset("text/javascript; charset=utf-8", JS)
}

/// `GET /favicon.ico`: 204, no icon (browsers ask for it on every page; an empty answer,
/// cached for a day, spares them a 404).
pub(crate) async fn favicon() -> HttpResponse {
    HttpResponse::NoContent()
        .insert_header((header::CACHE_CONTROL, "public, max-age=86400"))
        .finish()
}
