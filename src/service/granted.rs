//! The caller-left rule, in one place: a new claim whose caller went away before it was
//! answered (timed out, disconnected) is aborted, as Nova aborts a claim whose build did not go
//! on, unless some other caller was told of it (an idempotent retry answered "existing"). An
//! answer given is never taken back.
//!
//! The rule is decided under the tracker lock on both sides: a retry marks the claim answered
//! while it decides "existing", and the abort checks that mark while it decides to abort.

use super::{now_secs, ServiceError, Subject, TrackerService};
use crate::tracker::model::InstanceRequest;
use crate::tracker::state::{Changes, ClaimOutcome, InstanceInfo, MoveRequest};

/// A claim (or move claim) granted for a caller that has not been answered yet. Answer the
/// caller, then [`Granted::answered`]; dropped unanswered, a new claim is aborted.
pub struct Granted<'a> {
    service: &'a TrackerService,
    /// What was granted (or found, or would fit on a dry run).
    pub outcome: ClaimOutcome,
    /// Set for a new claim: the token of its unanswered mark.
    token: Option<u64>,
}

impl Granted<'_> {
    /// The caller has the answer: the claim stays.
    pub fn answered(mut self) -> ClaimOutcome {
        if let Some(token) = self.token.take() {
            let uuid = &self.outcome.claim.instance_uuid;
            let mut unanswered = self.service.unanswered.lock();
            if unanswered.get(uuid) == Some(&token) {
                unanswered.remove(uuid);
            }
        }
        self.outcome.clone()
    }
}

impl Drop for Granted<'_> {
    fn drop(&mut self) {
        let Some(token) = self.token.take() else {
            return;
        };
        let uuid = self.outcome.claim.instance_uuid.clone();
        tracing::warn!(instance = %uuid, "the caller left before the claim was answered; aborting it unless another caller was told of it");
        if let Err(e) = self.service.abort_unanswered(&uuid, token) {
            tracing::error!(instance = %uuid, error = %e, "aborting an unanswered claim failed");
        }
    }
}

impl TrackerService {
    /// An instance claim for a caller that may go away before it is answered.
    pub fn guarded_claim(
        &self,
        info: &InstanceInfo,
        req: &InstanceRequest,
    ) -> Result<Granted<'_>, ServiceError> {
        let now = now_secs();
        self.granted(&info.uuid, |t| t.instance_claim(info, req, now, false))
    }

    /// A move claim for a caller that may go away before it is answered.
    pub fn guarded_move(&self, mv: &MoveRequest) -> Result<Granted<'_>, ServiceError> {
        let now = now_secs();
        self.granted(&mv.instance.uuid, |t| t.move_claim(mv, now, false))
    }

    fn granted(
        &self,
        uuid: &str,
        op: impl FnOnce(
            &mut crate::tracker::state::Tracker,
        ) -> Result<(ClaimOutcome, Changes), crate::tracker::ClaimError>,
    ) -> Result<Granted<'_>, ServiceError> {
        let token = self
            .next_token
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let result = self.mutate(Subject::Instance(uuid), false, |t| {
            let (outcome, changes) = op(t)?;
            let mut unanswered = self.unanswered.lock();
            if outcome.existing {
                // This caller is told of it: nobody may abort it for leaving any more.
                unanswered.remove(uuid);
            } else if !outcome.dry_run {
                unanswered.insert(uuid.to_string(), token);
            }
            Ok((outcome, changes))
        });
        match result {
            Ok(outcome) => {
                let new = !outcome.existing && !outcome.dry_run;
                Ok(Granted {
                    service: self,
                    outcome,
                    token: new.then_some(token),
                })
            }
            Err(e) => {
                let mut unanswered = self.unanswered.lock();
                if unanswered.get(uuid) == Some(&token) {
                    unanswered.remove(uuid);
                }
                Err(e)
            }
        }
    }

    /// Aborts the claim of `uuid` if it is still the unanswered one marked `token`.
    fn abort_unanswered(&self, uuid: &str, token: u64) -> Result<(), ServiceError> {
        self.mutate(Subject::Instance(uuid), false, |t| {
            let mut unanswered = self.unanswered.lock();
            if unanswered.get(uuid) != Some(&token) {
                tracing::info!(instance = %uuid, "another caller was told of the claim; it stays");
                return Ok(((), Changes::default()));
            }
            unanswered.remove(uuid);
            t.abort(uuid).map(|c| ((), c))
        })
    }
}
