//! Opening the store: the database file refused when it holds no rtrack state, created under a
//! temporary name when there is none, its WAL files kept across restarts, and its schema
//! migrated forward (written only when it is not current).
//!
//! In: the database path. Out: a [`Store`] whose schema is current, or a [`StoreError`]: not an
//! rtrack database, written by a newer rtrack, or a SQLite or filesystem failure.

use std::path::{Path, PathBuf};

use rusqlite::{params, Connection, OptionalExtension, TransactionBehavior};

use super::{describe, full_changes, Store, StoreError, SCHEMA_VERSION, TABLES};
use crate::tracker::TrackerState;

impl Store {
    /// Opens the database, applying forward migrations; creates it when there is no file. A
    /// file that is there but holds no rtrack state (empty, truncated, another database,
    /// garbage) is refused, never taken for an empty state: that would forget every claim.
    pub fn open(path: &Path) -> Result<Store, StoreError> {
        let not_rtrack = |what: &str| StoreError::NotRtrack {
            path: path.to_path_buf(),
            what: what.to_string(),
        };
        match std::fs::metadata(path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Self::create(path)?,
            Err(e) => {
                return Err(StoreError::Sqlite {
                    path: path.to_path_buf(),
                    message: format!("cannot read the file: {e}"),
                })
            }
            Ok(m) if !m.is_file() => return Err(not_rtrack("it is not a regular file")),
            Ok(m) if m.len() == 0 => return Err(not_rtrack("it is empty (0 bytes)")),
            Ok(_) => {}
        }
        let store = Self::connect(path).map_err(|e| match e {
            StoreError::Sqlite { message, .. } if message.starts_with("not an rtrack database") => {
                not_rtrack("it is not a SQLite database")
            }
            other => other,
        })?;
        let has_meta: bool = store
            .conn
            .query_row(
                "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'meta'",
                [],
                |r| r.get::<_, i64>(0),
            )
            .map(|n| n > 0)
            .map_err(|e| store.sql(e))?;
        if !has_meta {
            return Err(not_rtrack(
                "it is a SQLite database without rtrack's tables",
            ));
        }
        let mut store = store;
        store.keep_wal_files()?;
        store.migrate()?;
        Ok(store)
    }

    /// Keeps the `-wal` and `-shm` files when the database is closed (the WAL emptied), so a
    /// restart with nothing to write needs no disk space: a full disk must not keep rtrackd
    /// from starting and answering from what it has.
    fn keep_wal_files(&self) -> Result<(), StoreError> {
        let mut on: std::ffi::c_int = 1;
        // SAFETY: the handle is this open connection's; SQLITE_FCNTL_PERSIST_WAL reads and
        // writes one int through the pointer, which lives across the call.
        let rc = unsafe {
            rusqlite::ffi::sqlite3_file_control(
                self.conn.handle(),
                c"main".as_ptr(),
                rusqlite::ffi::SQLITE_FCNTL_PERSIST_WAL,
                (&mut on as *mut std::ffi::c_int).cast(),
            )
        };
        if rc != rusqlite::ffi::SQLITE_OK {
            return Err(StoreError::Sqlite {
                path: self.path.clone(),
                message: format!("cannot keep the WAL files (SQLite code {rc})"),
            });
        }
        Ok(())
    }

    /// A new database: built under a temporary name and renamed into place once its schema is
    /// committed, so a crash never leaves a half-made database under the real name.
    fn create(path: &Path) -> Result<(), StoreError> {
        let io = |what: &str, e: std::io::Error| StoreError::Sqlite {
            path: path.to_path_buf(),
            message: format!("{what}: {e}"),
        };
        let parent = path.parent().unwrap_or(Path::new("."));
        std::fs::create_dir_all(parent).map_err(|e| io("cannot create the directory", e))?;
        let mut tmp = path.as_os_str().to_owned();
        tmp.push(".new");
        let tmp = PathBuf::from(tmp);
        for leftover in ["", "-wal", "-shm"] {
            let mut p = tmp.as_os_str().to_owned();
            p.push(leftover);
            let _ = std::fs::remove_file(PathBuf::from(p));
        }
        {
            let mut store = Self::connect(&tmp)?;
            store.migrate()?;
        }
        std::fs::rename(&tmp, path).map_err(|e| io("cannot put the new database in place", e))?;
        std::fs::File::open(parent)
            .and_then(|d| d.sync_all())
            .map_err(|e| io("cannot sync the state directory", e))?;
        Ok(())
    }

    /// A connection with rtrack's settings.
    fn connect(path: &Path) -> Result<Store, StoreError> {
        let err = |e: rusqlite::Error| StoreError::Sqlite {
            path: path.to_path_buf(),
            message: describe(&e),
        };
        let conn = Connection::open(path).map_err(err)?;
        conn.busy_timeout(std::time::Duration::from_secs(5))
            .map_err(err)?;
        // journal_mode answers with the mode in force; a file that is not a database fails here.
        let mode: String = conn
            .query_row("PRAGMA journal_mode=WAL", [], |r| r.get(0))
            .map_err(err)?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(StoreError::Sqlite {
                path: path.to_path_buf(),
                message: format!("cannot use the WAL journal (got {mode})"),
            });
        }
        // A small page cache: the state is read once at start and kept in memory; commits
        // touch a few pages each.
        conn.execute_batch(
            "PRAGMA synchronous=FULL; PRAGMA foreign_keys=ON; PRAGMA cache_size=-256; PRAGMA journal_size_limit=8388608;",
        )
        .map_err(err)?;
        Ok(Store {
            conn,
            path: path.to_path_buf(),
        })
    }

    fn migrate(&mut self) -> Result<(), StoreError> {
        // Nothing to do is the common case at every start: find out without a write
        // transaction, so a start on a full disk or beside a held write lock needs no write.
        let current: Option<String> = self
            .conn
            .query_row(
                "SELECT value FROM meta WHERE key = 'schema_version'",
                [],
                |r| r.get(0),
            )
            .optional()
            .unwrap_or(None);
        if current.as_deref() == Some(SCHEMA_VERSION.to_string().as_str()) {
            return Ok(());
        }
        let path = self.path.clone();
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(|e| StoreError::Sqlite {
                path: path.clone(),
                message: describe(&e),
            })?;
        let sql = |e: rusqlite::Error| StoreError::Sqlite {
            path: path.clone(),
            message: describe(&e),
        };
        tx.execute_batch(
            "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
        )
        .map_err(sql)?;
        let version: Option<String> = tx
            .query_row(
                "SELECT value FROM meta WHERE key = 'schema_version'",
                [],
                |r| r.get(0),
            )
            .optional()
            .map_err(sql)?;
        let version: i64 = match version {
            None => 0,
            Some(v) => v.parse().map_err(|_| StoreError::Corrupt {
                path: path.clone(),
                table: "meta",
                key: "schema_version".into(),
                message: format!("{v:?} is not a version number"),
            })?,
        };
        if version > SCHEMA_VERSION {
            return Err(StoreError::TooNew {
                path,
                what: "schema version",
                found: version,
                supported: SCHEMA_VERSION,
            });
        }
        let mut old_state: Option<TrackerState> = None;
        if version == 1 {
            // Version 1 kept everything in one JSON document.
            let doc: Option<String> = tx
                .query_row("SELECT json FROM state WHERE id = 1", [], |r| r.get(0))
                .optional()
                .map_err(sql)?;
            old_state = Some(match doc {
                Some(d) => serde_json::from_str(&d).map_err(|e| StoreError::Corrupt {
                    path: path.clone(),
                    table: "state",
                    key: "1".into(),
                    message: format!("not a tracker state: {e}"),
                })?,
                None => TrackerState::default(),
            });
            tx.execute_batch("DROP TABLE state").map_err(sql)?;
        }
        if version < SCHEMA_VERSION {
            for (table, key) in TABLES {
                tx.execute_batch(&format!(
                    "CREATE TABLE IF NOT EXISTS {table} ({key}, layout INTEGER NOT NULL, record TEXT NOT NULL)"
                ))
                .map_err(sql)?;
            }
            tx.execute(
                "INSERT OR REPLACE INTO meta (key, value) VALUES ('schema_version', ?1)",
                params![SCHEMA_VERSION.to_string()],
            )
            .map_err(sql)?;
        }
        tx.commit().map_err(sql)?;
        if let Some(state) = old_state {
            self.commit(&[full_changes(&state)])?;
        }
        Ok(())
    }
}
