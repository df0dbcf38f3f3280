//! Avro's binary primitives (zig-zag varint longs, length-prefixed bytes), on the ground floor:
//! the event encoder writes them, and so do the Hudi log reader's test and demo writers, which
//! sit below the changelog layer and must not reach up into it.

/// A zig-zag varint `long` (also Avro's `int`, whose encoding is the same).
pub fn write_long(out: &mut Vec<u8>, v: i64) {
    let mut z = ((v << 1) ^ (v >> 63)) as u64;
    while z >= 0x80 {
        out.push((z as u8) | 0x80);
        z >>= 7;
    }
    out.push(z as u8);
}

/// Avro `bytes` / `string`: the length as a `long`, then the bytes.
pub fn write_bytes(out: &mut Vec<u8>, b: &[u8]) {
    write_long(out, b.len() as i64);
    out.extend_from_slice(b);
}
