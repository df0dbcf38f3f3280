//! Files to read Parquet from: a local file, or a remote object read in ranges.
//!
//! A remote object is never fetched whole (a base file can be gigabytes, and several are read at
//! once). Opening one fetches its last 64 KiB (the footer and, usually, the whole metadata; the
//! same request tells the object's size). Once the metadata is parsed, [`Input::plan`] hands over
//! where each column chunk lies, and every later read fetches a window of the column chunk it
//! falls in: the whole chunk when it is at most [`WINDOW`] long, else the next [`WINDOW`] bytes.
//! One window is held per column chunk, and only for the row group being read, so a remote file
//! holds at most one window per projected column however large the file or its row groups are;
//! columns that are not projected are never fetched. This is the byte-range access of parquet's
//! async `ParquetObjectReader`, kept behind the synchronous `ChunkReader` the readers already use
//! on their blocking threads (one reader path for local and remote files).

use std::io;
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use object_store::path::Path as ObjectPath;
use object_store::{GetOptions, GetRange, ObjectStore, ObjectStoreExt};
use parquet::file::metadata::ParquetMetaData;

/// The most a remote file fetches for one column chunk at a time.
pub const WINDOW: u64 = 8 << 20;
/// What opening a remote file fetches from its end.
const TAIL: u64 = 64 << 10;

/// A file to read Parquet from.
#[derive(Clone)]
pub enum Input {
    File(Arc<std::fs::File>),
    Remote(Arc<RemoteFile>),
}

impl Input {
    /// Tell a remote file where its column chunks lie (from its parsed metadata), so reads fetch
    /// column-chunk windows; a local file needs nothing.
    pub fn plan(&self, meta: &ParquetMetaData) {
        if let Input::Remote(r) = self {
            r.plan(meta);
        }
    }

    /// Bytes fetched from the store so far (0 for a local file).
    pub fn fetched(&self) -> u64 {
        match self {
            Input::File(_) => 0,
            Input::Remote(r) => r.fetched.load(Ordering::Relaxed),
        }
    }

    /// The most bytes a remote file has held at once.
    pub fn peak_held(&self) -> u64 {
        match self {
            Input::File(_) => 0,
            Input::Remote(r) => r.peak.load(Ordering::Relaxed),
        }
    }
}

/// A remote object read in ranges (see the module doc).
pub struct RemoteFile {
    store: Arc<dyn ObjectStore>,
    key: ObjectPath,
    size: u64,
    /// Column chunks: byte range and row group, by start.
    chunks: Mutex<Vec<(Range<u64>, usize)>>,
    held: Mutex<Held>,
    fetched: AtomicU64,
    peak: AtomicU64,
}

#[derive(Default)]
struct Held {
    /// The last byte range of the file (footer and metadata).
    tail: Option<(u64, Bytes)>,
    /// Windows of the row group being read: (start, bytes).
    windows: Vec<(u64, Bytes)>,
    row_group: Option<usize>,
}

impl Held {
    fn bytes(&self) -> u64 {
        let t = self.tail.as_ref().map_or(0, |(_, b)| b.len() as u64);
        t + self.windows.iter().map(|(_, b)| b.len() as u64).sum::<u64>()
    }

    /// The held bytes from `start` on, when held.
    fn at(&self, start: u64) -> Option<Bytes> {
        self.tail
            .iter()
            .chain(self.windows.iter())
            .find(|(s, b)| *s <= start && start < s + b.len() as u64)
            .map(|(s, b)| b.slice((start - s) as usize..))
    }
}

impl RemoteFile {
    /// Open `key`: its size and last bytes in one request.
    pub(super) fn open(store: Arc<dyn ObjectStore>, key: ObjectPath) -> io::Result<RemoteFile> {
        let (st, k) = (store.clone(), key.clone());
        let got = super::block_on(async move {
            let r = st
                .get_opts(&k, GetOptions::new().with_range(Some(GetRange::Suffix(TAIL))))
                .await?;
            let (size, range) = (r.meta.size, r.range.clone());
            Ok::<_, object_store::Error>((size, range, r.bytes().await?))
        })
        .map_err(super::map_err)
        .map_err(tag_transient)?;
        let (size, range, tail) = got;
        let file = RemoteFile {
            store,
            key,
            size,
            chunks: Mutex::new(Vec::new()),
            held: Mutex::new(Held::default()),
            fetched: AtomicU64::new(tail.len() as u64),
            peak: AtomicU64::new(tail.len() as u64),
        };
        lock(&file.held).tail = Some((range.start, tail));
        Ok(file)
    }

    fn plan(&self, meta: &ParquetMetaData) {
        let mut chunks: Vec<(Range<u64>, usize)> = meta
            .row_groups()
            .iter()
            .enumerate()
            .flat_map(|(rg, g)| {
                g.columns().iter().map(move |c| {
                    let (start, len) = c.byte_range();
                    (start..start + len, rg)
                })
            })
            .collect();
        chunks.sort_by_key(|(r, _)| r.start);
        *lock(&self.chunks) = chunks;
    }

    /// Held bytes from `start` on (at least one byte unless `start` is the end of the file),
    /// fetching the window `start` falls in when it is not held.
    fn window(&self, start: u64) -> io::Result<Bytes> {
        if start >= self.size {
            return Ok(Bytes::new());
        }
        if let Some(b) = lock(&self.held).at(start) {
            return Ok(b);
        }
        let chunk = {
            let chunks = lock(&self.chunks);
            let i = chunks.partition_point(|(r, _)| r.start <= start);
            i.checked_sub(1)
                .map(|i| chunks[i].clone())
                .filter(|(r, _)| start < r.end)
        };
        let (end, row_group) = match &chunk {
            Some((r, rg)) => (r.end.min(start + WINDOW), Some(*rg)),
            // outside every column chunk (metadata, page indexes): a small window
            None => ((start + TAIL).min(self.size), None),
        };
        let bytes = self.fetch(start..end)?;
        let mut held = lock(&self.held);
        if row_group.is_some() && row_group != held.row_group {
            held.windows.clear();
            held.row_group = row_group;
        }
        // one window per column chunk: the chunk's earlier window is done with
        if let Some((r, _)) = &chunk {
            held.windows.retain(|(s, _)| !r.contains(s));
        }
        held.windows.push((start, bytes.clone()));
        self.peak.fetch_max(held.bytes(), Ordering::Relaxed);
        Ok(bytes)
    }

    fn fetch(&self, range: Range<u64>) -> io::Result<Bytes> {
        self.fetched.fetch_add(range.end - range.start, Ordering::Relaxed);
        let (st, key) = (self.store.clone(), self.key.clone());
        super::block_on(async move { st.get_range(&key, range).await })
            .map_err(super::map_err)
            .map_err(tag_transient)
    }

    /// `len` bytes from `start`: from held windows where they cover it, else fetched.
    fn bytes(&self, start: u64, len: usize) -> io::Result<Bytes> {
        let first = self.window(start)?;
        if first.len() >= len {
            return Ok(first.slice(..len));
        }
        let mut out = Vec::with_capacity(len);
        out.extend_from_slice(&first);
        while out.len() < len {
            let next = self.window(start + out.len() as u64)?;
            if next.is_empty() {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "read past the end of the object",
                ));
            }
            let take = next.len().min(len - out.len());
            out.extend_from_slice(&next[..take]);
        }
        Ok(Bytes::from(out))
    }
}

/// A failure a later attempt can get past says so in its text, which is all the Parquet and
/// Arrow readers keep of it (see [`super::TRANSIENT`]).
pub(super) fn tag_transient(e: io::Error) -> io::Error {
    if super::IoClass::of(&e).is_transient() {
        io::Error::new(e.kind(), format!("{e} ({})", super::TRANSIENT))
    } else {
        e
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A remote file read on from a position, window by window.
struct Stream {
    file: Arc<RemoteFile>,
    pos: u64,
    buf: Bytes,
}

impl io::Read for Stream {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        if self.buf.is_empty() {
            self.buf = self.file.window(self.pos)?;
        }
        let n = self.buf.len().min(out.len());
        out[..n].copy_from_slice(&self.buf[..n]);
        self.buf = self.buf.slice(n..);
        self.pos += n as u64;
        Ok(n)
    }
}

fn perr(e: io::Error) -> parquet::errors::ParquetError {
    parquet::errors::ParquetError::External(Box::new(e))
}

impl parquet::file::reader::Length for Input {
    fn len(&self) -> u64 {
        match self {
            Input::File(f) => f.len(),
            Input::Remote(r) => r.size,
        }
    }
}

impl parquet::file::reader::ChunkReader for Input {
    type T = Box<dyn io::Read + Send>;

    fn get_read(&self, start: u64) -> parquet::errors::Result<Self::T> {
        Ok(match self {
            Input::File(f) => Box::new(f.get_read(start)?),
            Input::Remote(r) => Box::new(Stream {
                file: r.clone(),
                pos: start,
                buf: Bytes::new(),
            }),
        })
    }

    fn get_bytes(&self, start: u64, length: usize) -> parquet::errors::Result<Bytes> {
        match self {
            Input::File(f) => f.get_bytes(start, length),
            Input::Remote(r) => r.bytes(start, length).map_err(perr),
        }
    }
}
