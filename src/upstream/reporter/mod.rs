//! The reporter: keeps Placement equal to the [`DesiredState`] it is handed, with as few
//! requests as possible.
//!
//! In: a desired state (a snapshot; the reporter never touches the tracker or its lock).
//! Out: requests to Placement and a [`ReportOutcome`] that says what was sent.
//!
//! - The cache ([`ProviderCache`]) is read from Placement on the first report, every
//!   `refresh_interval`, and after any error; between refreshes an unchanged desired state
//!   sends nothing at all.
//! - Each write carries the cached generation and stores the one Placement returns.
//! - 409 `placement.concurrent_update`: re-read that provider (or consumer), wait a few random
//!   milliseconds, plan again; at most 4 tries per report.
//! - 409 `placement.inventory.inuse`: keep the old records of the classes that were to go,
//!   write the rest, log and count it; the next report tries again.
//! - Transport errors, timeouts and 5xx: the next report refreshes the cache first, and reports
//!   are skipped for an exponentially growing, capped, jittered time ([`Backoff`]).

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use uuid::Uuid;

mod adopt;
pub mod drift;
pub mod holdings;
mod providers;
mod refresh;
mod release;
pub mod reshape;
mod reshaper;
mod write;

use crate::config::upstream::PlacementSettings;
use crate::upstream::api::{PlacementApi, RequestCounts};
use crate::upstream::backoff::{conflict_pause, Backoff};
use crate::upstream::desired::{DesiredState, ProviderRole};
use crate::upstream::plan::{plan, Action, CachedProvider, ProviderCache};
use crate::upstream::UpstreamError;

/// Marks a cached generation that an allocation write made stale.
pub(super) const STALE_GENERATION: u64 = u64::MAX;

/// Tuning that tests and the daemon may change.
#[derive(Debug, Clone)]
pub struct ReporterOptions {
    /// First wait after a failed report. Default 1 s.
    pub backoff_base: Duration,
    /// Longest wait between failed reports. Default 60 s.
    pub backoff_cap: Duration,
    /// Tries per report when generations conflict. Default 4 (as Nova).
    pub conflict_tries: u32,
}

impl Default for ReporterOptions {
    fn default() -> ReporterOptions {
        ReporterOptions {
            backoff_base: Duration::from_secs(1),
            backoff_cap: Duration::from_secs(60),
            conflict_tries: 4,
        }
    }
}

/// What one [`Reporter::report`] call did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ReportOutcome {
    /// Requests sent during this call, by kind (reads and writes).
    pub requests: RequestCounts,
    /// The cache was re-read from Placement.
    pub refreshed: bool,
    /// Changes written (one per successful write request).
    pub changes: u32,
    /// Generation conflicts met (each followed by a re-read and a retry).
    pub conflicts: u32,
    /// Inventory writes that kept in-use classes (`placement.inventory.inuse`).
    pub inventory_in_use: u32,
    /// Those writes: the provider and Placement's detail (bounded; at most 16).
    pub inventory_in_use_details: Vec<(Uuid, String)>,
    /// Provider deletions refused because the provider still has allocations.
    pub provider_in_use: u32,
    /// Allocation writes Placement refused (over capacity, bad class...), skipped.
    pub allocations_rejected: u32,
    /// No attempt was made: still backing off after a failure; the time left.
    pub backing_off: Option<Duration>,
    /// PCI providers nova-compute left in Placement that were reported under their uuids, by
    /// the address each is named after: the caller keeps them (see `adopt`).
    pub adopted_pci_providers: std::collections::BTreeMap<crate::probes::pci::PciAddress, Uuid>,
    /// vGPU and encryption providers nova-compute left, reported under their uuids: rtrack's
    /// derived uuid -> theirs (looked up again at every report; the caller tells the tracker).
    pub adopted_nested_providers: std::collections::BTreeMap<Uuid, Uuid>,
    /// Classes moved from the compute node to its children with the reshaper this cycle.
    pub reshaped: Vec<String>,
    /// What reconciliation found, when this report read Placement again (a refresh).
    pub drift: Option<drift::DriftReport>,
    /// Each one-time-use PCI provider this cycle read from Placement or wrote, by the device's
    /// address: what Placement holds (a cached value older than the cycle is left out: an
    /// operator may have changed it since). The caller tells the tracker, which takes a whole
    /// reservation it sees as its own written, and a lowered one as an operator's clean.
    pub one_time_use_reserved: BTreeMap<crate::probes::pci::PciAddress, OneTimeUseReading>,
}

pub use crate::tracker::pci::devices::OneTimeUseReading;

fn one_time_use_providers(
    desired: &DesiredState,
) -> impl Iterator<
    Item = (
        crate::probes::pci::PciAddress,
        &crate::upstream::desired::DesiredProvider,
    ),
> {
    desired
        .providers
        .iter()
        .filter(|p| {
            p.traits
                .contains(crate::inventory::traits::HW_PCI_ONE_TIME_USE)
        })
        .filter_map(|p| match p.role {
            ProviderRole::Pci { address } => Some((address, p)),
            _ => None,
        })
}

/// The cached generation of each one-time-use provider of `desired`.
fn one_time_use_generations(desired: &DesiredState, cache: &ProviderCache) -> BTreeMap<Uuid, u64> {
    one_time_use_providers(desired)
        .filter_map(|(_, p)| cache.providers.get(&p.uuid).map(|c| (p.uuid, c.generation)))
        .collect()
}

/// What `cache` says of each one-time-use provider of `desired` that this cycle re-read
/// (`refreshed`) or wrote (its generation is no longer the one in `before`).
fn one_time_use_reserved(
    desired: &DesiredState,
    cache: &ProviderCache,
    before: &BTreeMap<Uuid, u64>,
    refreshed: bool,
) -> BTreeMap<crate::probes::pci::PciAddress, OneTimeUseReading> {
    one_time_use_providers(desired)
        .filter_map(|(address, p)| {
            let c = cache.providers.get(&p.uuid)?;
            let written = before.get(&p.uuid) != Some(&c.generation);
            if !refreshed && !written {
                return None;
            }
            let whole = p.inventories.keys().all(|class| {
                c.inventories
                    .get(class)
                    .is_some_and(|r| r.total > 0 && r.reserved >= r.total)
            });
            let used = p
                .inventories
                .keys()
                .map(|class| c.usages.get(class).copied().unwrap_or(0))
                .sum();
            Some((
                address,
                OneTimeUseReading {
                    whole,
                    read: refreshed,
                    used,
                },
            ))
        })
        .collect()
}

/// Why applying a plan stopped.
enum Stop {
    /// A generation conflict on this provider or consumer: re-read it and plan again.
    Conflict(Target),
    /// Anything else.
    Fatal(UpstreamError),
}

enum Target {
    Provider(Uuid),
    Consumer(Uuid),
}

/// A part of a provider that the plan merges with what others wrote.
enum Part {
    Traits,
    Aggregates,
}

/// A generation conflict on `t` when `e` is one (Placement's `placement.concurrent_update`).
fn conflict_on(e: &UpstreamError, t: Target) -> Option<Stop> {
    e.is_concurrent_update().then_some(Stop::Conflict(t))
}

impl From<UpstreamError> for Stop {
    fn from(e: UpstreamError) -> Stop {
        Stop::Fatal(e)
    }
}

/// Keeps one host's provider tree in Placement up to date.
#[derive(Debug)]
pub struct Reporter<P: PlacementApi> {
    api: P,
    cache: ProviderCache,
    cache_valid: bool,
    /// The cache was read from Placement once: a refresh re-reads only providers whose
    /// generation changed (see `refresh`).
    cache_known: bool,
    refreshed_at: Option<Instant>,
    refresh_interval: Option<Duration>,
    backoff: Backoff,
    opts: ReporterOptions,
    last_warnings: Vec<String>,
    /// Drift keys seen at the last refresh, and when each was first seen (a drift counts once
    /// seen at two refreshes running, a minute apart at least).
    suspects: BTreeMap<String, Instant>,
    /// Providers whose cached generation was taken without reading them whole (before a write):
    /// read again at the next refresh, whatever their generation.
    needs_read: BTreeSet<Uuid>,
    /// Refreshes by generation since everything was last read.
    refreshes_since_full_read: u32,
    /// The microversion was negotiated and Placement has not refused it since (406): a light
    /// refresh skips `GET /`.
    negotiated: bool,
    /// Released consumers whose part is gone from Placement, not yet taken by the caller.
    released_done: Vec<(Uuid, i64)>,
    /// What `warn_unwritable` said last (each said once while it lasts).
    unwritable_warned: BTreeSet<String>,
    /// `[placement] unclaimed_grace_s`.
    unclaimed_grace: Duration,
    /// The compute node's generation when the pinned-VCPU reshape last found nothing it may
    /// move (consumers without a claim here): not read again until the generation changes.
    pcpu_fruitless_at: Option<u64>,
}

impl<P: PlacementApi> Reporter<P> {
    /// A reporter over `api`. Makes no request until [`Reporter::report`].
    pub fn new(api: P, settings: &PlacementSettings, opts: ReporterOptions) -> Reporter<P> {
        Reporter {
            api,
            cache: ProviderCache::default(),
            cache_valid: false,
            cache_known: false,
            refreshed_at: None,
            refresh_interval: settings.refresh_interval,
            backoff: Backoff::new(opts.backoff_base, opts.backoff_cap),
            opts,
            last_warnings: Vec::new(),
            suspects: Default::default(),
            needs_read: Default::default(),
            refreshes_since_full_read: 0,
            negotiated: false,
            released_done: Vec::new(),
            unwritable_warned: BTreeSet::new(),
            unclaimed_grace: settings.unclaimed_grace,
            pcpu_fruitless_at: None,
        }
    }

    /// The API client (for its counters).
    pub fn api(&self) -> &P {
        &self.api
    }

    /// The cache as it stands (what rtrack believes Placement holds).
    pub fn cache(&self) -> &ProviderCache {
        &self.cache
    }

    /// The refresh interval is up: the next report reads Placement again (the tree, and the
    /// providers whose generation moved), as it does every `refresh_interval`.
    pub fn expire(&mut self) {
        self.refreshed_at = None;
    }

    /// Drops the cache: the next report re-reads all of Placement first.
    pub fn invalidate(&mut self) {
        self.cache_valid = false;
        self.cache_known = false;
    }

    /// Time before the next report will make an attempt (zero unless backing off).
    pub fn backoff_remaining(&self) -> Duration {
        self.backoff.remaining(Instant::now())
    }

    /// [`Reporter::report`] now, even while backing off, after reading Placement again (by
    /// generation): someone asked, and reads Placement once it is answered.
    pub async fn report_now(
        &mut self,
        desired: &DesiredState,
    ) -> Result<ReportOutcome, UpstreamError> {
        self.backoff.succeeded();
        self.expire();
        self.report(desired).await
    }

    /// Brings Placement in line with `desired`. Sends nothing when the cache is fresh and
    /// already equal to `desired`. While backing off after a failure, returns at once with
    /// [`ReportOutcome::backing_off`] set.
    pub async fn report(&mut self, desired: &DesiredState) -> Result<ReportOutcome, UpstreamError> {
        let now = Instant::now();
        let wait = self.backoff.remaining(now);
        if !wait.is_zero() {
            return Ok(ReportOutcome {
                backing_off: Some(wait),
                ..Default::default()
            });
        }
        if desired.warnings != self.last_warnings {
            for w in &desired.warnings {
                tracing::warn!(warning = %w, "placement report");
            }
            self.last_warnings = desired.warnings.clone();
        }
        let before = self.api.counts();
        let mut outcome = ReportOutcome::default();
        let result = self.cycle(desired, &mut outcome).await;
        outcome.requests = self.api.counts().since(&before);
        match result {
            Ok(()) => {
                if self.backoff.failures() > 0 {
                    tracing::info!("placement reachable again; provider tree in step");
                }
                self.backoff.succeeded();
                if outcome.changes > 0 {
                    tracing::info!(changes = outcome.changes, requests = %outcome.requests, "placement updated");
                }
                Ok(outcome)
            }
            Err(e) => {
                // Whatever failed, Placement may differ from the cache now: re-read next time.
                self.cache_valid = false;
                if e.calls_for_negotiation() {
                    self.negotiated = false;
                }
                let wait = self.backoff.failed(Instant::now());
                tracing::warn!(error = %e, retry_in_ms = wait.as_millis() as u64, "placement report failed");
                Err(e)
            }
        }
    }

    async fn cycle(
        &mut self,
        desired: &DesiredState,
        outcome: &mut ReportOutcome,
    ) -> Result<(), UpstreamError> {
        let stale = match (self.refreshed_at, self.refresh_interval) {
            (None, _) => true,
            (Some(t), Some(every)) => t.elapsed() >= every,
            (Some(_), None) => false,
        };
        // One-time-use providers' generations before this cycle: a reading is fresh when the
        // cycle re-read Placement or wrote the provider (its generation moved).
        let otu_generations = one_time_use_generations(desired, &self.cache);
        if !self.cache_valid || stale {
            self.refresh(desired).await?;
            outcome.refreshed = true;
        }
        let owned = self.with_adoptions(desired, outcome);
        let desired = owned.as_ref().unwrap_or(desired);
        // Reconciliation: what differs as read, before this cycle's writes.
        let found = outcome
            .refreshed
            .then(|| crate::upstream::reconcile::compare(desired, &self.cache));
        self.clear_released(desired, outcome).await?;
        self.warn_unwritable(desired);
        let tries = self.opts.conflict_tries.max(1);
        for attempt in 1..=tries {
            let actions = plan(desired, &self.cache);
            if actions.is_empty() {
                break;
            }
            match self.apply(actions, outcome).await {
                Ok(()) => break,
                Err(Stop::Fatal(e)) => return Err(e),
                Err(Stop::Conflict(target)) => {
                    outcome.conflicts += 1;
                    let id = match target {
                        Target::Provider(u) => {
                            self.reread_provider(desired, u).await?;
                            u
                        }
                        Target::Consumer(c) => {
                            self.reread_consumer(c).await?;
                            c
                        }
                    };
                    if attempt == tries {
                        return Err(UpstreamError::ConflictsExhausted {
                            provider: id,
                            tries,
                        });
                    }
                    tokio::time::sleep(conflict_pause(attempt)).await;
                }
            }
        }
        if let Some(found) = found {
            outcome.drift = Some(self.judge_drift(desired, found));
        }
        outcome.one_time_use_reserved =
            one_time_use_reserved(desired, &self.cache, &otu_generations, outcome.refreshed);
        let classes = reshape::classes_to_reshape(desired, &self.cache);
        if !classes.is_empty() {
            self.reshape(desired, &classes, outcome).await?;
        } else if reshape::pcpu::wanted(desired, &self.cache) {
            self.reshape_pinned_vcpus(desired, outcome).await?;
        }
        Ok(())
    }

    fn generation(&self, uuid: Uuid) -> u64 {
        self.cache.providers.get(&uuid).map_or(0, |p| p.generation)
    }

    fn provider_mut(&mut self, uuid: Uuid) -> &mut CachedProvider {
        self.cache
            .providers
            .entry(uuid)
            .or_insert_with(|| CachedProvider {
                uuid,
                ..Default::default()
            })
    }

    async fn apply(
        &mut self,
        actions: Vec<Action>,
        outcome: &mut ReportOutcome,
    ) -> Result<(), Stop> {
        for action in actions {
            match action {
                Action::EnsureResourceClass(name) => {
                    self.api.ensure_resource_class(&name).await?;
                    self.cache.classes.insert(name);
                }
                Action::EnsureTrait(name) => {
                    self.api.ensure_trait(&name).await?;
                    self.cache.custom_traits.insert(name);
                }
                Action::CreateProvider { uuid, name, parent } => {
                    self.create_provider(uuid, name, parent).await?;
                }
                Action::RenameProvider { uuid, name } => {
                    let parent = self.cache.providers.get(&uuid).and_then(|p| p.parent);
                    self.api.rename_provider(uuid, &name, parent).await?;
                    self.provider_mut(uuid).name = name;
                }
                Action::DeleteProvider { uuid } => match self.api.delete_provider(uuid).await {
                    Ok(()) => {
                        self.cache.providers.remove(&uuid);
                    }
                    Err(e) if e.status() == Some(409) => {
                        // In use (allocations) or has children: keep it, try next cycle.
                        outcome.provider_in_use += 1;
                        tracing::warn!(provider = %uuid, error = %e, "cannot delete resource provider of a removed PCI device yet");
                        continue;
                    }
                    Err(e) => return Err(e.into()),
                },
                Action::PutInventories { uuid, inventories } => {
                    self.write_inventories(uuid, inventories, outcome).await?;
                }
                Action::PutTraits { uuid, traits } => {
                    let g = self.part_generation(uuid, Part::Traits).await?;
                    match self.api.put_traits(uuid, g, &traits).await {
                        Ok(ng) => {
                            let p = self.provider_mut(uuid);
                            p.generation = ng;
                            p.traits = traits;
                        }
                        Err(e) => {
                            return Err(
                                conflict_on(&e, Target::Provider(uuid)).unwrap_or(Stop::Fatal(e))
                            )
                        }
                    }
                }
                Action::PutAggregates { uuid, aggregates } => {
                    let g = self.part_generation(uuid, Part::Aggregates).await?;
                    match self.api.put_aggregates(uuid, g, &aggregates).await {
                        Ok(ng) => {
                            let p = self.provider_mut(uuid);
                            p.generation = ng;
                            p.aggregates = aggregates;
                        }
                        Err(e) => {
                            return Err(
                                conflict_on(&e, Target::Provider(uuid)).unwrap_or(Stop::Fatal(e))
                            )
                        }
                    }
                }
                Action::PutAllocation {
                    consumer,
                    resources,
                    owner,
                } => {
                    if !self
                        .write_allocation(consumer, resources, owner, outcome)
                        .await?
                    {
                        continue;
                    }
                }
            }
            outcome.changes += 1;
        }
        Ok(())
    }

    /// An allocation write bumps the generation of every provider it touches, and Placement
    /// does not say to what. Mark them; the next write to such a provider first reads its
    /// generation (one GET) instead of failing with a conflict. Nothing is read if no write
    /// follows.
    fn mark_generations_stale(&mut self, providers: impl Iterator<Item = Uuid>) {
        for p in providers {
            if let Some(c) = self.cache.providers.get_mut(&p) {
                c.generation = STALE_GENERATION;
            }
        }
    }

    /// The generation to send with `uuid`'s traits or aggregates. The plan kept the parts it
    /// does not own from the cache; when an allocation made the cached generation stale, a
    /// generation read alone would vouch for a part someone else changed since (an operator's
    /// trait), and the PUT would remove theirs. So the generation comes from reading that part,
    /// and when it is not the cached one the plan is made again from a fresh read.
    async fn part_generation(&mut self, uuid: Uuid, part: Part) -> Result<u64, Stop> {
        let g = self.generation(uuid);
        if g != STALE_GENERATION {
            return Ok(g);
        }
        let cached = self.cache.providers.get(&uuid);
        let (g, same) = match part {
            Part::Traits => {
                let had = cached.map(|p| p.traits.clone());
                let (g, now) = self.api.get_traits(uuid).await?;
                (g, had.as_ref() == Some(&now))
            }
            Part::Aggregates => {
                let had = cached.map(|p| p.aggregates.clone());
                let (g, now) = self.api.get_aggregates(uuid).await?;
                (g, had.as_ref() == Some(&now))
            }
        };
        if !same {
            return Err(Stop::Conflict(Target::Provider(uuid)));
        }
        self.provider_mut(uuid).generation = g;
        self.needs_read.insert(uuid);
        Ok(g)
    }

    /// The generation to send for `uuid`, read from Placement when an allocation made the
    /// cached one stale.
    async fn current_generation(&mut self, uuid: Uuid) -> Result<u64, UpstreamError> {
        let g = self.generation(uuid);
        if g != STALE_GENERATION {
            return Ok(g);
        }
        let (g, _) = self.api.get_inventories(uuid).await?;
        self.provider_mut(uuid).generation = g;
        // Others may have written its traits or aggregates meanwhile: not trusted by generation.
        self.needs_read.insert(uuid);
        Ok(g)
    }
}
