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

use parking_lot::Mutex;
use std::io;
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use object_store::path::Path as ObjectPath;
use object_store::{GetOptions, GetRange, ObjectStore};
use parquet::file::metadata::ParquetMetaData;

use super::requests::{Op, Requests};

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
    /// Column chunks, by start.
    chunks: Mutex<Vec<Chunk>>,
    held: Mutex<Held>,
    fetched: AtomicU64,
    requests: AtomicU64,
    peak: AtomicU64,
    /// The connector's request counters.
    counted: Requests,
}

impl Drop for RemoteFile {
    fn drop(&mut self) {
        tracing::debug!(
            object = %self.key,
            size = self.size,
            fetched = self.fetched.load(Ordering::Relaxed),
            requests = self.requests.load(Ordering::Relaxed),
            peak_held = self.peak.load(Ordering::Relaxed),
            "remote Parquet file read"
        );
    }
}

#[derive(Clone)]
struct Chunk {
    range: Range<u64>,
    row_group: usize,
    column: usize,
}

#[derive(Default)]
struct Held {
    /// The last byte range of the file (footer and metadata).
    tail: Option<(u64, Bytes)>,
    /// Windows of the row group being read: (start, bytes).
    windows: Vec<(u64, Bytes)>,
    row_group: Option<usize>,
    /// The columns read so far: entering a row group fetches their first windows together.
    columns: std::collections::BTreeSet<usize>,
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
    pub(super) fn open(store: Arc<dyn ObjectStore>, key: ObjectPath, counted: Requests) -> io::Result<RemoteFile> {
        counted.count(Op::RangedGet, 1);
        let (st, k) = (store.clone(), key.clone());
        let got = super::block_on(async move {
            let r = st
                .get_opts(&k, GetOptions::new().with_range(Some(GetRange::Suffix(TAIL))))
                .await?;
            let (size, range) = (r.meta.size, r.range.clone());
            Ok::<_, object_store::Error>((size, range, r.bytes().await?))
        })
        .map_err(super::map_err)
        .map_err(noted)?;
        let (size, range, tail) = got;
        let file = RemoteFile {
            store,
            key,
            size,
            chunks: Mutex::new(Vec::new()),
            held: Mutex::new(Held::default()),
            fetched: AtomicU64::new(tail.len() as u64),
            requests: AtomicU64::new(1),
            peak: AtomicU64::new(tail.len() as u64),
            counted,
        };
        file.held.lock().tail = Some((range.start, tail));
        Ok(file)
    }

    fn plan(&self, meta: &ParquetMetaData) {
        let mut chunks: Vec<Chunk> = meta
            .row_groups()
            .iter()
            .enumerate()
            .flat_map(|(row_group, g)| {
                g.columns().iter().enumerate().map(move |(column, c)| {
                    let (start, len) = c.byte_range();
                    Chunk {
                        range: start..start + len,
                        row_group,
                        column,
                    }
                })
            })
            .collect();
        chunks.sort_by_key(|c| c.range.start);
        *self.chunks.lock() = chunks;
    }

    /// Held bytes from `start` on (at least one byte unless `start` is the end of the file),
    /// fetching the window `start` falls in when it is not held. The first read in a row group
    /// also fetches, in the same round trip, the first windows of the columns read in earlier
    /// row groups (the projection, learned), so a row group costs one round of requests.
    fn window(&self, start: u64) -> io::Result<Bytes> {
        if start >= self.size {
            return Ok(Bytes::new());
        }
        let mut held = self.held.lock();
        if let Some(b) = held.at(start) {
            return Ok(b);
        }
        let (chunk, others) = {
            let chunks = self.chunks.lock();
            let i = chunks.partition_point(|c| c.range.start <= start);
            let chunk = i
                .checked_sub(1)
                .map(|i| chunks[i].clone())
                .filter(|c| start < c.range.end);
            let others: Vec<Range<u64>> = match &chunk {
                Some(c) if held.row_group != Some(c.row_group) => chunks
                    .iter()
                    .filter(|o| o.row_group == c.row_group && o.column != c.column && held.columns.contains(&o.column))
                    .map(|o| o.range.start..o.range.end.min(o.range.start + WINDOW))
                    .collect(),
                _ => Vec::new(),
            };
            (chunk, others)
        };
        let Some(chunk) = chunk else {
            // outside every column chunk (metadata, page indexes): a small window, kept with
            // the row group's
            let small = start..(start + TAIL).min(self.size);
            let b = self.fetch(std::iter::once(small).collect())?.remove(0);
            held.windows.push((start, b.clone()));
            return Ok(b);
        };
        let first = start..chunk.range.end.min(start + WINDOW);
        let ranges: Vec<Range<u64>> = std::iter::once(first).chain(others).collect();
        // the lock is held while fetching: readers of one file take turns anyway
        let fetched = self.fetch(ranges.clone())?;
        if held.row_group != Some(chunk.row_group) {
            held.windows.clear();
            held.row_group = Some(chunk.row_group);
        }
        held.columns.insert(chunk.column);
        // one window per column chunk: the chunk's earlier window is done with
        held.windows.retain(|(s, _)| !chunk.range.contains(s));
        for (r, b) in ranges.iter().zip(&fetched) {
            held.windows.push((r.start, b.clone()));
        }
        self.peak.fetch_max(held.bytes(), Ordering::Relaxed);
        Ok(fetched[0].clone())
    }

    /// The byte ranges, fetched concurrently.
    fn fetch(&self, ranges: Vec<Range<u64>>) -> io::Result<Vec<Bytes>> {
        let bytes: u64 = ranges.iter().map(|r| r.end - r.start).sum();
        self.fetched.fetch_add(bytes, Ordering::Relaxed);
        self.requests.fetch_add(ranges.len() as u64, Ordering::Relaxed);
        self.counted.count(Op::RangedGet, ranges.len() as u64);
        let (st, key) = (self.store.clone(), self.key.clone());
        super::block_on(async move { st.get_ranges(&key, &ranges).await })
            .map_err(super::map_err)
            .map_err(noted)
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

/// A failed read, noted on this thread where a later attempt can get past it (see
/// [`super::class`]).
fn noted(e: io::Error) -> io::Error {
    super::class::note_failure(&e);
    e
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
