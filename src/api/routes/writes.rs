//! Writes: claims, moves, aborts, confirms, reverts and state updates through the service;
//! every 2xx is committed, and every claim decision is logged and counted once.
//!
//! In: claim and migration bodies (a RequestSpec primitive or the legacy dicts, with the instance;
//! `?dry_run=true`), instance uuids and migration ids in paths, and state updates
//! ([`InstanceUpdate`]). Out: the committed claim, migration or instance as JSON (201 when new, 200
//! when it existed, `fits` for a dry run), or an [`ApiError`] (`claim_refused` with the shortfalls,
//! `conflict`, `invalid_request`...).

use std::sync::Arc;
use std::time::Instant;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::Json;

use super::super::bodies::{ClaimBody, MigrationBody, ParsedClaim, ParsedMove};
use super::super::error::{claim_error_code, ApiError, ErrorCode};
use super::super::extract::{ApiJson, DryRun, InstanceUuid, MigrationId};
use super::super::views::{
    self, Aborted, ClaimAnswer, InstanceUpdated, MigrationFinished, MigrationView, MoveClaim,
    MoveDryRun,
};
use super::*;
use crate::api::bodies::InstanceUpdateBody;
use crate::api::metrics::ClaimDecision;
use crate::api::shared::DaemonState;
use crate::service::{Granted, ServiceError, TrackerService};
use crate::tracker::{ClaimOutcome, InstanceUpdate, MoveRequest};

/// Logs and counts one claim decision.
fn record_decision(
    state: &DaemonState,
    operation: &'static str,
    uuid: &str,
    result: &Result<ClaimOutcome, ServiceError>,
) {
    match result {
        Ok(o) => {
            let decision = if o.dry_run {
                ClaimDecision::DryRun
            } else if o.existing {
                ClaimDecision::Existing
            } else {
                ClaimDecision::Granted
            };
            state.metrics.count_claim(operation, Ok(decision));
            let resources: Vec<String> = o
                .claim
                .resources
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect();
            tracing::info!(
                target: "rtrack::claims",
                operation, instance = uuid, decision = ?decision,
                migration = ?o.claim.migration_id,
                resources = %resources.join(","), pci_devices = o.claim.assignments.len(),
                "claim granted"
            );
        }
        Err(ServiceError::Claim(e)) => {
            state.metrics.count_claim(operation, Err(e));
            tracing::info!(target: "rtrack::claims", operation, instance = uuid, code = claim_error_code(e).as_str(), reason = %e, "claim refused");
        }
        Err(e) => {
            state.metrics.count_claim_error(operation);
            tracing::warn!(target: "rtrack::claims", operation, instance = uuid, error = %e, "claim failed");
        }
    }
}

/// Logs and counts a claim whose request could not be read.
fn reject_malformed(state: &DaemonState, operation: &'static str, e: &ApiError) {
    state
        .metrics
        .count_claim_outcome(operation, e.code, String::new());
    tracing::info!(target: "rtrack::claims", operation, code = e.code, reason = %e.message, "claim refused");
}

/// Runs a claim on the blocking pool and answers its caller. A new claim whose caller has gone
/// by the time it is granted is aborted by the service's caller-left rule ([`Granted`]); `view`
/// adds what the answer shows besides the claim (read from committed state).
async fn claim_for_caller<V: Send + 'static>(
    state: &Arc<DaemonState>,
    operation: &'static str,
    uuid: String,
    claim: impl FnOnce(&TrackerService) -> Result<Granted<'_>, ServiceError> + Send + 'static,
    dry_run: impl FnOnce(&TrackerService) -> Result<ClaimOutcome, ServiceError> + Send + 'static,
    view: impl FnOnce(&DaemonState, &ClaimOutcome) -> Result<V, ApiError> + Send + 'static,
    is_dry_run: bool,
) -> Result<(ClaimOutcome, V), ApiError> {
    let (tx, rx) =
        tokio::sync::oneshot::channel::<(Result<(ClaimOutcome, V), ApiError>, Instant)>();
    let st = state.clone();
    let span = tracing::Span::current();
    span.record("instance_uuid", uuid.as_str());
    let queued = Instant::now();
    tokio::task::spawn_blocking(move || {
        st.metrics
            .stage_queue
            .observe(queued.elapsed().as_secs_f64());
        let _entered = span.enter();
        let service: &TrackerService = &st.service;
        if is_dry_run {
            let r = dry_run(service);
            record_decision(&st, operation, &uuid, &r);
            let answer = r
                .map_err(ApiError::from)
                .and_then(|o| view(&st, &o).map(|v| (o, v)));
            let _ = tx.send((answer, Instant::now()));
            return;
        }
        match claim(service) {
            Ok(granted) => {
                let r = Ok(granted.outcome.clone());
                record_decision(&st, operation, &uuid, &r);
                match view(&st, &granted.outcome) {
                    Ok(v) => {
                        if tx
                            .send((Ok((granted.outcome.clone(), v)), Instant::now()))
                            .is_ok()
                        {
                            granted.answered();
                        }
                        // Else the caller is gone: dropping `granted` applies the rule.
                    }
                    Err(e) => {
                        // Not answered with the claim: it does not stay.
                        drop(granted);
                        let _ = tx.send((Err(e), Instant::now()));
                    }
                }
            }
            Err(e) => {
                let r: Result<ClaimOutcome, ServiceError> = Err(e);
                record_decision(&st, operation, &uuid, &r);
                if let Err(e) = r {
                    let _ = tx.send((Err(ApiError::from(e)), Instant::now()));
                }
            }
        }
    });
    let (answer, answered) = rx.await.map_err(|_| {
        ApiError::new(
            ErrorCode::InternalError,
            "the claim operation ended without an answer; nothing was acknowledged",
        )
    })?;
    state
        .metrics
        .stage_answer
        .observe(answered.elapsed().as_secs_f64());
    answer
}

/// `POST /v1/claims[?dry_run=true]`.
pub async fn create_claim(
    State(state): St,
    DryRun(dry_run): DryRun,
    ApiJson(body): ApiJson<ClaimBody>,
) -> ApiResult {
    // Reading a RequestSpec (extra specs, NUMA constraints) is work: on the blocking pool, so
    // that no body holds the connections of others.
    let st = state.clone();
    let ParsedClaim { info, request } = blocking(move || {
        body.parse(&st.config().pci.aliases)
            .inspect_err(|e| reject_malformed(&st, "instance_claim", e))
    })
    .await?;
    let (info2, request2) = (info.clone(), request.clone());
    let (outcome, ()) = claim_for_caller(
        &state,
        "instance_claim",
        info.uuid.clone(),
        move |s| {
            s.guarded(&info.uuid, |t, now| {
                t.instance_claim(&info, &request, now, false)
            })
        },
        move |s| s.instance_claim(&info2, &request2, true),
        |_, _| Ok(()),
        dry_run,
    )
    .await?;
    let claim = ClaimAnswer::from(&outcome);
    if outcome.dry_run {
        let fits = views::DryRun { fits: true, claim };
        return Ok(Json(fits).into_response());
    }
    let status = if outcome.existing {
        StatusCode::OK
    } else {
        report_one_time_use(&state, &outcome).await;
        StatusCode::CREATED
    };
    Ok((status, Json(claim)).into_response())
}

/// How long a claim's answer waits for the report that reserves its one-time-use devices.
const ONE_TIME_USE_REPORT_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// A claim given a one-time-use device: its provider is reserved in Placement before the
/// answer, as Nova's tracker reserves it with the claim, not at the next report cycle (a
/// scheduler reading Placement meanwhile would count the device as free again once released).
/// The claim is committed either way; a report that fails or takes too long is logged and the
/// next cycle retries.
async fn report_one_time_use(state: &Arc<DaemonState>, outcome: &ClaimOutcome) {
    let one_time = state.service.read(|t| {
        outcome.claim.assignments.iter().any(|a| {
            t.state()
                .devices
                .get(&a.address)
                .is_some_and(|d| d.one_time_use())
        })
    });
    if !one_time || state.config().placement_settings.is_none() {
        return;
    }
    let report = super::placement::ask(state, |reply| {
        crate::api::shared::UpstreamCommand::ReportNow { reply }
    });
    let instance = &outcome.claim.instance_uuid;
    match tokio::time::timeout(ONE_TIME_USE_REPORT_WAIT, report).await {
        Ok(Ok(_)) => {}
        Ok(Err(e)) => {
            tracing::warn!(target: "rtrack::claims", %instance, error = %e.message, "the report reserving a one-time-use device failed; the next cycle retries")
        }
        Err(_) => {
            tracing::warn!(target: "rtrack::claims", %instance, "the report reserving a one-time-use device did not finish in time; the next cycle retries")
        }
    }
}

/// `DELETE /v1/claims/{instance_uuid}`: abort the instance's claim (or its move claim here).
pub async fn delete_claim(
    State(state): St,
    InstanceUuid(uuid): InstanceUuid,
) -> Result<Json<Aborted>, ApiError> {
    let u = uuid.clone();
    blocking(move || {
        let r = state.service.abort(&u);
        match &r {
            Ok(()) => tracing::info!(target: "rtrack::claims", operation = "abort", instance = %u, "claim aborted"),
            Err(e) => tracing::info!(target: "rtrack::claims", operation = "abort", instance = %u, error = %e, "abort refused"),
        }
        r.map_err(ApiError::from)
    })
    .await?;
    Ok(Json(Aborted {
        instance_uuid: uuid,
        aborted: true,
    }))
}

/// `POST /v1/migrations[?dry_run=true]`: a resize, cold or live migration or evacuation.
pub async fn create_migration(
    State(state): St,
    DryRun(dry_run): DryRun,
    ApiJson(body): ApiJson<MigrationBody>,
) -> ApiResult {
    let st = state.clone();
    let (body, parsed) = blocking(move || {
        let parsed = body
            .parse(&st.config().pci.aliases)
            .inspect_err(|e| reject_malformed(&st, "move_claim", e))?;
        Ok((body, parsed))
    })
    .await?;
    let ParsedMove {
        info,
        new,
        current,
        current_numa,
    } = parsed;
    let uuid = info.uuid.clone();
    let mv = MoveRequest {
        instance: info,
        current,
        new,
        current_numa,
        move_type: body.move_type,
        migration_id: body.migration_id,
        migration_uuid: body.migration_uuid,
        source_compute: body.source_compute,
        source_node: body.source_node,
        dest_compute: body.dest_compute,
        dest_node: body.dest_node,
    };
    let mv2 = mv.clone();
    let (outcome, migration) = claim_for_caller(
        &state,
        "move_claim",
        uuid,
        move |s| s.guarded(&mv.instance.uuid, |t, now| t.move_claim(&mv, now, false)),
        move |s| s.move_claim(&mv2, true),
        |st, o| match (o.dry_run, o.claim.migration_id) {
            // A dry run records no migration.
            (true, _) => Ok(None),
            (false, Some(id)) => migration_view(st, id).map(Some),
            (false, None) => Err(no_migration()),
        },
        dry_run,
    )
    .await?;
    let claim = ClaimAnswer::from(&outcome);
    if outcome.dry_run {
        return Ok(Json(MoveDryRun {
            migration: None,
            claim,
            fits: true,
        })
        .into_response());
    }
    let migration = migration.ok_or_else(no_migration)?;
    let status = if outcome.existing {
        StatusCode::OK
    } else {
        report_one_time_use(&state, &outcome).await;
        StatusCode::CREATED
    };
    Ok((status, Json(MoveClaim { migration, claim })).into_response())
}

/// A move claim granted without a migration (the tracker records one with every move claim).
fn no_migration() -> ApiError {
    ApiError::new(
        ErrorCode::InternalError,
        "the move claim has no migration; nothing was acknowledged",
    )
}

async fn finish_migration(
    state: Arc<DaemonState>,
    id: i64,
    confirm: bool,
) -> Result<Json<MigrationFinished>, ApiError> {
    tracing::Span::current().record("migration_id", id);
    let migration: MigrationView = blocking(move || {
        let r = if confirm {
            state.service.confirm(id)
        } else {
            state.service.revert(id)
        };
        let op = if confirm { "confirm" } else { "revert" };
        match &r {
            Ok(()) => tracing::info!(target: "rtrack::claims", operation = op, migration = id, "migration finished"),
            Err(e) => tracing::info!(target: "rtrack::claims", operation = op, migration = id, error = %e, "refused"),
        }
        r.map_err(ApiError::from)?;
        migration_view(&state, id)
    })
    .await?;
    Ok(Json(MigrationFinished { migration }))
}

/// `POST /v1/migrations/{id}/confirm`.
pub async fn confirm_migration(
    State(state): St,
    MigrationId(id): MigrationId,
) -> Result<Json<MigrationFinished>, ApiError> {
    finish_migration(state, id, true).await
}

/// `POST /v1/migrations/{id}/revert`.
pub async fn revert_migration(
    State(state): St,
    MigrationId(id): MigrationId,
) -> Result<Json<MigrationFinished>, ApiError> {
    finish_migration(state, id, false).await
}

/// `POST /v1/instances/{uuid}/state`.
pub async fn update_instance(
    State(state): St,
    InstanceUuid(uuid): InstanceUuid,
    ApiJson(update): ApiJson<InstanceUpdateBody>,
) -> Result<Json<InstanceUpdated>, ApiError> {
    let update = InstanceUpdate::from(update);
    super::super::bodies::check_update(&update)?;
    let instance = blocking(move || {
        state
            .service
            .update_instance(&uuid, &update)
            .map_err(ApiError::from)?;
        tracing::info!(target: "rtrack::claims", operation = "update_instance", instance = %uuid,
            vm_state = ?update.vm_state, task_state = ?update.task_state, "instance updated");
        Ok(state.service.read(|t| {
            t.state()
                .instances
                .get(&uuid)
                .and_then(|i| serde_json::to_value(i).ok())
        }))
    })
    .await?;
    Ok(Json(InstanceUpdated { instance }))
}
