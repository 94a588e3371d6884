//! Reading and writing a lock's line of contenders: create a node (its parents as
//! container nodes), read the line in order, drop detached leases whose time is up.

use zookeeper_client::{Client, CreateOptions, Error as ZkError, Stat};

use super::layout::{self, Entry};
use crate::backend::line;
use crate::backend::Sharing;

/// What a lock's line looks like now.
pub struct Line {
    /// The live contenders, the holder first; a detached lease past its expiry is left out
    /// (and removed, when the reader may write). When read up to our own node, only those
    /// before it.
    pub entries: Vec<Entry>,
    /// Read up to our node: it is still there, and this many contenders follow it.
    pub ours: Option<usize>,
    /// The zxid of the last change to the lock's children.
    pub pzxid: i64,
    /// Our node came first in the listing (no node before it, live or expired).
    pub first: bool,
}

impl Line {
    /// The holder, if any.
    pub fn holder(&self) -> Option<&Entry> {
        self.entries.first()
    }

    /// How each contender holds the key, in line order.
    pub fn sharings(&self) -> Vec<Sharing> {
        line::sharings(&self.entries)
    }

    /// The contenders that hold the key (see [`line::holding`]), the first first.
    pub fn holding(&self) -> &[Entry] {
        line::holders(&self.entries)
    }
}

/// Reads the line of the lock at `path`, up to our node `ours` when given (the nodes
/// after it are only counted). With `sweep`, a detached lease whose time is up is deleted
/// (only at the version that was read, so a renewal that raced wins).
pub async fn read(
    client: &Client,
    path: &str,
    sweep: bool,
    ours: Option<&str>,
) -> Result<Line, ZkError> {
    let (children, parent) = match client.get_children(path).await {
        Ok((c, stat)) => (c, stat.pzxid),
        Err(ZkError::NoNode) => (Vec::new(), 0),
        Err(e) => return Err(e),
    };
    let mut line = Line {
        entries: Vec::new(),
        ours: None,
        pzxid: parent,
        first: false,
    };
    let names = layout::contenders(children);
    let before = match ours.and_then(|o| names.iter().position(|n| n == o)) {
        Some(i) => {
            line.ours = Some(names.len() - i - 1);
            line.first = i == 0;
            i
        }
        None => names.len(),
    };
    // The nodes ahead are read at once, pipelined on the session: one round trip for the
    // whole line rather than one per contender.
    let reads = names[..before].iter().map(|name| {
        let node = format!("{path}/{name}");
        async move {
            let found = client.get_data(&node).await;
            (name, node, found)
        }
    });
    for (name, node, found) in futures_util::future::join_all(reads).await {
        let (data, stat) = match found {
            Ok(found) => found,
            Err(ZkError::NoNode) => continue,
            // Its ACL hides what it says, not that it is there: it holds or waits all the
            // same (its stat needs no right to read).
            Err(ZkError::NoAuth) => {
                if let Some(stat) = client.check_stat(&node).await? {
                    line.entries.push(Entry::unreadable(name, &stat));
                }
                continue;
            }
            Err(e) => return Err(e),
        };
        let entry = Entry::read(name, &data, &stat);
        if !entry.expired() {
            line.entries.push(entry);
            continue;
        }
        if sweep {
            match client.delete(&node, Some(stat.version)).await {
                Ok(()) | Err(ZkError::NoNode) | Err(ZkError::BadVersion) => {}
                Err(e) => return Err(e),
            }
        }
    }
    Ok(line)
}

/// Creates `path` (a sequential node's prefix, or a plain node), its missing parents as
/// container nodes, as Curator's `creatingParentContainersIfNeeded` does. Returns the
/// created node's path.
pub async fn create(
    client: &Client,
    path: &str,
    data: &[u8],
    options: &CreateOptions<'_>,
    parents: &CreateOptions<'_>,
) -> Result<(String, Stat), ZkError> {
    let created = match client.create(path, data, options).await {
        Err(ZkError::NoNode) => {
            make_parents(client, path, parents).await?;
            client.create(path, data, options).await?
        }
        other => other?,
    };
    let (stat, seq) = created;
    let node = match seq.into_i64() {
        n if n >= 0 => format!("{path}{:010}", n),
        _ => path.to_string(),
    };
    Ok((node, stat))
}

/// Creates every missing ancestor of `path`.
async fn make_parents(
    client: &Client,
    path: &str,
    parents: &CreateOptions<'_>,
) -> Result<(), ZkError> {
    let mut at = 0;
    while let Some(i) = path[at + 1..].find('/') {
        let dir = &path[..at + 1 + i];
        match client.create(dir, &[], parents).await {
            Ok(_) | Err(ZkError::NodeExists) => {}
            Err(e) => return Err(e),
        }
        at += 1 + i;
    }
    Ok(())
}
