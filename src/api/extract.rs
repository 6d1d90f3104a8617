//! Extractors whose rejection is the API's error: handlers take their input through these, and
//! every malformed request is answered the same way whichever route it is sent to.
//!
//! In: the request (headers, body, query string, path parameters) and the shared state (the
//! configured body limit). Out: the checked input, or an [`ApiError`]: 415 for a Content-Type
//! that is not JSON, 413 over `[api] max_body_bytes`, 400 naming the JSON path of a bad field or
//! the query string's fault, 404 for a path identifier that cannot name anything (a uuid that is
//! not one, a migration id that is not an integer).

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, PathRejection, QueryRejection};
use axum::extract::{FromRequest, FromRequestParts, Path, Query, Request};
use axum::http::request::Parts;
use axum::http::{header, HeaderMap, StatusCode};
use serde::de::DeserializeOwned;
use serde_json::json;

use super::bodies::parse_body;
use super::error::{ApiError, ErrorCode};
use super::shared::DaemonState;
use crate::echo::{bounded_message, quoted};

/// A request body type: JSON, and what it is called in messages (`a claim`).
pub trait JsonBody: DeserializeOwned {
    /// What the body is, for messages: "the body is empty; expected a JSON object (a claim)".
    const WHAT: &'static str;
}

/// A JSON body of type `T`: Content-Type JSON (or none), within the size limit, parsed with
/// every error naming its field.
#[derive(Debug, Clone)]
pub struct ApiJson<T>(pub T);

/// A JSON body of type `T`, or `T::default()` when the body is empty (then whatever the
/// Content-Type says).
#[derive(Debug, Clone)]
pub struct OptionalJson<T>(pub T);

/// The query string as `T`.
#[derive(Debug, Clone)]
pub struct ApiQuery<T>(pub T);

/// The path parameters as `T`.
#[derive(Debug, Clone)]
pub struct ApiPath<T>(pub T);

/// The instance uuid of the path (its `{instance_uuid}` or `{uuid}`), checked and hyphenated
/// lowercase; the request's span records it as `instance_uuid`. One that is not a UUID names no
/// instance: 404.
#[derive(Debug, Clone)]
pub struct InstanceUuid(pub String);

/// The migration id of the path (`{id}`). One that is not an integer names no migration: 404.
#[derive(Debug, Clone, Copy)]
pub struct MigrationId(pub i64);

impl<T: JsonBody> FromRequest<Arc<DaemonState>> for ApiJson<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &Arc<DaemonState>) -> Result<Self, ApiError> {
        check_content_type(req.headers())?;
        let bytes = Bytes::from_request(req, state)
            .await
            .map_err(|r| body_error(r, state))?;
        parse_body(&bytes, T::WHAT).map(ApiJson)
    }
}

impl<T: JsonBody + Default> FromRequest<Arc<DaemonState>> for OptionalJson<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &Arc<DaemonState>) -> Result<Self, ApiError> {
        let headers = req.headers().clone();
        let bytes = Bytes::from_request(req, state).await;
        if bytes.as_ref().is_ok_and(|b| b.is_empty()) {
            return Ok(OptionalJson(T::default()));
        }
        check_content_type(&headers)?;
        let bytes = bytes.map_err(|r| body_error(r, state))?;
        parse_body(&bytes, T::WHAT).map(OptionalJson)
    }
}

impl<T: DeserializeOwned + Send, S: Send + Sync> FromRequestParts<S> for ApiQuery<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        let Query(q) = Query::<T>::from_request_parts(parts, state)
            .await
            .map_err(query_error)?;
        Ok(ApiQuery(q))
    }
}

impl<T: DeserializeOwned + Send, S: Send + Sync> FromRequestParts<S> for ApiPath<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        let Path(p) = Path::<T>::from_request_parts(parts, state)
            .await
            .map_err(path_error)?;
        Ok(ApiPath(p))
    }
}

impl<S: Send + Sync> FromRequestParts<S> for InstanceUuid {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        let ApiPath(params) =
            ApiPath::<Vec<(String, String)>>::from_request_parts(parts, state).await?;
        let (field, value) = params
            .into_iter()
            .find(|(name, _)| name == "instance_uuid" || name == "uuid")
            .ok_or_else(|| {
                ApiError::new(
                    ErrorCode::InternalError,
                    "the route has no instance uuid in its path",
                )
            })?;
        recorded_uuid(&value)
            .map(InstanceUuid)
            .ok_or_else(|| no_such(&field, "instance", &value, "a UUID"))
    }
}

impl<S: Send + Sync> FromRequestParts<S> for MigrationId {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        let ApiPath(raw) = ApiPath::<String>::from_request_parts(parts, state).await?;
        let id = raw
            .parse::<i64>()
            .map_err(|_| no_such("id", "migration", &raw, "an integer"))?;
        tracing::Span::current().record("migration_id", id);
        Ok(MigrationId(id))
    }
}

/// A path identifier that cannot name anything here is answered like one that names nothing,
/// 404, as Nova (`GET /servers/None`) and Placement (`GET /resource_providers/None`) answer it;
/// the message says what the identifier has to be, and `details.field` names it.
pub fn no_such(field: &str, what: &str, value: &str, expected: &str) -> ApiError {
    ApiError::new(
        ErrorCode::NotFound,
        format!(
            "no {what} {}: {{{field}}} in the path is not {expected}",
            quoted(value)
        ),
    )
    .with_details(json!({ "field": field }))
}

/// An instance uuid, checked (`field` names it in the error); the request's span records it.
pub fn check_uuid(u: &str, field: &str) -> Result<String, ApiError> {
    recorded_uuid(u).ok_or_else(|| ApiError::invalid(field, format!("{} is not a UUID", quoted(u))))
}

/// `u` hyphenated lowercase, recorded in the request's span; None when it is not a UUID.
fn recorded_uuid(u: &str) -> Option<String> {
    let uuid = uuid::Uuid::parse_str(u).ok()?.hyphenated().to_string();
    tracing::Span::current().record("instance_uuid", uuid.as_str());
    Some(uuid)
}

/// A body is JSON when it says so, or says nothing.
fn check_content_type(headers: &HeaderMap) -> Result<(), ApiError> {
    let Some(ct) = headers.get(header::CONTENT_TYPE) else {
        return Ok(());
    };
    let ct = ct.to_str().unwrap_or("");
    let essence = ct.split(';').next().unwrap_or("").trim();
    if essence.eq_ignore_ascii_case("application/json") || essence.ends_with("+json") {
        Ok(())
    } else {
        Err(ApiError::new(
            ErrorCode::UnsupportedMediaType,
            format!("Content-Type {}: expected application/json", quoted(ct)),
        ))
    }
}

fn body_error(r: BytesRejection, state: &DaemonState) -> ApiError {
    if r.status() == StatusCode::PAYLOAD_TOO_LARGE {
        ApiError::new(
            ErrorCode::PayloadTooLarge,
            format!(
                "the body is larger than {} bytes ([api] max_body_bytes)",
                state.config().api.max_body_bytes
            ),
        )
    } else {
        ApiError::new(
            ErrorCode::BadBody,
            format!("cannot read the body: {}", bounded_message(&r.to_string())),
        )
    }
}

fn query_error(r: QueryRejection) -> ApiError {
    ApiError::new(
        ErrorCode::InvalidRequest,
        format!("query string: {}", bounded_message(&r.body_text())),
    )
}

fn path_error(r: PathRejection) -> ApiError {
    ApiError::new(
        ErrorCode::InvalidRequest,
        format!("path: {}", bounded_message(&r.body_text())),
    )
}

/// `?dry_run=` of a claim or a move, checked (before the body is read: a bad flag is the
/// answer whatever the body).
#[derive(Debug, Clone, Copy)]
pub struct DryRun(pub bool);

impl<S: Send + Sync> FromRequestParts<S> for DryRun {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        let ApiQuery(q) =
            ApiQuery::<super::bodies::DryRunQuery>::from_request_parts(parts, state).await?;
        q.flag().map(DryRun)
    }
}
