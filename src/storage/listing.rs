//! Listing a directory or prefix: whole, or from a name on (a log polled for what is new).

use std::io;
use std::path::Path;

use object_store::path::Path as ObjectPath;

use super::{block_on, is_remote, map_err, Entry, Op, Storage};

impl Storage {
    /// The entries directly under `dir` (NotFound when a local directory does not exist; a remote
    /// prefix without objects is empty).
    pub fn list(&self, dir: &Path) -> io::Result<Vec<Entry>> {
        if !is_remote(dir) {
            self.count(Op::List);
            return local_entries(dir, |_| true);
        }
        let (st, key) = self.store(dir)?;
        let prefix = if key.as_ref().is_empty() { None } else { Some(key) };
        let listing = block_on(async move { st.list_with_delimiter(prefix.as_ref()).await }).map_err(map_err)?;
        self.inner
            .requests
            .listed(listing.objects.len() + listing.common_prefixes.len());
        let mut out = Vec::new();
        for d in listing.common_prefixes {
            let name = d.filename().unwrap_or_default().to_string();
            out.push(Entry {
                path: dir.join(&name),
                name,
                is_dir: true,
                size: 0,
            });
        }
        for o in listing.objects {
            let name = o.location.filename().unwrap_or_default().to_string();
            out.push(Entry {
                path: dir.join(&name),
                name,
                is_dir: false,
                size: o.size,
            });
        }
        Ok(out)
    }

    /// The files directly under `dir` whose names sort after `after`, in name order, up to the
    /// first name `wanted` refuses: an object store lists in name order from `after` (S3's
    /// `start-after`), so the names before it and the pages after the last wanted one are never
    /// fetched. A poll of a log directory costs one request however long the log grew.
    pub fn list_after(
        &self,
        dir: &Path,
        after: &str,
        wanted: impl Fn(&str) -> bool + Send + 'static,
    ) -> io::Result<Vec<Entry>> {
        if !is_remote(dir) {
            self.count(Op::List);
            let mut out = local_entries(dir, |n| n > after)?;
            out.retain(|e| !e.is_dir);
            out.sort_by(|a, b| a.name.cmp(&b.name));
            let end = out.iter().position(|e| !wanted(&e.name)).unwrap_or(out.len());
            out.truncate(end);
            return Ok(out);
        }
        let (st, key) = self.store(dir)?;
        let offset = ObjectPath::from(format!("{}/{after}", key.as_ref()));
        let objects = block_on(async move {
            use futures::StreamExt;
            let mut listed = st.list_with_offset(Some(&key), &offset);
            let mut out = Vec::new();
            while let Some(o) = listed.next().await {
                let o = o?;
                // a deeper object (`_sidecars/...`) or a refused name ends the listing, and with
                // it the pages after it
                let name = o.location.as_ref().strip_prefix(key.as_ref()).unwrap_or_default();
                match name.strip_prefix('/').filter(|n| !n.contains('/')) {
                    Some(n) if wanted(n) => out.push((n.to_string(), o.size)),
                    _ => break,
                }
            }
            Ok::<_, object_store::Error>(out)
        })
        .map_err(map_err)?;
        self.inner.requests.listed(objects.len());
        Ok(objects
            .into_iter()
            .map(|(name, size)| Entry {
                path: dir.join(&name),
                name,
                is_dir: false,
                size,
            })
            .collect())
    }
}

/// The entries of a local directory whose names `keep` accepts.
fn local_entries(dir: &Path, keep: impl Fn(&str) -> bool) -> io::Result<Vec<Entry>> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir)? {
        let e = e?;
        let name = e.file_name().to_string_lossy().into_owned();
        if !keep(&name) {
            continue;
        }
        let ft = e.file_type()?;
        let size = if ft.is_file() {
            e.metadata().map(|m| m.len()).unwrap_or(0)
        } else {
            0
        };
        out.push(Entry {
            name,
            path: e.path(),
            is_dir: ft.is_dir(),
            size,
        });
    }
    Ok(out)
}
