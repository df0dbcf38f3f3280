//! Hudi log files: `.<fileId>_<instant>.log.<version>_<writeToken>`, a sequence of blocks
//!
//! ```text
//! "#HUDI#" | i64 size (bytes after this field) | i32 format version | i32 block type
//! | header: i32 count, (i32 key, i32 len, bytes)* | i64 content length | content
//! | footer: same as header | i64 trailing block length
//! ```
//! Block types: 0 command, 1 delete, 2 corrupt, 3 Avro data, 4 HFile data, 5 Parquet data, 6 CDC.
//! Header keys: 0 INSTANT_TIME, 1 TARGET_INSTANT_TIME, 2 SCHEMA, 3 COMMAND_BLOCK_TYPE.
//! A block that does not parse (truncated, garbage) is skipped up to the next magic, logged with
//! the file and offset, and counted, as Hudi's reader does.
//!
//! Memory: a log file above [`LAZY_FILE_BYTES`] is not read whole. Its blocks are located from
//! their headers and footers (a few small range reads per block), and a block's content stays in
//! storage until it is decoded: an Avro data block streams from the file 8,192 records at a time,
//! so a 33 MB block costs one batch, not 33 MB held through a merge. (A Parquet data block and a
//! delete block are loaded whole while decoded.) A file whose blocks do not parse that way is read
//! whole, and damaged stretches skipped as above.

use std::collections::HashMap;
use std::io::{Cursor, Read};
use std::path::{Path, PathBuf};

use bytes::Bytes;

use crate::metrics;
use crate::source::SourceError;
use crate::storage::Storage;

const MAGIC: &[u8; 6] = b"#HUDI#";
pub const INSTANT_TIME: i32 = 0;
pub const TARGET_INSTANT_TIME: i32 = 1;
pub const SCHEMA: i32 = 2;
pub const COMMAND_BLOCK_TYPE: i32 = 3;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BlockType {
    Command,
    Delete,
    Corrupt,
    AvroData,
    HFileData,
    ParquetData,
    Cdc,
    Unknown(i32),
}

impl BlockType {
    fn from_i32(v: i32) -> Self {
        match v {
            0 => Self::Command,
            1 => Self::Delete,
            2 => Self::Corrupt,
            3 => Self::AvroData,
            4 => Self::HFileData,
            5 => Self::ParquetData,
            6 => Self::Cdc,
            o => Self::Unknown(o),
        }
    }
}

/// A block's content: in memory (the file was read whole; `start` is where it lies in the
/// file), or only where it lies in the file.
#[derive(Debug, Clone)]
pub enum Content {
    Mem {
        bytes: Bytes,
        start: u64,
    },
    At {
        storage: Storage,
        path: PathBuf,
        start: u64,
        len: u64,
    },
}

#[derive(Debug, Clone)]
pub struct LogBlock {
    pub block_type: BlockType,
    pub header: HashMap<i32, String>,
    pub content: Content,
    pub offset: usize,
}

impl LogBlock {
    pub fn instant(&self) -> Option<&str> {
        self.header.get(&INSTANT_TIME).map(String::as_str)
    }

    /// The same block with its content left in `path` (memory of a file read whole is released
    /// once no block of it is held).
    pub fn unloaded(&self, storage: &Storage, path: &Path) -> LogBlock {
        let content = match &self.content {
            Content::Mem { bytes, start } => Content::At {
                storage: storage.clone(),
                path: path.to_path_buf(),
                start: *start,
                len: bytes.len() as u64,
            },
            at => at.clone(),
        };
        LogBlock {
            block_type: self.block_type,
            header: self.header.clone(),
            content,
            offset: self.offset,
        }
    }

    /// The whole content (read from storage unless in memory).
    fn bytes(&self, path: &Path) -> Result<Bytes, SourceError> {
        match &self.content {
            Content::Mem { bytes, .. } => Ok(bytes.clone()),
            Content::At {
                storage,
                path: p,
                start,
                len,
            } => storage.read_range(p, *start, *len).map_err(SourceError::io(path)),
        }
    }

    /// The content as a stream (a buffered range of the file unless in memory).
    fn reader(&self, path: &Path) -> Result<Box<dyn Read + Send>, SourceError> {
        match &self.content {
            Content::Mem { bytes, .. } => Ok(Box::new(Cursor::new(bytes.clone()))),
            Content::At {
                storage,
                path: p,
                start,
                len,
            } => storage.open_range(p, *start, *len).map_err(SourceError::io(path)),
        }
    }
}

struct Cur<'a> {
    b: &'a [u8],
    pos: usize,
}

impl<'a> Cur<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let end = self.pos.checked_add(n)?;
        let s = self.b.get(self.pos..end)?;
        self.pos = end;
        Some(s)
    }
    fn i32(&mut self) -> Option<i32> {
        Some(i32::from_be_bytes(self.take(4)?.try_into().ok()?))
    }
    fn i64(&mut self) -> Option<i64> {
        Some(i64::from_be_bytes(self.take(8)?.try_into().ok()?))
    }
    fn metadata(&mut self) -> Option<HashMap<i32, String>> {
        let n = self.i32()?;
        if !(0..=1024).contains(&n) {
            return None;
        }
        let mut m = HashMap::new();
        for _ in 0..n {
            let k = self.i32()?;
            let len = usize::try_from(self.i32()?).ok()?;
            m.insert(k, String::from_utf8_lossy(self.take(len)?).into_owned());
        }
        Some(m)
    }
}

/// What precedes a block's content (after the magic): the size of what follows the size field,
/// format version, block type, header and content length.
struct Head {
    size: u64,
    version: i32,
    kind: i32,
    header: HashMap<i32, String>,
    content_len: u64,
}

impl Head {
    fn parse(c: &mut Cur) -> Option<Head> {
        let size = u64::try_from(c.i64()?).ok()?;
        let version = c.i32()?;
        let kind = c.i32()?;
        let header = if version >= 1 { c.metadata()? } else { HashMap::new() };
        let content_len = u64::try_from(c.i64()?).ok()?;
        Some(Head {
            size,
            version,
            kind,
            header,
            content_len,
        })
    }

    /// The footer and trailing length after the content; `None` unless they end exactly at
    /// the end of `c`'s bytes.
    fn check_tail(&self, c: &mut Cur) -> Option<()> {
        if self.version >= 1 {
            c.metadata()?;
        }
        c.i64()?;
        (c.pos == c.b.len()).then_some(())
    }

    fn block(self, content: Content, offset: usize) -> LogBlock {
        LogBlock {
            block_type: BlockType::from_i32(self.kind),
            header: self.header,
            content,
            offset,
        }
    }
}

/// Parse one block starting at `pos` (at a magic). `None`: damaged.
fn parse_block(all: &Bytes, pos: usize) -> Option<(LogBlock, usize)> {
    let mut c = Cur {
        b: all,
        pos: pos + MAGIC.len(),
    };
    let head = Head::parse(&mut c)?;
    let end = (pos + MAGIC.len() + 8).checked_add(usize::try_from(head.size).ok()?)?;
    if end > all.len() {
        return None;
    }
    let start = c.pos;
    let content_end = start.checked_add(usize::try_from(head.content_len).ok()?)?;
    if content_end > end {
        return None;
    }
    head.check_tail(&mut Cur {
        b: &all[..end],
        pos: content_end,
    })?;
    let content = Content::Mem {
        bytes: all.slice(start..content_end),
        start: start as u64,
    };
    Some((head.block(content, pos), end))
}

/// Log files above this size are not read whole (see the module doc).
pub const LAZY_FILE_BYTES: u64 = 4 << 20;

/// Blocks located from their headers and footers, contents left in the file. `None`: a block
/// does not parse this way (the caller reads the file whole and skips what is damaged).
fn locate_blocks(storage: &Storage, path: &Path, size: u64) -> std::io::Result<Option<Vec<LogBlock>>> {
    const HEAD: u64 = 256 << 10;
    let mut out = Vec::new();
    let mut pos = 0u64;
    while pos < size {
        let first = storage.read_range(path, pos, (size - pos).min(HEAD))?;
        if !first.starts_with(MAGIC) {
            return Ok(None);
        }
        let mut c = Cur {
            b: &first,
            pos: MAGIC.len(),
        };
        let Some(head) = Head::parse(&mut c) else {
            return Ok(None);
        };
        let end = pos + MAGIC.len() as u64 + 8 + head.size;
        let start = pos + c.pos as u64;
        let Some(content_end) = start.checked_add(head.content_len).filter(|e| *e <= end) else {
            return Ok(None);
        };
        if end > size {
            return Ok(None);
        }
        let tail = storage.read_range(path, content_end, end - content_end)?;
        if head.check_tail(&mut Cur { b: &tail, pos: 0 }).is_none() {
            return Ok(None);
        }
        let content = Content::At {
            storage: storage.clone(),
            path: path.to_path_buf(),
            start,
            len: head.content_len,
        };
        out.push(head.block(content, pos as usize));
        pos = end;
    }
    Ok(Some(out))
}

fn find_magic(b: &[u8], from: usize) -> Option<usize> {
    b.get(from..)?
        .windows(MAGIC.len())
        .position(|w| w == MAGIC)
        .map(|p| p + from)
}

/// All readable blocks of a log file, in file order; damaged stretches are skipped and counted.
pub fn read_blocks(storage: &Storage, path: &Path, connector: &str) -> Result<Vec<LogBlock>, SourceError> {
    let size = storage.size(path).map_err(SourceError::io(path))?;
    read_blocks_of(storage, path, size, connector)
}

/// [`read_blocks`] of a file whose size is known (`size` bytes).
pub fn read_blocks_of(
    storage: &Storage,
    path: &Path,
    size: u64,
    connector: &str,
) -> Result<Vec<LogBlock>, SourceError> {
    if size > LAZY_FILE_BYTES {
        if let Some(blocks) = locate_blocks(storage, path, size).map_err(SourceError::io(path))? {
            return Ok(blocks);
        }
    }
    read_whole(storage, path, connector)
}

/// [`read_blocks`] from the file read whole.
fn read_whole(storage: &Storage, path: &Path, connector: &str) -> Result<Vec<LogBlock>, SourceError> {
    let all = storage.read(path).map_err(SourceError::io(path))?;
    let mut out = Vec::new();
    let mut pos = 0;
    while pos < all.len() {
        if all[pos..].starts_with(MAGIC) {
            if let Some((block, end)) = parse_block(&all, pos) {
                out.push(block);
                pos = end;
                continue;
            }
        }
        let next = find_magic(&all, pos + 1).unwrap_or(all.len());
        tracing::warn!(file = %path.display(), offset = pos, skipped_bytes = next - pos,
            "corrupt or truncated log block skipped");
        metrics::CORRUPT_LOG_BLOCKS.with_label_values(&[connector]).inc();
        pos = next;
    }
    Ok(out)
}

mod content;
#[cfg(test)]
use content::BATCH_RECORDS;
pub use content::{
    avro_block_batches, avro_block_json, avro_data_content, delete_block_keys, encode_block, parquet_block_batches,
    DeletedKey, OrderingValue,
};

#[cfg(test)]
mod tests;
