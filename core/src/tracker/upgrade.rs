//! Records written by an older rtrack, brought up to what this one reads, when they are loaded
//! (derived fields only: nothing is written back until a record changes).

use std::sync::Arc;

use crate::tracker::TrackerState;

/// Records written before rtrack read a flavor's extra classes (`resources:VGPU`,
/// `hw:mem_encryption`, `CUSTOM_*`) have none: they are read from the stored extra specs, so
/// those instances count per class again (they hold no particular vGPU parent or mdev).
pub(super) fn upgrade_flavors(state: &mut TrackerState) {
    fn upgrade(f: &mut super::model::FlavorUsage) {
        if f.extra_resources.is_empty() && f.mem_encryption_model.is_none() {
            if let Ok((classes, model)) =
                super::flavor_classes::extra_classes(&f.extra_specs, "flavor")
            {
                f.extra_resources = classes;
                f.mem_encryption_model = model;
            }
        }
    }
    fn needs(f: &super::model::FlavorUsage) -> bool {
        f.extra_resources.is_empty()
            && f.mem_encryption_model.is_none()
            && f.extra_specs
                .keys()
                .any(|k| k.starts_with("resources") || k == "hw:mem_encryption")
    }
    // A record is copied only to change it: another view may share it.
    for shared in state.instances.values_mut() {
        let flavors = [&shared.old_flavor, &shared.new_flavor];
        if !needs(&shared.request.flavor) && !flavors.into_iter().flatten().any(needs) {
            continue;
        }
        let inst = Arc::make_mut(shared);
        if needs(&inst.request.flavor) {
            upgrade(&mut Arc::make_mut(&mut inst.request).flavor);
        }
        for f in [inst.old_flavor.as_mut(), inst.new_flavor.as_mut()]
            .into_iter()
            .flatten()
        {
            if needs(f) {
                upgrade(f);
            }
        }
    }
    for shared in state
        .claims
        .values_mut()
        .chain(state.move_claims.values_mut())
    {
        if needs(&shared.request.flavor) {
            let claim = Arc::make_mut(shared);
            upgrade(&mut Arc::make_mut(&mut claim.request).flavor);
        }
    }
}
