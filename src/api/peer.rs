//! Who is on the other end of the API socket (SO_PEERCRED), and whether they may use it: root,
//! the daemon's own user, and members of the socket group. The socket's mode (0660) already
//! keeps others out at `connect`; this check also covers a socket whose mode or group was
//! changed by hand, and says who was refused in the log.
//!
//! In: a connected Unix stream (its SO_PEERCRED credentials and the peer's supplementary groups
//! from `/proc/<pid>/status`) and the socket group. Out: a [`Peer`] (described for logs), and
//! whether the [`Access`] allows it.

use std::path::Path;
use std::sync::OnceLock;

use nix::unistd::{Gid, Group, Uid, User};

/// The peer of one connection, read once when it connects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Peer {
    /// User id.
    pub uid: u32,
    /// Primary group id.
    pub gid: u32,
    /// Process id (`None` when the kernel gives none).
    pub pid: Option<i32>,
    /// Supplementary groups of that process, from `/proc/<pid>/status` (`None`: unreadable),
    /// read when first asked for: root, the daemon's user and the socket group's primary
    /// members are let in without it, and a file read per connection was about 4% of the
    /// daemon's time under many small claims.
    groups: OnceLock<Option<Vec<u32>>>,
}

impl Peer {
    /// The peer of a Unix stream.
    pub fn of(stream: &tokio::net::UnixStream) -> Peer {
        match stream.peer_cred() {
            Ok(c) => {
                let pid = c.pid();
                Peer {
                    uid: c.uid(),
                    gid: c.gid(),
                    pid,
                    groups: OnceLock::new(),
                }
            }
            // No credentials: nobody, which only root's policy below could let in (it cannot).
            Err(_) => Peer {
                uid: u32::MAX,
                gid: u32::MAX,
                pid: None,
                groups: OnceLock::from(None),
            },
        }
    }

    /// The process's supplementary groups (read from `/proc/<pid>/status` at the first call).
    pub fn groups(&self) -> Option<&[u32]> {
        self.groups
            .get_or_init(|| {
                let pid = self.pid?;
                process_groups(&Path::new("/proc").join(pid.to_string()).join("status"))
            })
            .as_deref()
    }

    /// `uid 1000 (alice), pid 4242`, for logs.
    pub fn describe(&self) -> String {
        let name = User::from_uid(Uid::from_raw(self.uid))
            .ok()
            .flatten()
            .map(|u| format!(" ({})", u.name))
            .unwrap_or_default();
        match self.pid {
            Some(p) => format!("uid {}{name}, pid {p}", self.uid),
            None => format!("uid {}{name}", self.uid),
        }
    }
}

/// The `Groups:` line of a `/proc/<pid>/status` file.
fn process_groups(status: &Path) -> Option<Vec<u32>> {
    let text = std::fs::read_to_string(status).ok()?;
    let line = text.lines().find_map(|l| l.strip_prefix("Groups:"))?;
    line.split_whitespace().map(|g| g.parse().ok()).collect()
}

/// Who may use the API.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Access {
    /// The socket group's id and name, if it exists.
    pub group: Option<(u32, String)>,
    /// The daemon's own user.
    pub daemon_uid: u32,
}

impl Access {
    /// Access for `group` (looked up now; a missing group leaves only root and the daemon's user).
    pub fn for_group(group: &str) -> Access {
        Access {
            group: Group::from_name(group)
                .ok()
                .flatten()
                .map(|g| (g.gid.as_raw(), g.name)),
            daemon_uid: Uid::effective().as_raw(),
        }
    }

    /// True when `peer` may use the API.
    pub fn allows(&self, peer: &Peer) -> bool {
        if peer.uid == 0 || peer.uid == self.daemon_uid {
            return true;
        }
        let Some((gid, name)) = &self.group else {
            return false;
        };
        if peer.gid == *gid {
            return true;
        }
        match peer.groups() {
            Some(groups) => groups.contains(gid),
            // The process's groups are unknown: the group database says whether the user is a
            // member.
            None => {
                let user = User::from_uid(Uid::from_raw(peer.uid)).ok().flatten();
                let group = Group::from_gid(Gid::from_raw(*gid)).ok().flatten();
                match (user, group) {
                    (Some(u), Some(g)) => g.name == *name && g.mem.contains(&u.name),
                    _ => false,
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peer(uid: u32, gid: u32, groups: Option<Vec<u32>>) -> Peer {
        Peer {
            uid,
            gid,
            pid: Some(1),
            groups: OnceLock::from(groups),
        }
    }

    #[test]
    fn the_status_file_is_read_only_when_the_ids_do_not_decide() {
        let a = Access {
            group: Some((900, "rtrack".into())),
            daemon_uid: 500,
        };
        // A pid no process has: reading its status would give no groups.
        let unread = |uid, gid| Peer {
            uid,
            gid,
            pid: Some(i32::MAX),
            groups: OnceLock::new(),
        };
        for p in [unread(0, 0), unread(500, 500), unread(1000, 900)] {
            assert!(a.allows(&p));
            assert!(p.groups.get().is_none(), "{p:?}: status read");
        }
        let other = unread(1000, 1000);
        assert!(!a.allows(&other));
        assert_eq!(
            other.groups.get(),
            Some(&None),
            "the status is read for a non-member"
        );
    }

    #[test]
    fn root_the_daemon_user_and_group_members_are_allowed() {
        let a = Access {
            group: Some((900, "rtrack".into())),
            daemon_uid: 500,
        };
        assert!(a.allows(&peer(0, 0, Some(vec![]))));
        assert!(a.allows(&peer(500, 500, Some(vec![]))));
        assert!(a.allows(&peer(1000, 900, Some(vec![]))));
        assert!(a.allows(&peer(1000, 1000, Some(vec![27, 900]))));
        assert!(!a.allows(&peer(1000, 1000, Some(vec![27]))));
        assert!(!a.allows(&peer(65534, 65534, Some(vec![65534]))));
        let no_group = Access {
            group: None,
            daemon_uid: 500,
        };
        assert!(!no_group.allows(&peer(1000, 900, Some(vec![900]))));
    }

    #[test]
    fn supplementary_groups_come_from_the_status_file() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("status");
        std::fs::write(
            &p,
            "Name:\tx\nUid:\t1\t1\t1\t1\nGroups:\t4 27 900 \nVmRSS:\t1 kB\n",
        )
        .unwrap();
        assert_eq!(process_groups(&p), Some(vec![4, 27, 900]));
        std::fs::write(&p, "Groups:\n").unwrap();
        assert_eq!(process_groups(&p), Some(vec![]));
        std::fs::write(&p, "Groups:\tx\n").unwrap();
        assert_eq!(process_groups(&p), None);
        assert_eq!(process_groups(&dir.path().join("missing")), None);
    }
}
