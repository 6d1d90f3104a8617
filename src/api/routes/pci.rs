//! PCI routes: the tracked devices, the release of a one-time-use device, and devices for a
//! port attached to (or detached from) a running instance.
//!
//! In: `{"pci_requests": <InstancePCIRequests primitive>}` to attach, an instance uuid and a
//! request id to detach, a PCI address to release. Out: the devices given (201, or 200 when the
//! same requests were attached already), the detach or release acknowledged once committed, or
//! an [`ApiError`] (`claim_refused` with every pool considered, `conflict`, `not_found`...).

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;

use super::super::bodies::AttachBody;
use super::super::error::ApiError;
use super::super::extract::{no_such, ApiJson, ApiPath, InstanceUuid};
use super::super::views::{Attached, Detached, PciDeviceView, PciDevices, Released};
use super::*;
use crate::echo::bounded;
use crate::objects::pci_request::InstancePCIRequests;
use crate::objects::Versioned;
use crate::probes::pci::PciAddress;
use crate::tracker::request::pci_requests_from_object;

/// `GET /v1/pci-devices`: every tracked device with its state, holder and provider.
pub async fn list_pci_devices(State(state): St) -> Result<Json<PciDevices>, ApiError> {
    let st = state.clone();
    let pci_devices = blocking(move || {
        Ok(st.service.read(|t| {
            let providers = t.pci_provider_uuids();
            t.state()
                .devices
                .values()
                .map(|d| {
                    let provider = providers
                        .get(&d.parent_addr.unwrap_or(d.address))
                        .or_else(|| providers.get(&d.address));
                    PciDeviceView::new(d, provider.copied())
                })
                .collect()
        }))
    })
    .await?;
    Ok(Json(PciDevices { pci_devices }))
}

/// `POST /v1/pci-devices/{address}/release`: a one-time-use device reserved after use becomes
/// available again, and its provider's inventory unreserved.
pub async fn release_pci_device(
    State(state): St,
    ApiPath(raw): ApiPath<String>,
) -> Result<Json<Released>, ApiError> {
    let address = PciAddress::parse(&raw).ok_or_else(|| {
        no_such(
            "address",
            "PCI device",
            &raw,
            "a PCI address (dddd:bb:ss.f)",
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
    Ok(Json(Released {
        address: address.to_string(),
        status: "available".to_string(),
    }))
}

/// `POST /v1/instances/{uuid}/pci-requests`: devices for ports attached to a running instance.
pub async fn attach_pci(
    State(state): St,
    InstanceUuid(uuid): InstanceUuid,
    ApiJson(body): ApiJson<AttachBody>,
) -> Result<(StatusCode, Json<Attached>), ApiError> {
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
    Ok((status, Json(Attached::from(&outcome))))
}

/// `DELETE /v1/instances/{uuid}/pci-requests/{request_id}`: the port's devices are freed.
pub async fn detach_pci(
    State(state): St,
    InstanceUuid(uuid): InstanceUuid,
    ApiPath((_, request_id)): ApiPath<(String, String)>,
) -> Result<Json<Detached>, ApiError> {
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
    Ok(Json(Detached {
        instance_uuid: uuid,
        request_id,
        detached: true,
    }))
}
