//! The tracker's state in SQLite (`<state_dir>/rtrack.db`): WAL journal, `synchronous=FULL`,
//! one transaction per batch of changes. A claim is acknowledged only after the transaction
//! holding it has committed, so an acknowledged claim survives a crash and a half-applied one
//! cannot exist.
//!
//! In: batches of the tracker's [`Changes`] (records to write or delete) from the service's writer.
//! Out: the whole [`TrackerState`] at start ([`Store::load`]), or a [`StoreError`] naming the file
//! (full disk, newer rtrack, corrupt row...).
//!
//! Schema versions (table `meta`, key `schema_version`):
//! - 1: the whole state as one JSON document (table `state`), rewritten on every change.
//! - 2: one row per device, instance, migration and claim, each holding a JSON record and the
//!   layout version of that record.
//! - 3: version 2 and a row per PCI Placement provider (`pci_providers`). Opening a
//!   version-2 database adds the empty table.
//! - 4 (current): version 3 and a row per consumer released here whose part in Placement is
//!   still to be removed (`released_consumers`). Opening an older database adds the table.
//!
//! Opening a version-1 database reads the state the old way, writes it the new way and drops
//! the old table, in one transaction. A record in an older layout is read the old way and
//! rewritten; a database or record from a newer rtrack is an error naming the file, never
//! silently overwritten.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rusqlite::{params, Connection, OptionalExtension, TransactionBehavior};
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::tracker::{Changes, TrackerState};

/// Current schema version.
pub const SCHEMA_VERSION: i64 = 4;
/// Current layout of the JSON records.
pub const RECORD_LAYOUT: i64 = 1;

/// A store error, naming the database file.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// SQLite failed.
    #[error("{path}: {message}")]
    Sqlite {
        /// The database.
        path: PathBuf,
        /// What failed.
        message: String,
    },
    /// The disk (or the filesystem's quota) is full: nothing was written.
    #[error("{path}: {message} (the filesystem is full: free some space; nothing was written)")]
    Full {
        /// The database.
        path: PathBuf,
        /// What SQLite said.
        message: String,
    },
    /// The database was written by a newer rtrack.
    #[error("{path}: {what} {found} was written by a newer rtrack (this one knows up to {supported}); refusing to touch it")]
    TooNew {
        /// The database.
        path: PathBuf,
        /// "schema version" or "record layout".
        what: &'static str,
        /// The version of `what` found in the database.
        found: i64,
        /// The newest version of `what` this rtrack knows.
        supported: i64,
    },
    /// The file is there but holds no rtrack state.
    #[error("{path}: not an rtrack database: {what}, so it holds no rtrack state; rtrackd will not take it for an empty one (that would forget every claim). Restore it from a backup, or start once with `rtrackd --start-empty` to move it aside (it is kept as {path}.bad-<time>) and begin with no claims")]
    NotRtrack {
        /// The database.
        path: PathBuf,
        /// What it is instead.
        what: String,
    },
    /// A record cannot be decoded.
    #[error("{path}: {table} row {key}: {message}")]
    Corrupt {
        /// The database.
        path: PathBuf,
        /// The table holding the bad row.
        table: &'static str,
        /// Row key.
        key: String,
        /// What was wrong.
        message: String,
    },
}

/// A row read: its key, and the record with whether it was in an older layout.
type Row<T> = (String, (T, bool));

/// The SQLite store.
pub struct Store {
    conn: Connection,
    path: PathBuf,
}

const TABLES: &[(&str, &str)] = &[
    ("devices", "address TEXT PRIMARY KEY"),
    ("instances", "uuid TEXT PRIMARY KEY"),
    ("migrations", "id INTEGER PRIMARY KEY"),
    ("claims", "uuid TEXT PRIMARY KEY"),
    ("move_claims", "migration_id INTEGER PRIMARY KEY"),
    ("pci_providers", "address TEXT PRIMARY KEY"),
    ("released_consumers", "uuid TEXT PRIMARY KEY"),
];

mod open;

impl Store {
    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn sql(&self, e: rusqlite::Error) -> StoreError {
        sqlite_error(&self.path, &e)
    }

    /// Loads the whole state. Records in older layouts are rewritten in the current one.
    pub fn load(&mut self) -> Result<TrackerState, StoreError> {
        let mut state = TrackerState::default();
        let mut upgraded = Changes::default();
        for (addr, d) in self.rows::<crate::tracker::pci::TrackedDevice>("devices", "address")? {
            let addr = crate::probes::pci::PciAddress::parse(&addr).ok_or_else(|| {
                StoreError::Corrupt {
                    path: self.path.clone(),
                    table: "devices",
                    key: addr.clone(),
                    message: "key is not a PCI address".into(),
                }
            })?;
            let record = Arc::new(d.0);
            if d.1 {
                upgraded.devices.insert(addr, Some(record.clone()));
            }
            state.devices.insert(addr, record);
        }
        for (k, v) in self.rows::<crate::tracker::model::InstanceRecord>("instances", "uuid")? {
            let record = Arc::new(v.0);
            if v.1 {
                upgraded.instances.insert(k.clone(), Some(record.clone()));
            }
            state.instances.insert(k, record);
        }
        for (k, v) in self.rows::<crate::tracker::model::MigrationRecord>("migrations", "id")? {
            let id = parse_id(&k, "migrations", &self.path)?;
            if v.1 {
                upgraded.migrations.insert(id, Some(v.0.clone()));
            }
            state.migrations.insert(id, v.0);
        }
        for (k, v) in self.rows::<crate::tracker::ClaimRecord>("claims", "uuid")? {
            let record = Arc::new(v.0);
            if v.1 {
                upgraded.claims.insert(k.clone(), Some(record.clone()));
            }
            state.claims.insert(k, record);
        }
        for (k, v) in self.rows::<crate::tracker::ClaimRecord>("move_claims", "migration_id")? {
            let id = parse_id(&k, "move_claims", &self.path)?;
            let record = Arc::new(v.0);
            if v.1 {
                upgraded.move_claims.insert(id, Some(record.clone()));
            }
            state.move_claims.insert(id, record);
        }
        for (k, v) in self.rows::<crate::tracker::PciProviderRecord>("pci_providers", "address")? {
            let addr =
                crate::probes::pci::PciAddress::parse(&k).ok_or_else(|| StoreError::Corrupt {
                    path: self.path.clone(),
                    table: "pci_providers",
                    key: k.clone(),
                    message: "key is not a PCI address".into(),
                })?;
            if v.1 {
                upgraded.pci_providers.insert(addr, Some(v.0.clone()));
            }
            state.pci_providers.insert(addr, v.0);
        }
        for (k, v) in self.rows::<crate::tracker::ReleasedConsumer>("released_consumers", "uuid")? {
            let u = uuid::Uuid::parse_str(&k).map_err(|_| StoreError::Corrupt {
                path: self.path.clone(),
                table: "released_consumers",
                key: k.clone(),
                message: "key is not a UUID".into(),
            })?;
            if v.1 {
                upgraded.released_consumers.insert(u, Some(v.0.clone()));
            }
            state.released_consumers.insert(u, v.0);
        }
        let counters: Option<String> = self
            .conn
            .query_row("SELECT value FROM meta WHERE key = 'counters'", [], |r| {
                r.get(0)
            })
            .optional()
            .map_err(|e| self.sql(e))?;
        if let Some(c) = counters {
            let (fb, next): (u64, i64) =
                serde_json::from_str(&c).map_err(|e| StoreError::Corrupt {
                    path: self.path.clone(),
                    table: "meta",
                    key: "counters".into(),
                    message: format!("expected [failed_builds, next_migration_id]: {e}"),
                })?;
            state.failed_builds = fb;
            state.next_migration_id = next;
        }
        let node: Option<String> = self
            .conn
            .query_row(
                "SELECT value FROM meta WHERE key = 'compute_node'",
                [],
                |r| r.get(0),
            )
            .optional()
            .map_err(|e| self.sql(e))?;
        if let Some(n) = node {
            state.compute_node =
                Some(serde_json::from_str(&n).map_err(|e| StoreError::Corrupt {
                    path: self.path.clone(),
                    table: "meta",
                    key: "compute_node".into(),
                    message: format!("expected a ComputeNode primitive (JSON): {e}"),
                })?);
        }
        if !upgraded.is_empty() {
            self.commit(&[upgraded])?;
        }
        state.share_requests();
        Ok(state)
    }

    /// Reads every row of a table: key, record, and whether it was in an older layout.
    fn rows<T: DeserializeOwned>(
        &self,
        table: &'static str,
        key: &str,
    ) -> Result<Vec<Row<T>>, StoreError> {
        let mut stmt = self
            .conn
            .prepare(&format!(
                "SELECT CAST({key} AS TEXT), layout, record FROM {table} ORDER BY {key}"
            ))
            .map_err(|e| self.sql(e))?;
        // Columns are read as whatever SQLite holds, so a damaged row is named with its table,
        // key and column rather than failing with a bare type error.
        let rows = stmt
            .query_map([], |r| {
                Ok((
                    r.get::<_, rusqlite::types::Value>(0)?,
                    r.get::<_, rusqlite::types::Value>(1)?,
                    r.get::<_, rusqlite::types::Value>(2)?,
                ))
            })
            .map_err(|e| self.sql(e))?;
        let mut out = Vec::new();
        for (n, row) in rows.enumerate() {
            let (k, layout, text) = row.map_err(|e| StoreError::Corrupt {
                path: self.path.clone(),
                table,
                key: format!("#{}", n + 1),
                message: describe(&e),
            })?;
            let corrupt = |key: &str, message: String| StoreError::Corrupt {
                path: self.path.clone(),
                table,
                key: key.to_string(),
                message,
            };
            let k = match k {
                rusqlite::types::Value::Text(t) => t,
                other => {
                    return Err(corrupt(
                        &format!("#{}", n + 1),
                        format!("column {key}: expected text, found {}", sql_value(&other)),
                    ))
                }
            };
            let layout = match layout {
                rusqlite::types::Value::Integer(i) => i,
                other => {
                    return Err(corrupt(
                        &k,
                        format!(
                            "column layout: expected an integer, found {}",
                            sql_value(&other)
                        ),
                    ))
                }
            };
            let text = match text {
                rusqlite::types::Value::Text(t) => t,
                other => {
                    return Err(corrupt(
                        &k,
                        format!(
                            "column record: expected JSON text, found {}",
                            sql_value(&other)
                        ),
                    ))
                }
            };
            if layout > RECORD_LAYOUT {
                return Err(StoreError::TooNew {
                    path: self.path.clone(),
                    what: "record layout",
                    found: layout,
                    supported: RECORD_LAYOUT,
                });
            }
            let value: serde_json::Value =
                serde_json::from_str(&text).map_err(|e| StoreError::Corrupt {
                    path: self.path.clone(),
                    table,
                    key: k.clone(),
                    message: format!("record is not JSON (column record): {e}"),
                })?;
            let value =
                upgrade_record(table, layout, value).map_err(|message| StoreError::Corrupt {
                    path: self.path.clone(),
                    table,
                    key: k.clone(),
                    message,
                })?;
            let rec: T = serde_json::from_value(value).map_err(|e| StoreError::Corrupt {
                path: self.path.clone(),
                table,
                key: k.clone(),
                message: format!(
                    "record does not fit (column record, a {table} record): {}",
                    crate::echo::bounded_message(&e.to_string())
                ),
            })?;
            out.push((k, (rec, layout < RECORD_LAYOUT)));
        }
        Ok(out)
    }

    /// Commits a batch of changes in one transaction, in order.
    pub fn commit<'a>(
        &mut self,
        batch: impl IntoIterator<Item = &'a Changes>,
    ) -> Result<(), StoreError> {
        let path = self.path.clone();
        let sql = |e: rusqlite::Error| sqlite_error(&path, &e);
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(sql)?;
        for changes in batch {
            write_rows(
                &tx,
                "devices",
                "address",
                changes
                    .devices
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.as_ref())),
            )
            .map_err(sql)?;
            write_rows(
                &tx,
                "instances",
                "uuid",
                changes
                    .instances
                    .iter()
                    .map(|(k, v)| (k.clone(), v.as_ref())),
            )
            .map_err(sql)?;
            write_rows(
                &tx,
                "migrations",
                "id",
                changes
                    .migrations
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.as_ref())),
            )
            .map_err(sql)?;
            write_rows(
                &tx,
                "claims",
                "uuid",
                changes.claims.iter().map(|(k, v)| (k.clone(), v.as_ref())),
            )
            .map_err(sql)?;
            write_rows(
                &tx,
                "move_claims",
                "migration_id",
                changes
                    .move_claims
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.as_ref())),
            )
            .map_err(sql)?;
            write_rows(
                &tx,
                "pci_providers",
                "address",
                changes
                    .pci_providers
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.as_ref())),
            )
            .map_err(sql)?;
            write_rows(
                &tx,
                "released_consumers",
                "uuid",
                changes
                    .released_consumers
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.as_ref())),
            )
            .map_err(sql)?;
            if let Some(c) = changes.counters {
                tx.execute(
                    "INSERT OR REPLACE INTO meta (key, value) VALUES ('counters', ?1)",
                    params![serde_json::json!([c.failed_builds, c.next_migration_id]).to_string()],
                )
                .map_err(sql)?;
            }
            if let Some(node) = &changes.compute_node {
                tx.execute(
                    "INSERT OR REPLACE INTO meta (key, value) VALUES ('compute_node', ?1)",
                    params![node.to_string()],
                )
                .map_err(sql)?;
            }
        }
        tx.commit().map_err(sql)
    }
}

fn write_rows<'a, T: Serialize + 'a>(
    tx: &rusqlite::Transaction<'_>,
    table: &str,
    key: &str,
    rows: impl Iterator<Item = (String, Option<&'a T>)>,
) -> Result<(), rusqlite::Error> {
    let mut put = tx.prepare_cached(&format!(
        "INSERT OR REPLACE INTO {table} ({key}, layout, record) VALUES (?1, ?2, ?3)"
    ))?;
    let mut del = tx.prepare_cached(&format!("DELETE FROM {table} WHERE {key} = ?1"))?;
    for (k, v) in rows {
        match v {
            Some(rec) => {
                // Serializing plain records cannot fail; an error would be a bug, reported as such.
                let text = serde_json::to_string(rec)
                    .map_err(|e| rusqlite::Error::ToSqlConversionFailure(Box::new(e)))?;
                put.execute(params![k, RECORD_LAYOUT, text])?;
            }
            None => {
                del.execute(params![k])?;
            }
        }
    }
    Ok(())
}

/// Upgrades a record from an older layout. Layout 1 is the first; this is where a layout 2
/// would convert layout-1 records.
fn upgrade_record(
    table: &str,
    layout: i64,
    value: serde_json::Value,
) -> Result<serde_json::Value, String> {
    match layout {
        RECORD_LAYOUT => Ok(value),
        other => Err(format!(
            "{table} record layout {other} is unknown (this rtrack writes layout {RECORD_LAYOUT})"
        )),
    }
}

fn parse_id(k: &str, table: &'static str, path: &Path) -> Result<i64, StoreError> {
    k.parse().map_err(|_| StoreError::Corrupt {
        path: path.to_path_buf(),
        table,
        key: k.to_string(),
        message: "key is not an integer id".into(),
    })
}

/// A SQLite error as a store error: a full disk is told apart (the API answers it 507 and the
/// claim can be retried once there is room).
fn sqlite_error(path: &Path, e: &rusqlite::Error) -> StoreError {
    match e {
        rusqlite::Error::SqliteFailure(f, _) if f.code == rusqlite::ErrorCode::DiskFull => {
            StoreError::Full {
                path: path.to_path_buf(),
                message: describe(e),
            }
        }
        _ => StoreError::Sqlite {
            path: path.to_path_buf(),
            message: describe(e),
        },
    }
}

/// A column's value in words, bounded.
fn sql_value(v: &rusqlite::types::Value) -> String {
    use rusqlite::types::Value;
    match v {
        Value::Null => "null".into(),
        Value::Integer(i) => format!("the integer {i}"),
        Value::Real(f) => format!("the number {f}"),
        Value::Text(t) => format!("the text {}", crate::echo::quoted(t)),
        Value::Blob(b) => format!("a blob of {} bytes", b.len()),
    }
}

fn describe(e: &rusqlite::Error) -> String {
    match e {
        rusqlite::Error::SqliteFailure(f, msg) if f.code == rusqlite::ErrorCode::NotADatabase => {
            format!(
                "not an rtrack database (or corrupted): {}",
                msg.as_deref().unwrap_or("file is not a database")
            )
        }
        rusqlite::Error::SqliteFailure(f, msg)
            if f.code == rusqlite::ErrorCode::DatabaseCorrupt =>
        {
            format!(
                "the database is corrupted: {}",
                msg.as_deref().unwrap_or("malformed")
            )
        }
        other => other.to_string(),
    }
}

/// Changes that write a whole state (used by the schema migration).
pub fn full_changes(state: &TrackerState) -> Changes {
    Changes {
        devices: state
            .devices
            .iter()
            .map(|(k, v)| (*k, Some(v.clone())))
            .collect(),
        instances: state
            .instances
            .iter()
            .map(|(k, v)| (k.clone(), Some(v.clone())))
            .collect(),
        migrations: state
            .migrations
            .iter()
            .map(|(k, v)| (*k, Some(v.clone())))
            .collect(),
        claims: state
            .claims
            .iter()
            .map(|(k, v)| (k.clone(), Some(v.clone())))
            .collect(),
        move_claims: state
            .move_claims
            .iter()
            .map(|(k, v)| (*k, Some(v.clone())))
            .collect(),
        counters: Some(crate::tracker::Counters {
            failed_builds: state.failed_builds,
            next_migration_id: state.next_migration_id,
        }),
        compute_node: state.compute_node.clone(),
        pci_providers: state
            .pci_providers
            .iter()
            .map(|(k, v)| (*k, Some(v.clone())))
            .collect(),
        released_consumers: state
            .released_consumers
            .iter()
            .map(|(k, v)| (*k, Some(v.clone())))
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample_state() -> TrackerState {
        let mut s = TrackerState {
            failed_builds: 2,
            next_migration_id: 9,
            compute_node: Some(
                serde_json::json!({"nova_object.name": "ComputeNode", "nova_object.data": {"vcpus": 8}}),
            ),
            ..TrackerState::default()
        };
        let rec: crate::tracker::model::MigrationRecord = serde_json::from_value(serde_json::json!({
            "id": 4, "uuid": "00000000-0000-4000-8000-000000000004", "instance_uuid": "00000000-0000-4000-8000-000000000001",
            "source_compute": "a", "source_node": "a", "dest_compute": "b", "dest_node": "b", "status": "pre-migrating",
            "migration_type": "resize", "old_instance_type_id": 1, "new_instance_type_id": 2, "created_at": 1, "updated_at": 2
        }))
        .unwrap();
        s.migrations.insert(4, rec);
        s.released_consumers.insert(
            uuid::Uuid::from_u128(7),
            crate::tracker::ReleasedConsumer {
                instance_uuid: "00000000-0000-4000-8000-000000000001".into(),
                released_at: 5,
            },
        );
        s
    }

    #[test]
    fn commits_survive_reopening() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("rtrack.sqlite");
        let state = sample_state();
        {
            let mut s = Store::open(&path).unwrap();
            s.commit(&[full_changes(&state)]).unwrap();
        }
        let mut s = Store::open(&path).unwrap();
        assert_eq!(s.load().unwrap(), state);
        // Deletions too.
        let mut del = Changes::default();
        del.migrations.insert(4, None);
        s.commit(&[del]).unwrap();
        assert!(Store::open(&path)
            .unwrap()
            .load()
            .unwrap()
            .migrations
            .is_empty());
    }

    #[test]
    fn a_version_1_database_is_migrated_in_place() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("rtrack.sqlite");
        let state = sample_state();
        {
            let c = Connection::open(&path).unwrap();
            c.execute_batch(
                "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
                 INSERT INTO meta VALUES ('schema_version', '1');
                 CREATE TABLE state (id INTEGER PRIMARY KEY, json TEXT NOT NULL);",
            )
            .unwrap();
            c.execute(
                "INSERT INTO state VALUES (1, ?1)",
                params![serde_json::to_string(&state).unwrap()],
            )
            .unwrap();
        }
        let mut s = Store::open(&path).unwrap();
        assert_eq!(s.load().unwrap(), state);
        let v: String = s
            .conn
            .query_row(
                "SELECT value FROM meta WHERE key='schema_version'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(v, SCHEMA_VERSION.to_string());
        let old: Option<String> = s
            .conn
            .query_row(
                "SELECT name FROM sqlite_master WHERE name='state'",
                [],
                |r| r.get(0),
            )
            .optional()
            .unwrap();
        assert_eq!(old, None);
    }

    #[test]
    fn a_version_2_database_gains_the_pci_providers_table_and_keeps_its_rows() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("rtrack.sqlite");
        let state = sample_state();
        {
            // A version-2 database: the tables of version 2 only.
            let c = Connection::open(&path).unwrap();
            c.execute_batch(
                "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
                 INSERT INTO meta VALUES ('schema_version', '2');",
            )
            .unwrap();
            for (table, key) in &TABLES[..5] {
                c.execute_batch(&format!(
                    "CREATE TABLE {table} ({key}, layout INTEGER NOT NULL, record TEXT NOT NULL)"
                ))
                .unwrap();
            }
            for (uuid, rec) in &state.instances {
                c.execute(
                    "INSERT INTO instances VALUES (?1, 1, ?2)",
                    params![uuid, serde_json::to_string(rec).unwrap()],
                )
                .unwrap();
            }
        }
        let mut s = Store::open(&path).unwrap();
        let loaded = s.load().unwrap();
        assert_eq!(loaded.instances, state.instances);
        let a = crate::probes::pci::PciAddress::parse("0000:3b:00.0").unwrap();
        let rec = crate::tracker::PciProviderRecord {
            uuid: uuid::Uuid::from_u128(42),
            origin: crate::tracker::PciProviderOrigin::Adopted,
        };
        let mut c = Changes::default();
        c.pci_providers.insert(a, Some(rec.clone()));
        s.commit(&[c]).unwrap();
        drop(s);
        let mut s = Store::open(&path).unwrap();
        assert_eq!(s.load().unwrap().pci_providers.get(&a), Some(&rec));
    }

    #[test]
    fn newer_schema_and_garbage_files_are_refused_naming_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("rtrack.sqlite");
        {
            let c = Connection::open(&path).unwrap();
            c.execute_batch("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL); INSERT INTO meta VALUES ('schema_version', '5');")
                .unwrap();
        }
        let e = Store::open(&path).err().unwrap().to_string();
        assert!(
            e.contains("rtrack.sqlite")
                && e.contains("schema version 5")
                && e.contains("newer rtrack"),
            "{e}"
        );
        let junk = dir.path().join("junk.sqlite");
        std::fs::write(&junk, vec![b'x'; 8192]).unwrap();
        let e = Store::open(&junk).err().unwrap().to_string();
        assert!(
            e.contains("junk.sqlite") && e.contains("not an rtrack database"),
            "{e}"
        );
        // The garbage file is left as it was.
        assert_eq!(std::fs::read(&junk).unwrap(), vec![b'x'; 8192]);
    }

    #[test]
    fn corrupt_and_newer_records_name_the_row() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("rtrack.sqlite");
        let mut s = Store::open(&path).unwrap();
        s.conn
            .execute("INSERT INTO instances VALUES ('x', 1, '{not json')", [])
            .unwrap();
        let e = s.load().unwrap_err().to_string();
        assert!(e.contains("instances row x: record is not JSON"), "{e}");
        s.conn
            .execute("UPDATE instances SET layout = 7", [])
            .unwrap();
        let e = s.load().unwrap_err().to_string();
        assert!(e.contains("record layout 7"), "{e}");
    }
}
