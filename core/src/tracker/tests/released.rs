//! Which Placement consumer holds each side of a move (Nova's rule: the source side is the
//! migration's, the destination side the instance's; an evacuation keeps both on the
//! instance), and the consumers an operation releases, recorded with it.

use super::*;
use std::collections::BTreeMap;

use crate::tracker::usage::UsageSource;

fn migration_uuid(n: u32) -> String {
    format!("00000000-0000-4000-9000-{n:012}")
}

/// The holders of every counted side, by source.
fn holders(t: &Tracker) -> Vec<(UsageSource, String, bool)> {
    t.usage()
        .consumers
        .iter()
        .map(|c| (c.source, c.holder.uuid.clone(), c.holder.migration))
        .collect()
}

/// Runs an operation's changes through the release bookkeeping, as the service does.
fn noted(t: &mut Tracker, mut c: Changes, now: i64) -> Changes {
    t.note_releases(&mut c, now);
    c
}

fn released(t: &Tracker) -> Vec<String> {
    t.state()
        .released_consumers
        .keys()
        .map(|u| u.to_string())
        .collect()
}

fn move_to(dest: &str, id: i64, move_type: Option<MoveType>) -> MoveRequest {
    MoveRequest {
        current_numa: None,
        instance: InstanceInfo {
            uuid: uuid(1),
            host: Some("cmp1".into()),
            node: Some("cmp1".into()),
            vm_state: Some("active".into()),
            task_state: matches!(move_type, Some(MoveType::Evacuation))
                .then(|| "rebuilding".to_string()),
            ..Default::default()
        },
        current: Some(req(flavor(1, 2, 1024, 10, &[]), vec![])),
        new: req(flavor(2, 4, 2048, 20, &[]), vec![]),
        move_type,
        migration_id: Some(id),
        migration_uuid: Some(migration_uuid(id as u32)),
        source_compute: None,
        source_node: None,
        dest_compute: Some(dest.into()),
        dest_node: Some(dest.into()),
    }
}

#[test]
fn a_source_side_is_the_migrations_from_the_start_of_the_move() {
    let mut t = tracker();
    let (_, c) = t
        .instance_claim(
            &info(1),
            &req(flavor(1, 2, 1024, 10, &[]), vec![]),
            0,
            false,
        )
        .unwrap();
    assert!(noted(&mut t, c, 1).released_consumers.is_empty());
    assert_eq!(holders(&t), vec![(UsageSource::Instance, uuid(1), false)]);
    // The move starts: the instance is still here, its side is now the migration's.
    let (_, c) = t.move_claim(&move_to("cmp2", 5, None), 10, false).unwrap();
    let c = noted(&mut t, c, 10);
    assert_eq!(
        holders(&t),
        vec![(UsageSource::Instance, migration_uuid(5), true)]
    );
    assert_eq!(
        released(&t),
        vec![uuid(1)],
        "the instance's consumer let go"
    );
    assert_eq!(c.released_consumers.len(), 1);
    // finish_resize: the instance lives on cmp2; the source still holds the old flavor.
    let c = t
        .update_instance(
            &uuid(1),
            &InstanceUpdate {
                vm_state: Some("resized".into()),
                host: Some("cmp2".into()),
                node: Some("cmp2".into()),
                task_state: Some(String::new()),
                ..Default::default()
            },
        )
        .unwrap();
    noted(&mut t, c, 11);
    assert_eq!(
        holders(&t),
        vec![(UsageSource::OutgoingMigration, migration_uuid(5), true)]
    );
    // Confirmed: the migration's consumer is released too.
    let c = t.confirm_move(5, 20).unwrap();
    noted(&mut t, c, 20);
    let mut all = released(&t);
    all.sort();
    assert_eq!(all, vec![uuid(1), migration_uuid(5)]);
}

#[test]
fn a_reverted_move_holds_the_instance_again_and_forgets_its_release() {
    let mut t = tracker();
    let (_, c) = t
        .instance_claim(
            &info(1),
            &req(flavor(1, 2, 1024, 10, &[]), vec![]),
            0,
            false,
        )
        .unwrap();
    noted(&mut t, c, 1);
    let (_, c) = t.move_claim(&move_to("cmp2", 5, None), 10, false).unwrap();
    noted(&mut t, c, 10);
    assert_eq!(released(&t), vec![uuid(1)]);
    let c = t.revert_move(5, 20).unwrap();
    let c = noted(&mut t, c, 20);
    assert_eq!(holders(&t), vec![(UsageSource::Instance, uuid(1), false)]);
    assert_eq!(released(&t), vec![migration_uuid(5)]);
    let forgotten = c
        .released_consumers
        .iter()
        .filter(|(_, v)| v.is_none())
        .count();
    assert_eq!(forgotten, 1, "the instance's release is dropped: {c:?}");
}

#[test]
fn a_same_node_resize_puts_the_old_flavor_under_the_migration() {
    let mut t = tracker();
    claim(&mut t, 1, req(flavor(1, 2, 1024, 10, &[]), vec![])).unwrap();
    let mut mv = move_to("cmp1", 6, None);
    mv.dest_compute = None;
    mv.dest_node = None;
    t.move_claim(&mv, 10, false).unwrap();
    let by_source: Vec<(UsageSource, String, i64)> = t
        .usage()
        .consumers
        .iter()
        .map(|c| {
            (
                c.source,
                c.holder.uuid.clone(),
                c.resources[&ResourceClass::Vcpu],
            )
        })
        .collect();
    assert_eq!(
        by_source,
        vec![
            (UsageSource::Instance, migration_uuid(6), 2),
            (UsageSource::SameNodeMigration, uuid(1), 4)
        ],
        "old flavor (2 VCPU) under the migration, new (4) under the instance"
    );
    // finish_resize applies the new flavor: still new under the instance, old under the
    // migration.
    t.update_instance(
        &uuid(1),
        &InstanceUpdate {
            vm_state: Some("resized".into()),
            task_state: Some(String::new()),
            apply_new_flavor: true,
            ..Default::default()
        },
    )
    .unwrap();
    let by_holder: BTreeMap<String, i64> = t
        .usage()
        .consumers
        .iter()
        .map(|c| (c.holder.uuid.clone(), c.resources[&ResourceClass::Vcpu]))
        .collect();
    assert_eq!(
        by_holder,
        BTreeMap::from([(uuid(1), 4), (migration_uuid(6), 2)])
    );
}

#[test]
fn an_incoming_move_and_an_evacuation_are_the_instances() {
    let mut t = tracker();
    let mut mv = move_to("cmp1", 7, None);
    mv.instance.host = Some("cmp0".into());
    mv.instance.node = Some("cmp0".into());
    t.move_claim(&mv, 10, false).unwrap();
    assert_eq!(
        holders(&t),
        vec![(UsageSource::IncomingMigration, uuid(1), false)]
    );

    let mut t = tracker();
    claim(&mut t, 1, req(flavor(1, 2, 1024, 10, &[]), vec![])).unwrap();
    let (_, c) = t
        .move_claim(&move_to("cmp2", 8, Some(MoveType::Evacuation)), 10, false)
        .unwrap();
    noted(&mut t, c, 10);
    assert!(
        holders(&t).iter().all(|(_, u, m)| *u == uuid(1) && !m),
        "{:?}",
        holders(&t)
    );
    assert!(released(&t).is_empty());
}

#[test]
fn an_abort_releases_and_a_new_claim_holds_again() {
    let mut t = tracker();
    let (_, c) = t
        .instance_claim(
            &info(1),
            &req(flavor(1, 2, 1024, 10, &[]), vec![]),
            0,
            false,
        )
        .unwrap();
    noted(&mut t, c, 1);
    let c = t.abort(&uuid(1)).unwrap();
    let c = noted(&mut t, c, 2);
    assert_eq!(released(&t), vec![uuid(1)]);
    assert_eq!(
        c.released_consumers[&uuid::Uuid::parse_str(&uuid(1)).unwrap()]
            .as_ref()
            .map(|r| r.released_at),
        Some(2)
    );
    // Forgetting needs the release the reporter saw.
    let u = uuid::Uuid::parse_str(&uuid(1)).unwrap();
    assert!(t.forget_released(&[(u, 1)]).is_empty());
    let (_, c) = t
        .instance_claim(
            &info(1),
            &req(flavor(1, 2, 1024, 10, &[]), vec![]),
            3,
            false,
        )
        .unwrap();
    noted(&mut t, c, 3);
    assert!(released(&t).is_empty(), "held again");
    let c = t.abort(&uuid(1)).unwrap();
    noted(&mut t, c, 4);
    assert!(t.forget_released(&[(u, 2)]).is_empty(), "an older release");
    assert!(!t.forget_released(&[(u, 4)]).is_empty());
    assert!(released(&t).is_empty());
}
