//! Error replies: `{"error": "...", "errors": [...]}` with a status code, and how controller
//! and configuration errors map to them.

use crate::config::ConfigError;
use crate::controller::ControlError;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use spillway_api::types::{ConfigProblem, ErrorReply};

/// An error reply: `{"error": "...", "errors": [...]}` with a status code.
#[derive(Debug)]
pub(super) struct HttpError {
    status: StatusCode,
    body: ErrorReply,
}

impl HttpError {
    pub(super) fn new(status: StatusCode, message: impl Into<String>) -> HttpError {
        HttpError { status, body: ErrorReply { error: message.into(), errors: Vec::new() } }
    }

    pub(super) fn bad_request(message: impl Into<String>) -> HttpError {
        HttpError::new(StatusCode::BAD_REQUEST, message)
    }
}

impl IntoResponse for HttpError {
    fn into_response(self) -> Response {
        (self.status, Json(self.body)).into_response()
    }
}

impl From<ControlError> for HttpError {
    fn from(e: ControlError) -> HttpError {
        match e {
            ControlError::Config(e) => config_error(e),
            ControlError::NoSuchBackend(_) => HttpError::new(StatusCode::NOT_FOUND, e.to_string()),
            ControlError::State(_) => {
                HttpError::new(StatusCode::UNPROCESSABLE_ENTITY, e.to_string())
            }
        }
    }
}

/// A rejected configuration: 400 with the whole message (file, line, field, reason) and the
/// problems one by one.
pub(super) fn config_error(e: ConfigError) -> HttpError {
    let errors = match &e {
        ConfigError::Io { .. } => Vec::new(),
        ConfigError::Parse { field, location, message, .. } => vec![ConfigProblem {
            field: field.clone(),
            line: location.map(|l| l.0),
            column: location.map(|l| l.1),
            message: message.clone(),
        }],
        ConfigError::Invalid { errors, .. } => errors
            .iter()
            .map(|f| ConfigProblem {
                field: f.field.clone(),
                line: f.location.map(|l| l.0),
                column: f.location.map(|l| l.1),
                message: f.message.clone(),
            })
            .collect(),
    };
    HttpError {
        status: StatusCode::BAD_REQUEST,
        body: ErrorReply { error: format!("configuration rejected, nothing changed: {e}"), errors },
    }
}

#[cfg(test)]
impl HttpError {
    /// The status and the message, for tests of what a request is refused with.
    pub(super) fn parts(&self) -> (StatusCode, &str) {
        (self.status, &self.body.error)
    }
}
