//! The web dashboard, on the admin endpoint: static files embedded in the
//! crate (no build step, no Node), drawn in the browser from the same
//! commands `saga --url` runs (`POST /v1/command`, the `--json` schema).
//!
//! - `/`: the instance list, with filters by status, workflow and id,
//!   paging, and a refresh every 2 seconds.
//! - `/#/instance/ID`: one instance: its timeline as a chart (calls as
//!   bars on a time axis, retries marked, each compensation beside the
//!   call it undid, numbered in the order the rollback ran), its calls with
//!   their inputs, outputs, events and errors, its rollback, and its error
//!   beside the rollback's outcome; buttons for the control calls, each
//!   confirmed and sent with the token typed in the header.

use axum::http::header;
use axum::response::{IntoResponse, Response};

const INDEX: &str = include_str!("dashboard/index.html");
const SCRIPT: &str = include_str!("dashboard/app.js");
const STYLE: &str = include_str!("dashboard/app.css");

/// `GET /`: the page.
pub(crate) async fn index() -> Response {
    file("text/html; charset=utf-8", INDEX)
}

/// `GET /dashboard/app.js`.
pub(crate) async fn script() -> Response {
    file("text/javascript; charset=utf-8", SCRIPT)
}

/// `GET /dashboard/app.css`.
pub(crate) async fn style() -> Response {
    file("text/css; charset=utf-8", STYLE)
}

fn file(content_type: &'static str, body: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CACHE_CONTROL, "no-cache"),
            // The page loads only its own files and talks only to this endpoint.
            (
                header::CONTENT_SECURITY_POLICY,
                "default-src 'self'; style-src 'self'; script-src 'self'; connect-src 'self'; img-src 'self' data:",
            ),
        ],
        body,
    )
        .into_response()
}
