//! A browser without a script engine, for the console's tests: it keeps cookies, does not
//! follow redirects, posts forms, and reads what the tests look for in a page's HTML.

use super::{TestApp, User};
use std::collections::BTreeMap;

/// A cookie-keeping client that does not follow redirects.
pub struct Browser<'a> {
    app: &'a TestApp,
    /// The HTTP client (for a request the helpers below do not make).
    pub client: reqwest::Client,
    /// The cookies kept, by name.
    pub jar: BTreeMap<String, String>,
}

/// One answer, with what the tests read of it.
#[derive(Debug)]
pub struct Page {
    pub status: u16,
    pub location: Option<String>,
    pub headers: reqwest::header::HeaderMap,
    pub set_cookies: Vec<String>,
    pub text: String,
}

impl Page {
    /// The answer's header `name` (`""` when absent).
    pub fn header(&self, name: &str) -> &str {
        self.headers.get(name).and_then(|v| v.to_str().ok()).unwrap_or("")
    }

    /// The value of the first hidden `csrf` field.
    pub fn csrf(&self) -> String {
        let start = self.text.find("name=\"csrf\" value=\"").expect("a csrf field") + 19;
        self.text[start..].split('"').next().unwrap().to_owned()
    }

    /// The `Set-Cookie` of `name`.
    pub fn cookie(&self, name: &str) -> Option<&str> {
        self.set_cookies.iter().map(String::as_str).find(|c| c.starts_with(&format!("{name}=")))
    }

    /// The text of the element with id `id` (up to its first tag).
    pub fn element_text(&self, id: &str) -> String {
        let start = self.text.find(&format!("id=\"{id}\"")).expect("the element");
        let after = &self.text[start..];
        after[after.find('>').unwrap() + 1..].split('<').next().unwrap().to_owned()
    }

    /// The `<tag id="id"` element, up to its first closing `</tag>`.
    pub fn element(&self, tag: &str, id: &str) -> &str {
        let start = self
            .text
            .find(&format!("<{tag} id=\"{id}\""))
            .unwrap_or_else(|| panic!("no {tag}#{id} in {}", self.text));
        let rest = &self.text[start..];
        let end = rest.find(&format!("</{tag}>")).unwrap_or(rest.len());
        &rest[..end]
    }

    /// The text that starts with `start` (e.g. `<table id="requests"`), up to the first `end`
    /// after it.
    pub fn section(&self, start: &str, end: &str) -> &str {
        let from = self.text.find(start).unwrap_or_else(|| panic!("no {start}: {}", self.text));
        let rest = &self.text[from..];
        &rest[..rest.find(end).map_or(rest.len(), |i| i + end.len())]
    }

    /// The table row with `attribute="value"`, up to its end.
    pub fn row(&self, attribute: &str, value: &str) -> Option<&str> {
        let start = self.text.find(&format!("<tr {attribute}=\"{value}\""))?;
        let row = &self.text[start..];
        Some(&row[..row.find("</tr>").unwrap_or(row.len())])
    }

    /// The `href` of the `rel="next"` link, unescaped.
    pub fn next_href(&self) -> Option<String> {
        let start = self.text.find("rel=\"next\" href=\"")? + 17;
        let href = self.text[start..].split('"').next()?;
        Some(href.replace("&#x2f;", "/").replace("&amp;", "&").replace("&#x3d;", "="))
    }
}

impl<'a> Browser<'a> {
    /// A browser with no cookies yet.
    pub fn new(app: &'a TestApp) -> Self {
        let client =
            reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap();
        Self { app, client, jar: BTreeMap::new() }
    }

    /// A browser signed in as `user` through the login form.
    pub async fn signed_in(app: &'a TestApp, user: &User) -> Self {
        let mut browser = Self::new(app);
        browser.sign_in(&user.email, &user.password).await;
        browser
    }

    /// Sends the request with the jar's cookies and keeps the cookies of the answer (a
    /// cookie set empty or with `Max-Age=0` leaves the jar).
    pub async fn send(&mut self, builder: reqwest::RequestBuilder) -> Page {
        let cookies: Vec<String> = self.jar.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let builder =
            if cookies.is_empty() { builder } else { builder.header("cookie", cookies.join("; ")) };
        let response = builder.send().await.expect("request failed");
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let set_cookies: Vec<String> =
            headers.get_all("set-cookie").iter().map(|v| v.to_str().unwrap().to_owned()).collect();
        for raw in &set_cookies {
            let cookie = actix_web::cookie::Cookie::parse(raw.clone()).unwrap();
            if cookie.value().is_empty()
                || cookie.max_age() == Some(actix_web::cookie::time::Duration::ZERO)
            {
                self.jar.remove(cookie.name());
            } else {
                self.jar.insert(cookie.name().to_owned(), cookie.value().to_owned());
            }
        }
        let location = headers.get("location").map(|v| v.to_str().unwrap().to_owned());
        let text = response.text().await.unwrap();
        Page { status, location, headers, set_cookies, text }
    }

    pub async fn get(&mut self, path: &str) -> Page {
        let builder = self.client.get(self.app.url(path));
        self.send(builder).await
    }

    pub async fn post(&mut self, path: &str, form: &[(&str, &str)]) -> Page {
        let builder = self.client.post(self.app.url(path)).form(form);
        self.send(builder).await
    }

    /// Posts `form` with `csrf` (the token of the page's forms) as its `csrf` field.
    pub async fn post_with_csrf(&mut self, path: &str, csrf: &str, form: &[(&str, &str)]) -> Page {
        let mut fields = vec![("csrf", csrf)];
        fields.extend_from_slice(form);
        self.post(path, &fields).await
    }

    /// Posts the login form (to land on `/keys`) and answers what came back.
    pub async fn log_in(&mut self, email: &str, password: &str) -> Page {
        self.post("/login", &[("email", email), ("password", password), ("next", "/keys")]).await
    }

    /// Signs in through the login form, asserting it worked (a `303`).
    pub async fn sign_in(&mut self, email: &str, password: &str) {
        let done = self.log_in(email, password).await;
        assert_eq!(done.status, 303, "{}", done.text);
    }

    /// Follows a `303` (asserting it is one, to `location`) and answers the next page.
    pub async fn follow(&mut self, page: &Page, location: &str) -> Page {
        assert_eq!((page.status, page.location.as_deref()), (303, Some(location)), "{}", page.text);
        self.get(location).await
    }
}
