//! The bytes on disk: segment names, the segment header and the record framing, plus the
//! pure (IO-free) scanning that recovery is built on.

use std::fmt;
use std::ops::Range;

/// First bytes of every segment.
pub(crate) const MAGIC: [u8; 8] = *b"SYNODWAL";
/// Format version written by this crate; other versions are refused rather than misread.
pub(crate) const VERSION: u16 = 1;
/// Header flag: the segment starts with a complete image of the durable content (it was
/// written by [`crate::Wal::rewrite`] or is the first segment of a new log), so every older
/// segment is obsolete.
pub(crate) const FLAG_BASE: u16 = 1;
/// Header flag of a plain segment: the header's count field holds the byte length at which
/// the segment before it was sealed, so recovery notices a sealed segment that lost whole
/// records at its end (which scans as clean). Segments written before this flag existed lack
/// it and are read without that check.
pub(crate) const FLAG_PREV_LEN: u16 = 2;
const KNOWN_FLAGS: u16 = FLAG_BASE | FLAG_PREV_LEN;

/// `magic[8] | version u16 | flags u16 | count u64 | crc32c u32`, little endian; the CRC
/// covers the 20 bytes before it. `count` is a base segment's record count, or a plain
/// segment's predecessor's sealed length ([`FLAG_PREV_LEN`]).
pub(crate) const HEADER_LEN: usize = 24;
/// `len u32 | crc32c u32` in front of every payload.
pub(crate) const RECORD_HEADER_LEN: usize = 8;

/// The largest record payload accepted. A length field above it is treated as corruption, so
/// a damaged length never turns into a huge allocation or a read past the segment.
pub const MAX_RECORD_BYTES: usize = 1 << 30;

/// The decoded segment header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SegmentHeader {
    pub flags: u16,
    /// For a base segment: how many records the rewrite put into it. The base is complete
    /// (and therefore authoritative) only if that many valid records follow the header.
    pub base_records: u64,
}

impl SegmentHeader {
    /// A plain segment started after sealing its predecessor at `prev_len` bytes.
    pub fn plain(prev_len: u64) -> Self {
        SegmentHeader { flags: FLAG_PREV_LEN, base_records: prev_len }
    }

    pub fn base(records: u64) -> Self {
        SegmentHeader { flags: FLAG_BASE, base_records: records }
    }

    pub fn is_base(&self) -> bool {
        self.flags & FLAG_BASE != 0
    }

    /// The length its predecessor was sealed at, if the header records it.
    pub fn prev_len(&self) -> Option<u64> {
        (!self.is_base() && self.flags & FLAG_PREV_LEN != 0).then_some(self.base_records)
    }

    pub fn encode(&self) -> [u8; HEADER_LEN] {
        let mut h = [0u8; HEADER_LEN];
        h[0..8].copy_from_slice(&MAGIC);
        h[8..10].copy_from_slice(&VERSION.to_le_bytes());
        h[10..12].copy_from_slice(&self.flags.to_le_bytes());
        h[12..20].copy_from_slice(&self.base_records.to_le_bytes());
        let crc = crc32c::crc32c(&h[0..20]);
        h[20..24].copy_from_slice(&crc.to_le_bytes());
        h
    }

    pub fn decode(bytes: &[u8]) -> Result<SegmentHeader, HeaderError> {
        if bytes.len() < HEADER_LEN {
            return Err(HeaderError::Short(bytes.len()));
        }
        if bytes[0..8] != MAGIC {
            return Err(HeaderError::BadMagic);
        }
        let stored = u32::from_le_bytes(bytes[20..24].try_into().expect("4 bytes"));
        if crc32c::crc32c(&bytes[0..20]) != stored {
            return Err(HeaderError::BadChecksum);
        }
        let version = u16::from_le_bytes([bytes[8], bytes[9]]);
        if version != VERSION {
            return Err(HeaderError::UnsupportedVersion(version));
        }
        let flags = u16::from_le_bytes([bytes[10], bytes[11]]);
        if flags & !KNOWN_FLAGS != 0 {
            return Err(HeaderError::UnknownFlags(flags));
        }
        let base_records = u64::from_le_bytes(bytes[12..20].try_into().expect("8 bytes"));
        Ok(SegmentHeader { flags, base_records })
    }
}

/// Why a segment header could not be used.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum HeaderError {
    Short(usize),
    BadMagic,
    BadChecksum,
    UnsupportedVersion(u16),
    UnknownFlags(u16),
}

impl fmt::Display for HeaderError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HeaderError::Short(n) => write!(f, "segment header truncated ({n} of {HEADER_LEN} bytes)"),
            HeaderError::BadMagic => f.write_str("not a synod WAL segment (bad magic)"),
            HeaderError::BadChecksum => f.write_str("segment header checksum mismatch"),
            HeaderError::UnsupportedVersion(v) => {
                write!(f, "unsupported segment format version {v} (this build reads {VERSION})")
            }
            HeaderError::UnknownFlags(x) => write!(f, "unknown segment header flags {x:#06x}"),
        }
    }
}

/// File name of segment `seq`: `wal-<seq:016>.log`, so names sort like sequence numbers.
pub(crate) fn segment_name(seq: u64) -> String {
    format!("wal-{seq:016}.log")
}

/// Name of the file a segment is prepared in before being renamed into place.
pub(crate) fn temp_name(seq: u64) -> String {
    format!("wal-{seq:016}.log.tmp")
}

/// A directory entry this crate owns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum FileKind {
    Segment(u64),
    Temp(u64),
}

pub(crate) fn parse_name(name: &str) -> Option<FileKind> {
    let rest = name.strip_prefix("wal-")?;
    let (digits, suffix) = rest.split_at_checked(16)?;
    if !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let seq = digits.parse().ok()?;
    match suffix {
        ".log" => Some(FileKind::Segment(seq)),
        ".log.tmp" => Some(FileKind::Temp(seq)),
        _ => None,
    }
}

/// CRC of a record: over the little-endian length followed by the payload, so a flipped bit
/// in the length is caught as well.
fn record_crc(len_le: [u8; 4], payload: &[u8]) -> u32 {
    crc32c::crc32c_append(crc32c::crc32c(&len_le), payload)
}

/// Append the framed `payload` to `buf`. The caller has checked the size limit.
pub(crate) fn encode_record(buf: &mut Vec<u8>, payload: &[u8]) {
    debug_assert!(payload.len() <= MAX_RECORD_BYTES);
    let len_le = (payload.len() as u32).to_le_bytes();
    buf.extend_from_slice(&len_le);
    buf.extend_from_slice(&record_crc(len_le, payload).to_le_bytes());
    buf.extend_from_slice(payload);
}

/// Write one record given as the parts it is the concatenation of (so a large payload need
/// not be copied into one buffer first); returns the bytes written. The caller has checked
/// the size limit.
pub(crate) fn write_record_parts(w: &mut impl std::io::Write, parts: &[bytes::Bytes]) -> std::io::Result<u64> {
    let len: usize = parts.iter().map(|p| p.len()).sum();
    debug_assert!(len <= MAX_RECORD_BYTES);
    let len_le = (len as u32).to_le_bytes();
    let crc = parts.iter().fold(crc32c::crc32c(&len_le), |crc, p| crc32c::crc32c_append(crc, p));
    let mut header = [0u8; RECORD_HEADER_LEN];
    header[..4].copy_from_slice(&len_le);
    header[4..].copy_from_slice(&crc.to_le_bytes());
    w.write_all(&header)?;
    for p in parts {
        w.write_all(p)?;
    }
    Ok((RECORD_HEADER_LEN + len) as u64)
}

/// The payload range of the valid record starting at `off`, if there is one: the frame fits
/// in `data`, the length is sane and the CRC matches.
pub(crate) fn record_at(data: &[u8], off: usize) -> Option<Range<usize>> {
    let header = data.get(off..off.checked_add(RECORD_HEADER_LEN)?)?;
    let len_le: [u8; 4] = header[0..4].try_into().expect("4 bytes");
    let len = u32::from_le_bytes(len_le) as usize;
    if len > MAX_RECORD_BYTES {
        return None;
    }
    let start = off + RECORD_HEADER_LEN;
    let payload = data.get(start..start.checked_add(len)?)?;
    let stored = u32::from_le_bytes(header[4..8].try_into().expect("4 bytes"));
    (record_crc(len_le, payload) == stored).then_some(start..start + len)
}

/// The valid records from `start` on, up to the first byte that does not begin one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Scan {
    /// Payload ranges, in order.
    pub records: Vec<Range<usize>>,
    /// Offset of the first byte that is not part of a valid record (`data.len()` if all are).
    pub end: usize,
}

pub(crate) fn scan_records(data: &[u8], start: usize) -> Scan {
    let mut records = Vec::new();
    let mut off = start;
    while off < data.len() {
        match record_at(data, off) {
            Some(r) => {
                off = r.end;
                records.push(r);
            }
            None => break,
        }
    }
    Scan { records, end: off }
}

/// Work allowed to [`valid_record_after`], in bytes checksummed (~0.3 s at 4 GB/s).
const SCAN_BUDGET_BYTES: usize = 1 << 30;

/// What [`valid_record_after`] found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum After {
    /// A valid record starts at this offset.
    Found(usize),
    /// No valid record starts anywhere after the damage.
    NotFound,
    /// The search exceeded its budget at this offset without finding a valid record.
    GaveUp(usize),
}

/// Look for a valid record that starts after the invalid bytes at `bad`.
///
/// This tells a torn tail (an interrupted last write: nothing valid after the damage) from
/// damage in the middle of the log (valid records follow). The fast path follows the damaged
/// record's own length field, which finds the next record when only payload bits flipped; the
/// slow path tries every later offset whose length field fits in the data. All-zero headers
/// are skipped cheaply (a zero length needs a non-zero CRC), so a zero-filled tail costs
/// little. Random-looking bytes with plausible lengths can make the search quadratic, hence
/// the budget.
pub(crate) fn valid_record_after(data: &[u8], bad: usize) -> After {
    if let Some(h) = data.get(bad..bad + 4) {
        let len = u32::from_le_bytes(h.try_into().expect("4 bytes")) as usize;
        let next = bad + RECORD_HEADER_LEN + len;
        if len <= MAX_RECORD_BYTES && record_at(data, next).is_some() {
            return After::Found(next);
        }
    }
    let Some(last_start) = data.len().checked_sub(RECORD_HEADER_LEN) else {
        return After::NotFound;
    };
    let mut budget = SCAN_BUDGET_BYTES;
    for off in bad + 1..=last_start {
        let header = &data[off..off + RECORD_HEADER_LEN];
        if header == [0u8; RECORD_HEADER_LEN] {
            continue;
        }
        let len = u32::from_le_bytes(header[0..4].try_into().expect("4 bytes")) as usize;
        if len > MAX_RECORD_BYTES || off + RECORD_HEADER_LEN + len > data.len() {
            continue;
        }
        let cost = len + 64;
        if cost > budget {
            return After::GaveUp(off);
        }
        budget -= cost;
        if record_at(data, off).is_some() {
            return After::Found(off);
        }
    }
    After::NotFound
}

#[cfg(test)]
mod tests {
    use super::*;

    fn framed(payloads: &[&[u8]]) -> Vec<u8> {
        let mut buf = Vec::new();
        for p in payloads {
            encode_record(&mut buf, p);
        }
        buf
    }

    #[test]
    fn header_round_trip_and_damage() {
        for h in [SegmentHeader::plain(123), SegmentHeader::base(7)] {
            let bytes = h.encode();
            assert_eq!(SegmentHeader::decode(&bytes), Ok(h));
            for cut in 0..HEADER_LEN {
                assert_eq!(SegmentHeader::decode(&bytes[..cut]), Err(HeaderError::Short(cut)));
            }
            let mut bad = bytes;
            bad[14] ^= 1;
            assert_eq!(SegmentHeader::decode(&bad), Err(HeaderError::BadChecksum));
            let mut bad = bytes;
            bad[0] = b'X';
            assert_eq!(SegmentHeader::decode(&bad), Err(HeaderError::BadMagic));
        }
        assert!(SegmentHeader::base(0).is_base());
        assert!(!SegmentHeader::plain(9).is_base());
        assert_eq!(SegmentHeader::plain(9).prev_len(), Some(9));
        assert_eq!(SegmentHeader::base(9).prev_len(), None);
        // A plain segment of a log written before FLAG_PREV_LEN: no recorded length.
        assert_eq!(SegmentHeader { flags: 0, base_records: 0 }.prev_len(), None);
    }

    #[test]
    fn names() {
        assert_eq!(segment_name(42), "wal-0000000000000042.log");
        assert_eq!(parse_name("wal-0000000000000042.log"), Some(FileKind::Segment(42)));
        assert_eq!(parse_name(&temp_name(7)), Some(FileKind::Temp(7)));
        assert_eq!(parse_name("wal-42.log"), None);
        assert_eq!(parse_name("wal-00000000000000x2.log"), None);
        assert_eq!(parse_name("wal-0000000000000042.logx"), None);
        assert_eq!(parse_name("other"), None);
    }

    #[test]
    fn scan_stops_at_damage() {
        let data = framed(&[b"a", b"", b"hello"]);
        let scan = scan_records(&data, 0);
        assert_eq!(scan.end, data.len());
        let got: Vec<&[u8]> = scan.records.iter().map(|r| &data[r.clone()]).collect();
        assert_eq!(got, vec![&b"a"[..], b"", b"hello"]);

        let mut bad = data.clone();
        bad[9] ^= 0x40; // the empty record's length field now points past the end
        let scan = scan_records(&bad, 0);
        assert_eq!(scan.records.len(), 1);
        assert_eq!(scan.end, 9);
        assert_eq!(valid_record_after(&bad, scan.end), After::Found(17));
    }

    #[test]
    fn zeros_and_huge_lengths_are_invalid() {
        assert_eq!(record_at(&[0u8; 64], 0), None);
        assert_eq!(valid_record_after(&[0u8; 64], 0), After::NotFound);
        let mut huge = vec![0xFFu8; 16];
        huge.extend(framed(&[b"x"]));
        assert_eq!(record_at(&huge, 0), None);
        assert_eq!(valid_record_after(&huge, 0), After::Found(16));
    }

    /// A torn multi-megabyte record of random-looking bytes, or a zero-filled tail: the search
    /// ends quickly and finds nothing.
    #[test]
    fn search_after_a_large_torn_record_is_bounded() {
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        let mut payload = vec![0u8; 8 << 20];
        for b in payload.iter_mut() {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            *b = x as u8;
        }
        let mut data = framed(&[b"kept"]);
        let kept = data.len();
        encode_record(&mut data, &payload);
        data.truncate(data.len() - 1);
        let started = std::time::Instant::now();
        let result = valid_record_after(&data, kept);
        assert!(matches!(result, After::NotFound | After::GaveUp(_)), "{result:?}");
        assert!(started.elapsed() < std::time::Duration::from_secs(20));

        let mut zeros = framed(&[b"kept"]);
        zeros.resize(kept + (16 << 20), 0);
        assert_eq!(valid_record_after(&zeros, kept), After::NotFound);
    }
}
