//! API errors: every failure is `{"error": {"code", "message", "details"}}` with a fitting
//! status. Codes are stable (scripts match on them); messages are for people.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};

use crate::objects::ObjectError;
use crate::service::ServiceError;
use crate::store::StoreError;
use crate::tracker::ClaimError;

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
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            code,
            message: message.into(),
            details: Value::Null,
        }
    }

    /// 400 `invalid_request` naming a field.
    pub fn invalid(field: &str, message: impl std::fmt::Display) -> ApiError {
        ApiError {
            status: StatusCode::BAD_REQUEST,
            code: "invalid_request",
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

impl From<ClaimError> for ApiError {
    fn from(e: ClaimError) -> ApiError {
        // Messages may quote request content (a RequestSpec's extra specs): bounded.
        let message = crate::echo::bounded_message(&e.to_string());
        match e {
            ClaimError::Refused(r) => ApiError {
                status: StatusCode::CONFLICT,
                code: "claim_refused",
                message,
                details: serde_json::to_value(&*r).unwrap_or(Value::Null),
            },
            ClaimError::Conflict { id, .. } => ApiError {
                status: StatusCode::CONFLICT,
                code: "conflict",
                message,
                details: json!({ "id": id }),
            },
            ClaimError::Invalid { field, .. } => ApiError {
                status: StatusCode::BAD_REQUEST,
                code: "invalid_request",
                message,
                details: json!({ "field": field }),
            },
            ClaimError::NotFound { what, id } => ApiError {
                status: StatusCode::NOT_FOUND,
                code: "not_found",
                message,
                details: json!({ "kind": what, "id": id }),
            },
        }
    }
}

impl From<ServiceError> for ApiError {
    fn from(e: ServiceError) -> ApiError {
        match e {
            ServiceError::Claim(c) => c.into(),
            ServiceError::Store(s) => store_error(&s),
            ServiceError::Unavailable(reason) => ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "store_unavailable",
                format!("rtrackd cannot read its store, so it changes nothing until it can ({reason}); nothing was changed, retry later"),
            ),
            ServiceError::Stopped => ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "shutting_down",
                "rtrackd is shutting down; retry once it is back",
            ),
        }
    }
}

fn store_error(e: &StoreError) -> ApiError {
    ApiError::new(
        StatusCode::INTERNAL_SERVER_ERROR,
        "store_failed",
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
