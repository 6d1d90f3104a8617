//! PCI routes: the tracked devices, the release of a one-time-use device, and devices for a
//! port attached to (or detached from) a running instance.
//!
//! In: `{"pci_requests": <InstancePCIRequests primitive>}` to attach, an instance uuid and a
//! request id to detach, a PCI address to release. Out: the devices given (201, or 200 when the
//! same requests were attached already), the detach or release acknowledged once committed, or
//! an [`ApiError`] (`claim_refused` with every pool considered, `conflict`, `not_found`...).

use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, PathRejection};
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::Json;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::super::error::ApiError;
use super::*;
use crate::echo::bounded;
use crate::objects::pci_request::InstancePCIRequests;
use crate::objects::Versioned;
use crate::probes::pci::PciAddress;
use crate::tracker::request::pci_requests_from_object;

/// `POST /v1/instances/{uuid}/pci-requests`: the port's requests.
#[derive(Debug, Clone, Default, Deserialize, Serialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = AttachRequest)]
pub struct AttachBody {
    /// An InstancePCIRequests primitive (nova_object.name = InstancePCIRequests) holding the
    /// port's requests: `requester_id` set, no `alias_name`, Nova's `request_id`.
    #[schema(value_type = Object)]
    pub pci_requests: Value,
}

/// `GET /v1/pci-devices`: every tracked device with its state, holder and provider.
pub async fn list_pci_devices(State(state): St) -> ApiResult {
    let st = state.clone();
    let devices = blocking(move || {
        Ok(st.service.read(|t| {
            let providers = t.pci_provider_uuids();
            t.state()
                .devices
                .values()
                .map(|d| {
                    let provider = providers
                        .get(&d.parent_addr.unwrap_or(d.address))
                        .or_else(|| providers.get(&d.address));
                    json!({
                        "address": d.address, "vendor_id": d.vendor_id, "product_id": d.product_id,
                        "dev_type": d.dev_type.as_str(), "numa_node": d.numa_node,
                        "parent_addr": d.parent_addr, "status": d.status.as_str(),
                        "instance_uuid": d.owner.as_ref().map(|o| &o.instance_uuid),
                        "request_id": d.owner.as_ref().and_then(|o| o.request_id.as_ref()),
                        "one_time_use": d.one_time_use(),
                        "resource_provider_uuid": provider,
                    })
                })
                .collect::<Vec<Value>>()
        }))
    })
    .await?;
    Ok(Json(json!({"pci_devices": devices})).into_response())
}

/// `POST /v1/pci-devices/{address}/release`: a one-time-use device reserved after use becomes
/// available again, and its provider's inventory unreserved.
pub async fn release_pci_device(
    State(state): St,
    p: Result<Path<String>, PathRejection>,
) -> ApiResult {
    let Path(raw) = p.map_err(path_error)?;
    let address = PciAddress::parse(&raw).ok_or_else(|| {
        ApiError::invalid(
            "address",
            format!(
                "{} is not a PCI address (dddd:bb:ss.f)",
                crate::echo::quoted(&raw)
            ),
        )
    })?;
    let st = state.clone();
    blocking(move || {
        let r = st.service.release_pci_device(&address);
        match &r {
            Ok(()) => tracing::info!(target: "rtrack::claims", operation = "release", device = %address, "one-time-use device released"),
            Err(e) => tracing::info!(target: "rtrack::claims", operation = "release", device = %address, error = %e, "release refused"),
        }
        r.map_err(ApiError::from)
    })
    .await?;
    Ok(Json(json!({"address": address, "status": "available"})).into_response())
}

/// `POST /v1/instances/{uuid}/pci-requests`: devices for ports attached to a running instance.
pub async fn attach_pci(
    State(state): St,
    p: Result<Path<String>, PathRejection>,
    headers: axum::http::HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult {
    let Path(raw) = p.map_err(path_error)?;
    let uuid = check_uuid(&raw, "uuid")?;
    let body: AttachBody = json_body(&state, &headers, body, "an attach request")?;
    // Strings bounded as inside a claim's request spec, where the same requests come.
    super::super::bodies::check_spec_strings(&body.pci_requests, "pci_requests")?;
    let reqs =
        Versioned::<InstancePCIRequests>::from_primitive(&body.pci_requests).map_err(|e| {
            ApiError::invalid(
                "pci_requests",
                format!(
                    "{}: {}",
                    bounded(&e.path),
                    crate::echo::bounded_message(&e.message)
                ),
            )
        })?;
    if let Some(owner) = reqs.obj.instance_uuid.get() {
        if owner.to_ascii_lowercase() != uuid {
            return Err(ApiError::invalid(
                "pci_requests.instance_uuid",
                format!(
                    "{} is another instance than the path's {uuid}",
                    bounded(owner)
                ),
            ));
        }
    }
    let requests =
        pci_requests_from_object(&reqs, &uuid, None, "pci_requests").map_err(ApiError::from)?;
    let st = state.clone();
    let u = uuid.clone();
    let outcome = blocking(move || {
        let r = st.service.attach_pci(&u, &requests);
        match &r {
            Ok(o) => tracing::info!(target: "rtrack::claims", operation = "attach_pci", instance = %u, existing = o.existing, pci_devices = o.assignments.len(), "PCI devices attached"),
            Err(e) => tracing::info!(target: "rtrack::claims", operation = "attach_pci", instance = %u, error = %e, "attach refused"),
        }
        r.map_err(ApiError::from)
    })
    .await?;
    let status = if outcome.existing {
        StatusCode::OK
    } else {
        StatusCode::CREATED
    };
    Ok((
        status,
        Json(json!({
            "instance_uuid": outcome.instance_uuid,
            "pci_devices": outcome.assignments,
            "existing": outcome.existing,
        })),
    )
        .into_response())
}

/// `DELETE /v1/instances/{uuid}/pci-requests/{request_id}`: the port's devices are freed.
pub async fn detach_pci(
    State(state): St,
    p: Result<Path<(String, String)>, PathRejection>,
) -> ApiResult {
    let Path((raw, request_id)) = p.map_err(path_error)?;
    let uuid = check_uuid(&raw, "uuid")?;
    if request_id.len() > 255 {
        return Err(ApiError::invalid(
            "request_id",
            format!("{} is longer than 255 characters", bounded(&request_id)),
        ));
    }
    let st = state.clone();
    let (u, r) = (uuid.clone(), request_id.clone());
    blocking(move || {
        let res = st.service.detach_pci(&u, &r);
        match &res {
            Ok(()) => tracing::info!(target: "rtrack::claims", operation = "detach_pci", instance = %u, request = %bounded(&r), "PCI devices detached"),
            Err(e) => tracing::info!(target: "rtrack::claims", operation = "detach_pci", instance = %u, error = %e, "detach refused"),
        }
        res.map_err(ApiError::from)
    })
    .await?;
    Ok(
        Json(json!({"instance_uuid": uuid, "request_id": request_id, "detached": true}))
            .into_response(),
    )
}
