//! API errors: every failure is `{"error": {"code", "message", "details"}}` with a fitting
//! status. Codes are stable (scripts match on them); messages are for people.
//!
//! In: the tracker's [`ClaimError`]s, the service's [`ServiceError`]s (a store failure among them),
//! [`ObjectError`]s from decoding, and the routes' own checks. Out: an [`ApiError`] with its
//! [`ErrorCode`] (status and stable string) and its JSON body; [`ErrorCode::ALL`] is the table the
//! documents are written from.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};

use crate::objects::ObjectError;
use crate::service::ServiceError;
use crate::store::StoreError;
use crate::tracker::ClaimError;

/// Every error code the API answers with: its status, its stable string, and when it is
/// answered (the OpenAPI document and `docs/api.md` are written from this table).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorCode {
    /// A bad value or an unknown field (the message names the field).
    InvalidRequest,
    /// The body is not JSON.
    MalformedJson,
    /// The body cannot be read.
    BadBody,
    /// The body is over `[api] max_body_bytes`.
    PayloadTooLarge,
    /// `Content-Type` is not JSON.
    UnsupportedMediaType,
    /// The peer is neither root nor in the socket group.
    Forbidden,
    /// No such claim, migration, instance or device, or a path identifier that cannot name one.
    NotFound,
    /// No such route.
    NoSuchRoute,
    /// The route takes other methods.
    MethodNotAllowed,
    /// Conflicts with what is tracked.
    Conflict,
    /// Does not fit.
    ClaimRefused,
    /// The commit failed; nothing was changed.
    StoreFailed,
    /// The store cannot be read after a failed commit; nothing is changed until it can.
    StoreUnavailable,
    /// The disk holding the store is full; nothing was changed.
    InsufficientStorage,
    /// Shutting down.
    ShuttingDown,
    /// No probe has completed yet.
    NotReady,
    /// The request ran longer than `[api] request_timeout_s`.
    Timeout,
    /// A failure inside rtrackd.
    InternalError,
}

impl ErrorCode {
    /// Every code, in the order the documents list them.
    pub const ALL: &'static [ErrorCode] = &[
        ErrorCode::InvalidRequest,
        ErrorCode::MalformedJson,
        ErrorCode::BadBody,
        ErrorCode::PayloadTooLarge,
        ErrorCode::UnsupportedMediaType,
        ErrorCode::Forbidden,
        ErrorCode::NotFound,
        ErrorCode::NoSuchRoute,
        ErrorCode::MethodNotAllowed,
        ErrorCode::Conflict,
        ErrorCode::ClaimRefused,
        ErrorCode::StoreFailed,
        ErrorCode::StoreUnavailable,
        ErrorCode::InsufficientStorage,
        ErrorCode::ShuttingDown,
        ErrorCode::NotReady,
        ErrorCode::Timeout,
        ErrorCode::InternalError,
    ];

    /// The stable string scripts match on.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::InvalidRequest => "invalid_request",
            ErrorCode::MalformedJson => "malformed_json",
            ErrorCode::BadBody => "bad_body",
            ErrorCode::PayloadTooLarge => "payload_too_large",
            ErrorCode::UnsupportedMediaType => "unsupported_media_type",
            ErrorCode::Forbidden => "forbidden",
            ErrorCode::NotFound => "not_found",
            ErrorCode::NoSuchRoute => "no_such_route",
            ErrorCode::MethodNotAllowed => "method_not_allowed",
            ErrorCode::Conflict => "conflict",
            ErrorCode::ClaimRefused => "claim_refused",
            ErrorCode::StoreFailed => "store_failed",
            ErrorCode::StoreUnavailable => "store_unavailable",
            ErrorCode::InsufficientStorage => "insufficient_storage",
            ErrorCode::ShuttingDown => "shutting_down",
            ErrorCode::NotReady => "not_ready",
            ErrorCode::Timeout => "timeout",
            ErrorCode::InternalError => "internal_error",
        }
    }

    /// The HTTP status it is answered with.
    pub fn status(self) -> StatusCode {
        match self {
            ErrorCode::InvalidRequest | ErrorCode::MalformedJson | ErrorCode::BadBody => {
                StatusCode::BAD_REQUEST
            }
            ErrorCode::PayloadTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            ErrorCode::UnsupportedMediaType => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            ErrorCode::Forbidden => StatusCode::FORBIDDEN,
            ErrorCode::NotFound | ErrorCode::NoSuchRoute => StatusCode::NOT_FOUND,
            ErrorCode::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            ErrorCode::Conflict | ErrorCode::ClaimRefused => StatusCode::CONFLICT,
            ErrorCode::StoreFailed | ErrorCode::InternalError => StatusCode::INTERNAL_SERVER_ERROR,
            ErrorCode::InsufficientStorage => StatusCode::INSUFFICIENT_STORAGE,
            ErrorCode::StoreUnavailable
            | ErrorCode::ShuttingDown
            | ErrorCode::NotReady
            | ErrorCode::Timeout => StatusCode::SERVICE_UNAVAILABLE,
        }
    }
}

/// An error answer.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    /// HTTP status.
    pub status: StatusCode,
    /// Stable code, e.g. `claim_refused`.
    pub code: &'static str,
    /// What happened and what was expected.
    pub message: String,
    /// Structured details (a refusal's shortfalls...), or null.
    pub details: Value,
}

impl ApiError {
    /// An error without details.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> ApiError {
        ApiError {
            status: code.status(),
            code: code.as_str(),
            message: message.into(),
            details: Value::Null,
        }
    }

    /// 400 `invalid_request` naming a field.
    pub fn invalid(field: &str, message: impl std::fmt::Display) -> ApiError {
        ApiError {
            status: ErrorCode::InvalidRequest.status(),
            code: ErrorCode::InvalidRequest.as_str(),
            message: format!("{field}: {message}"),
            details: json!({ "field": field }),
        }
    }

    /// With details.
    pub fn with_details(mut self, details: Value) -> ApiError {
        self.details = details;
        self
    }

    /// The JSON body.
    pub fn body(&self) -> Value {
        json!({
            "error": {
                "code": self.code,
                "message": self.message,
                "details": self.details,
            }
        })
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} {}: {}",
            self.status.as_u16(),
            self.code,
            self.message
        )
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.status, axum::Json(self.body())).into_response()
    }
}

/// The API's code for a tracker error: the one place a tracker error becomes an API code (the
/// answer, the metrics' outcome label and the log's `code` all take it from here).
pub fn claim_error_code(e: &ClaimError) -> ErrorCode {
    match e {
        ClaimError::Refused(_) => ErrorCode::ClaimRefused,
        ClaimError::Conflict { .. } => ErrorCode::Conflict,
        ClaimError::Invalid { .. } => ErrorCode::InvalidRequest,
        ClaimError::NotFound { .. } => ErrorCode::NotFound,
    }
}

impl From<ClaimError> for ApiError {
    fn from(e: ClaimError) -> ApiError {
        // Messages may quote request content (a RequestSpec's extra specs): bounded.
        let message = crate::echo::bounded_message(&e.to_string());
        let code = claim_error_code(&e);
        let details = match e {
            ClaimError::Refused(r) => serde_json::to_value(&*r).unwrap_or(Value::Null),
            ClaimError::Conflict { id, .. } => json!({ "id": id }),
            ClaimError::Invalid { field, .. } => json!({ "field": field }),
            ClaimError::NotFound { what, id } => json!({ "kind": what, "id": id }),
        };
        ApiError {
            status: code.status(),
            code: code.as_str(),
            message,
            details,
        }
    }
}

impl From<ServiceError> for ApiError {
    fn from(e: ServiceError) -> ApiError {
        match e {
            ServiceError::Claim(c) => c.into(),
            ServiceError::Store(s) => store_error(&s),
            ServiceError::Unavailable(reason) => ApiError::new(ErrorCode::StoreUnavailable,
                format!("rtrackd cannot read its store, so it changes nothing until it can ({reason}); nothing was changed, retry later"),
            ),
            ServiceError::Stopped => ApiError::new(ErrorCode::ShuttingDown,
                "rtrackd is shutting down; retry once it is back",
            ),
        }
    }
}

fn store_error(e: &StoreError) -> ApiError {
    let code = match e {
        StoreError::Full { .. } => ErrorCode::InsufficientStorage,
        _ => ErrorCode::StoreFailed,
    };
    ApiError::new(
        code,
        format!("{e}; nothing was changed, the request can be retried"),
    )
}

impl From<ObjectError> for ApiError {
    fn from(e: ObjectError) -> ApiError {
        ApiError::invalid(
            &crate::echo::bounded(&e.path),
            crate::echo::bounded_message(&e.message),
        )
    }
}
