//! Cursor paging of the lists the use cases answer (administration, audit, teams): the
//! request's `limit` and `cursor`, and the page cut from rows fetched one beyond the limit.

use aigw_domain::FieldError;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;

/// Items per page when `limit` is absent.
pub const DEFAULT_PAGE_LIMIT: i64 = 50;
/// Largest accepted `limit`.
pub const MAX_PAGE_LIMIT: i64 = 200;
/// One page of a cursor-paged list, newest first; `next_cursor` is `None` on the last page.
#[derive(Debug, Clone)]
pub struct Page<T> {
    /// The items.
    pub items: Vec<T>,
    /// Opaque cursor of the next page.
    pub next_cursor: Option<String>,
}

/// The paging parameters of a list request, as given in the query (unvalidated).
#[derive(Debug, Clone, Default)]
pub struct PageRequest {
    /// `limit`: 1 to [`MAX_PAGE_LIMIT`] (default [`DEFAULT_PAGE_LIMIT`]).
    pub limit: Option<String>,
    /// `cursor`: the `next_cursor` of the previous page.
    pub cursor: Option<String>,
}

/// Validated paging: how many items and after which id.
#[derive(Debug, Clone)]
pub(crate) struct Paging {
    pub(crate) limit: i64,
    pub(crate) before: Option<String>,
}

impl PageRequest {
    /// Validates `limit` and decodes `cursor`.
    ///
    /// # Errors
    /// [`FieldError`] on `limit` (not an integer from 1 to [`MAX_PAGE_LIMIT`]) or `cursor`
    /// (not one this service issued).
    pub(crate) fn parse(&self) -> Result<Paging, FieldError> {
        let limit = match self.limit.as_deref() {
            None => DEFAULT_PAGE_LIMIT,
            Some(raw) => raw
                .trim()
                .parse::<i64>()
                .ok()
                .filter(|n| (1..=MAX_PAGE_LIMIT).contains(n))
                .ok_or_else(|| {
                    FieldError::new(
                        "limit",
                        format!("must be an integer from 1 to {MAX_PAGE_LIMIT}"),
                    )
                })?,
        };
        let before = self.cursor.as_deref().map(decode_id_cursor).transpose()?;
        Ok(Paging { limit, before })
    }
}

/// The cursor after the item with id `id`: base64url of `id:<id>`.
pub(crate) fn encode_id_cursor(id: &str) -> String {
    URL_SAFE_NO_PAD.encode(format!("id:{id}"))
}

fn decode_id_cursor(raw: &str) -> Result<String, FieldError> {
    let bad = || FieldError::new("cursor", "is not a cursor from a previous page");
    let text = URL_SAFE_NO_PAD.decode(raw.trim()).ok().and_then(|b| String::from_utf8(b).ok());
    let id = text.as_deref().and_then(|t| t.strip_prefix("id:")).ok_or_else(bad)?;
    uuid::Uuid::parse_str(id).map_err(|_| bad())?;
    Ok(id.to_owned())
}

/// Cuts `rows` (fetched with `limit + 1`) to a page.
pub(crate) fn page_of<R, T>(
    mut rows: Vec<R>,
    limit: i64,
    id: fn(&R) -> &str,
    view: impl Fn(&R) -> T,
) -> Page<T> {
    let limit = usize::try_from(limit).unwrap_or(0);
    let more = rows.len() > limit;
    rows.truncate(limit);
    let next_cursor = more.then(|| rows.last().map(|r| encode_id_cursor(id(r)))).flatten();
    Page { items: rows.iter().map(view).collect(), next_cursor }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_round_trip_and_garbage_is_refused() {
        let id = "01a1fb7f-0100-733f-9984-2509643042fa";
        let request = PageRequest { limit: Some("2".into()), cursor: Some(encode_id_cursor(id)) };
        let paging = request.parse().map(|p| (p.limit, p.before));
        assert_eq!(paging.ok(), Some((2, Some(id.to_owned()))));
        for bad in ["", "x", "aWQ6bm90LWEtdXVpZA", &URL_SAFE_NO_PAD.encode(id)] {
            let request = PageRequest { limit: None, cursor: Some(bad.into()) };
            assert_eq!(request.parse().err().map(|e| e.field), Some("cursor".into()), "{bad}");
        }
        for bad in ["0", "201", "-1", "ten", "1.5"] {
            let request = PageRequest { limit: Some(bad.into()), cursor: None };
            assert_eq!(request.parse().err().map(|e| e.field), Some("limit".into()), "{bad}");
        }
    }
}
