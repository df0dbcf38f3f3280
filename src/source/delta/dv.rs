//! Delta deletion vectors: the rows of a data file a descriptor marks deleted. Stored inline
//! (`i`: Z85 text in the log), in a file named by a UUID under the table (`u`: Z85 UUID with an
//! optional directory prefix) or at an absolute path (`p`). On disk each vector is
//! `[size u32 BE][magic][portable 64-bit Roaring][CRC-32 BE]` at its offset.

use std::path::{Path, PathBuf};

use roaring::RoaringTreemap;

use super::log::DvDescriptor;
use crate::source::SourceError;
use crate::storage::Storage;

const MAGIC: u32 = 1681511377;
const Z85: &[u8; 85] = b"0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#";

/// Z85 text as bytes (4 per 5 characters).
pub fn z85_decode(s: &str) -> Option<Vec<u8>> {
    let mut value = [0u8; 256];
    for (i, c) in Z85.iter().enumerate() {
        value[*c as usize] = i as u8 + 1;
    }
    let b = s.as_bytes();
    if b.len() % 5 != 0 {
        return None;
    }
    let mut out = Vec::with_capacity(b.len() / 5 * 4);
    for chunk in b.chunks(5) {
        let mut n: u64 = 0;
        for c in chunk {
            let v = value[*c as usize];
            if v == 0 {
                return None;
            }
            n = n * 85 + (v - 1) as u64;
        }
        out.extend_from_slice(&u32::try_from(n).ok()?.to_be_bytes());
    }
    Some(out)
}

/// Where a `u` / `p` vector lives.
pub fn dv_path(root: &Path, d: &DvDescriptor) -> Result<PathBuf, String> {
    match d.storage_type.as_str() {
        "p" => Ok(crate::storage::path_of(&d.path_or_inline_dv)),
        "u" => {
            let s = &d.path_or_inline_dv;
            if s.len() < 20 {
                return Err(format!("`{s}` is too short for a Z85 UUID"));
            }
            let (prefix, id) = s.split_at(s.len() - 20);
            let b = z85_decode(id).ok_or_else(|| format!("`{id}` is not Z85"))?;
            let hex: String = b.iter().map(|x| format!("{x:02x}")).collect();
            let uuid = format!(
                "{}-{}-{}-{}-{}",
                &hex[0..8],
                &hex[8..12],
                &hex[12..16],
                &hex[16..20],
                &hex[20..32]
            );
            let dir = if prefix.is_empty() {
                root.to_path_buf()
            } else {
                root.join(prefix)
            };
            Ok(dir.join(format!("deletion_vector_{uuid}.bin")))
        }
        other => Err(format!("storage type `{other}` is not a file")),
    }
}

fn bitmap(bytes: &[u8], what: &dyn Fn(&str) -> SourceError) -> Result<RoaringTreemap, SourceError> {
    if bytes.len() < 4 || u32::from_le_bytes(bytes[0..4].try_into().expect("4 bytes")) != MAGIC {
        return Err(what("bad magic number"));
    }
    RoaringTreemap::deserialize_from(&bytes[4..]).map_err(|e| what(&format!("bad bitmap: {e}")))
}

/// The deleted row indexes of the file the descriptor belongs to (`file`, for messages).
pub fn read(storage: &Storage, root: &Path, file: &str, d: &DvDescriptor) -> Result<RoaringTreemap, SourceError> {
    let what = |m: &str| SourceError::Unreadable {
        why: crate::source::Unreadable::Damaged,
        message: format!(
            "{file}: deletion vector `{}{}`: {m}",
            d.storage_type, d.path_or_inline_dv
        ),
    };
    let set = if d.storage_type == "i" {
        let bytes = z85_decode(&d.path_or_inline_dv).ok_or_else(|| what("inline vector is not Z85"))?;
        bitmap(&bytes[..(d.size_in_bytes.max(0) as usize).min(bytes.len())], &what)?
    } else {
        let path = dv_path(root, d).map_err(|m| what(&m))?;
        let size = d.size_in_bytes.max(0) as u64;
        let off = d.offset.unwrap_or(1).max(0) as u64;
        let blob = storage
            .read_range(&path, off, size + 8)
            .map_err(SourceError::io(&path))?;
        let bad = |m: &str| SourceError::format(&path, format!("deletion vector at offset {off}: {m}"));
        if blob.len() as u64 != size + 8 {
            return Err(bad("file too short"));
        }
        let len = u32::from_be_bytes(blob[0..4].try_into().expect("4 bytes")) as u64;
        if len != size {
            return Err(bad(&format!("size {len} where the log says {size}")));
        }
        let body = &blob[4..4 + size as usize];
        let crc = u32::from_be_bytes(blob[4 + size as usize..].try_into().expect("4 bytes"));
        if crc32fast::hash(body) != crc {
            return Err(bad("checksum mismatch (corrupt deletion vector)"));
        }
        bitmap(body, &|m| bad(m))?
    };
    if set.len() != d.cardinality.max(0) as u64 {
        return Err(what(&format!(
            "holds {} rows where the log says {}",
            set.len(),
            d.cardinality
        )));
    }
    Ok(set)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn z85_encode(b: &[u8]) -> String {
        b.chunks(4)
            .flat_map(|c| {
                let mut n = u32::from_be_bytes(c.try_into().expect("4 bytes")) as u64;
                let mut out = [0u8; 5];
                for i in (0..5).rev() {
                    out[i] = Z85[(n % 85) as usize];
                    n /= 85;
                }
                out
            })
            .map(char::from)
            .collect()
    }

    fn serialized(rows: &[u64]) -> Vec<u8> {
        let set: RoaringTreemap = rows.iter().copied().collect();
        let mut body = MAGIC.to_le_bytes().to_vec();
        set.serialize_into(&mut body).expect("serialize");
        body
    }

    #[test]
    fn z85_matches_the_spec_example() {
        // the ZeroMQ RFC 32 test vector
        assert_eq!(
            z85_decode("HelloWorld"),
            Some(vec![0x86, 0x4F, 0xD2, 0x6F, 0xB5, 0x59, 0xF7, 0x5B])
        );
        assert_eq!(z85_decode("Hell"), None);
    }

    #[test]
    fn inline_and_file_vectors_read_back_and_damage_is_named() {
        let dir = tempfile::tempdir().expect("tmp");
        let storage = Storage::new(Default::default());
        let mut body = serialized(&[1, 5, 70_000]);
        while body.len() % 4 != 0 {
            body.push(0);
        }
        let inline = DvDescriptor {
            storage_type: "i".into(),
            path_or_inline_dv: z85_encode(&body),
            offset: None,
            size_in_bytes: serialized(&[1, 5, 70_000]).len() as i32,
            cardinality: 3,
        };
        let got = read(&storage, dir.path(), "f.parquet", &inline).expect("inline");
        assert_eq!(got.iter().collect::<Vec<_>>(), vec![1, 5, 70_000]);

        let uuid = [0x12u8, 0x34, 0x56, 0x78, 0x9a, 0xbc, 0xde, 0xf0, 1, 2, 3, 4, 5, 6, 7, 8];
        let body = serialized(&[0, 2]);
        let mut file = vec![1u8];
        file.extend_from_slice(&(body.len() as u32).to_be_bytes());
        file.extend_from_slice(&body);
        file.extend_from_slice(&crc32fast::hash(&body).to_be_bytes());
        let d = DvDescriptor {
            storage_type: "u".into(),
            path_or_inline_dv: format!("ab{}", z85_encode(&uuid)),
            offset: Some(1),
            size_in_bytes: body.len() as i32,
            cardinality: 2,
        };
        let path = dv_path(dir.path(), &d).expect("path");
        assert!(
            path.ends_with("ab/deletion_vector_12345678-9abc-def0-0102-030405060708.bin"),
            "{path:?}"
        );
        std::fs::create_dir_all(path.parent().expect("dir")).expect("mkdir");
        std::fs::write(&path, &file).expect("write");
        assert_eq!(read(&storage, dir.path(), "f", &d).expect("file").len(), 2);
        let last = file.len() - 1;
        file[last] ^= 1;
        std::fs::write(&path, &file).expect("write");
        let e = read(&storage, dir.path(), "f", &d).expect_err("corrupt");
        assert!(e.to_string().contains("checksum"), "{e}");
        let wrong = DvDescriptor {
            cardinality: 4,
            ..inline
        };
        assert!(read(&storage, dir.path(), "f", &wrong).is_err());
    }
}
