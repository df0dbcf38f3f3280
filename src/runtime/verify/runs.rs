//! Both sides of a verify, spilled by key into N bucket files per side (a Grace hash join on
//! disk): every version of a key lands in one bucket, so each bucket is compared alone, in
//! memory about 100 bytes per key of the bucket whatever the key's or row's width (keys and
//! images are held as 128-bit digests; a key's text is read back from the file only for the
//! examples a report names). Plain std files: a fixed-layout record needs no IPC format.
//!
//! A resync keeps more: each record may point (`loc`) into its bucket's payload file, where the
//! encoded key and image it was digested from are kept, read back only for the keys that differ.

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};

/// Which side a record comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    Topic,
    Table,
}

/// One row image (table) or one replay step (topic).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rec {
    /// The key's digest; for a keyless table, the image's.
    pub key: u128,
    /// The image's digest (0 with `delta == 0`: the key deleted).
    pub image: u128,
    /// Keyed: 1 present, 0 deleted. Keyless: +1 an image added, -1 removed.
    pub delta: i8,
    /// A topic event's lake commit (a 64-bit digest of its id) and op (`b'c'`, ...): the same key
    /// twice with both the same is a duplicated event. 0 for tombstones and table rows.
    pub commit: u64,
    pub op: u8,
    /// The partition's index in its side's [`Partitions`].
    pub partition: u32,
    /// The key as text (for reports; empty for keyless tables).
    pub text: String,
    /// Where the record's payload starts in its bucket's payload file ([`NO_PAYLOAD`]: none).
    pub loc: u64,
}

/// [`Rec::loc`] of a record without a payload.
pub const NO_PAYLOAD: u64 = u64::MAX;

/// Partition names of one side, interned.
#[derive(Debug, Default)]
pub struct Partitions {
    pub names: Vec<String>,
    index: HashMap<String, u32>,
}

impl Partitions {
    pub fn id(&mut self, name: &str) -> u32 {
        if let Some(i) = self.index.get(name) {
            return *i;
        }
        let i = self.names.len() as u32;
        self.names.push(name.to_string());
        self.index.insert(name.to_string(), i);
        i
    }
}

/// The bucket of a key digest.
pub fn bucket_of(key: u128, buckets: u32) -> usize {
    ((key >> 64) as u64 % buckets.max(1) as u64) as usize
}

/// Buckets for `keys` expected keys in `budget` bytes (up to 170 bytes a key in the compared
/// bucket's hash map, given its power-of-two growth; half the budget for it), at most 1024
/// (files open at once).
pub fn buckets_for(keys: u64, budget: usize) -> u32 {
    let per_bucket = (budget as u64 / 2 / 170).max(1000);
    keys.div_ceil(per_bucket).clamp(1, 1024) as u32
}

pub struct RunWriter {
    files: Vec<BufWriter<File>>,
    paths: Vec<PathBuf>,
    /// Per bucket, its payload file and the bytes written to it so far.
    payloads: Vec<(BufWriter<File>, u64)>,
    pub written: u64,
}

impl RunWriter {
    /// `buckets` files named `<side>-<i>` in `dir`, each with a write buffer of `buffer` bytes.
    pub fn new(dir: &Path, side: Side, buckets: u32, buffer: usize) -> std::io::Result<Self> {
        let name = match side {
            Side::Topic => "topic",
            Side::Table => "table",
        };
        let mut files = Vec::new();
        let mut paths = Vec::new();
        for i in 0..buckets {
            let p = dir.join(format!("{name}-{i}"));
            files.push(BufWriter::with_capacity(buffer, File::create(&p)?));
            paths.push(p);
        }
        Ok(Self {
            files,
            paths,
            payloads: Vec::new(),
            written: 0,
        })
    }

    /// Keep payloads too, in files `<side>-<i>.payload` beside the runs.
    pub fn with_payloads(mut self, buffer: usize) -> std::io::Result<Self> {
        for p in &self.paths {
            let file = File::create(payload_path(p))?;
            self.payloads.push((BufWriter::with_capacity(buffer, file), 0));
        }
        Ok(self)
    }

    /// Whether this writer keeps payloads.
    pub fn keeps_payloads(&self) -> bool {
        !self.payloads.is_empty()
    }

    /// Keep `parts` as the payload of `r` (written next with [`Self::push`]).
    pub fn payload(&mut self, r: &mut Rec, parts: &[&[u8]]) -> std::io::Result<()> {
        let b = bucket_of(r.key, self.files.len() as u32);
        let (f, at) = &mut self.payloads[b];
        r.loc = *at;
        f.write_all(&(parts.len() as u32).to_le_bytes())?;
        *at += 4;
        for p in parts {
            f.write_all(&(p.len() as u32).to_le_bytes())?;
            f.write_all(p)?;
            *at += 4 + p.len() as u64;
        }
        Ok(())
    }

    pub fn push(&mut self, r: &Rec) -> std::io::Result<()> {
        let b = bucket_of(r.key, self.files.len() as u32);
        let text = &r.text.as_bytes()[..r.text.len().min(u16::MAX as usize)];
        let f = &mut self.files[b];
        f.write_all(&r.key.to_le_bytes())?;
        f.write_all(&r.image.to_le_bytes())?;
        f.write_all(&r.commit.to_le_bytes())?;
        f.write_all(&r.loc.to_le_bytes())?;
        f.write_all(&[r.delta as u8, r.op])?;
        f.write_all(&r.partition.to_le_bytes())?;
        f.write_all(&(text.len() as u16).to_le_bytes())?;
        f.write_all(text)?;
        self.written += 1;
        Ok(())
    }

    /// Flush and close: the bucket files' paths.
    pub fn finish(self) -> std::io::Result<Vec<PathBuf>> {
        for mut f in self.files {
            f.flush()?;
        }
        for (mut f, _) in self.payloads {
            f.flush()?;
        }
        Ok(self.paths)
    }
}

/// The records of one bucket file, in the order written.
pub fn read_bucket(path: &Path, f: &mut dyn FnMut(Rec)) -> std::io::Result<()> {
    let mut r = BufReader::with_capacity(1 << 16, File::open(path)?);
    let mut head = [0u8; 16 + 16 + 8 + 8 + 2 + 4 + 2];
    loop {
        match r.read_exact(&mut head) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(()),
            Err(e) => return Err(e),
        }
        let u128_at = |i: usize| u128::from_le_bytes(head[i..i + 16].try_into().expect("16 bytes"));
        let len = u16::from_le_bytes([head[54], head[55]]) as usize;
        let mut text = vec![0u8; len];
        r.read_exact(&mut text)?;
        f(Rec {
            key: u128_at(0),
            image: u128_at(16),
            commit: u64::from_le_bytes(head[32..40].try_into().expect("8 bytes")),
            loc: u64::from_le_bytes(head[40..48].try_into().expect("8 bytes")),
            delta: head[48] as i8,
            op: head[49],
            partition: u32::from_le_bytes(head[50..54].try_into().expect("4 bytes")),
            text: String::from_utf8_lossy(&text).into_owned(),
        });
    }
}

/// The payload file beside a bucket's run.
fn payload_path(run: &Path) -> PathBuf {
    run.with_extension("payload")
}

/// One bucket's payloads, read back by [`Rec::loc`].
pub struct Payloads {
    file: File,
}

impl Payloads {
    /// The payloads of the bucket whose run is `run`.
    pub fn open(run: &Path) -> std::io::Result<Self> {
        Ok(Self {
            file: File::open(payload_path(run))?,
        })
    }

    /// The parts kept at `loc`.
    pub fn get(&self, loc: u64) -> std::io::Result<Vec<Vec<u8>>> {
        use std::os::unix::fs::FileExt;
        let mut n = [0u8; 4];
        self.file.read_exact_at(&mut n, loc)?;
        let mut at = loc + 4;
        let mut parts = Vec::with_capacity(u32::from_le_bytes(n) as usize);
        for _ in 0..u32::from_le_bytes(n) {
            self.file.read_exact_at(&mut n, at)?;
            let mut part = vec![0u8; u32::from_le_bytes(n) as usize];
            self.file.read_exact_at(&mut part, at + 4)?;
            at += 4 + part.len() as u64;
            parts.push(part);
        }
        Ok(parts)
    }
}
