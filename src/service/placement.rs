//! What the tracker is told about Placement: by the report loop (one-time-use reservations
//! seen there, providers adopted from nova-compute, released consumers Placement no longer
//! holds) and by an operator (a one-time-use device released). Each a commit, as every change.

use super::{ServiceError, Subject, TrackerService};

impl TrackerService {
    /// Releases a one-time-use PCI device reserved after use.
    pub fn release_pci_device(
        &self,
        address: &crate::probes::pci::PciAddress,
    ) -> Result<(), ServiceError> {
        self.mutate(Subject::Host, |t| {
            t.release_device(address).map(|c| ((), c))
        })
    }

    /// Tells the tracker what Placement holds for one-time-use devices' providers (see
    /// `Tracker::note_one_time_use_reservations`): the devices an operator cleaned there, and
    /// those found reserved there.
    pub fn note_one_time_use_reservations(
        &self,
        readings: &std::collections::BTreeMap<
            crate::probes::pci::PciAddress,
            crate::tracker::pci::devices::OneTimeUseReading,
        >,
    ) -> Result<crate::tracker::pci::devices::OneTimeUseNoted, ServiceError> {
        if readings.is_empty() {
            return Ok(Default::default());
        }
        self.mutate(Subject::Host, |t| {
            let (changes, noted) = t.note_one_time_use_reservations(readings);
            Ok((noted, changes))
        })
    }

    /// Keeps the uuids of PCI providers adopted from Placement (see
    /// `Tracker::adopt_pci_providers`).
    pub fn adopt_pci_providers(
        &self,
        adopted: &std::collections::BTreeMap<crate::probes::pci::PciAddress, uuid::Uuid>,
    ) -> Result<(), ServiceError> {
        self.mutate(Subject::Host, |t| Ok(((), t.adopt_pci_providers(adopted))))
    }

    /// Forgets released consumers whose part Placement no longer holds (see
    /// `Tracker::forget_released`).
    pub fn forget_released(&self, done: &[(uuid::Uuid, i64)]) -> Result<(), ServiceError> {
        if done.is_empty() {
            return Ok(());
        }
        self.mutate(Subject::Host, |t| Ok(((), t.forget_released(done))))
    }

    /// Tells the tracker which vGPU and encryption providers nova-compute created (see
    /// `Tracker::adopt_nested_providers`): not stored, found again at every report.
    pub fn adopt_nested_providers(
        &self,
        adopted: &std::collections::BTreeMap<uuid::Uuid, uuid::Uuid>,
    ) {
        self.working.lock().adopt_nested_providers(adopted);
    }
}
