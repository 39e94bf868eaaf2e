//! The page headers of the column chunks a worker decodes, checked before the `parquet` crate
//! reads them: the crate trusts a header's sizes and counts (it reserves a page's claimed
//! uncompressed size, and sizes a dictionary by its claimed count, before decoding either), so
//! a few crafted bytes could make it reserve gigabytes. Each header is read here with a small
//! reader of Thrift's compact protocol (the encoding of Parquet's `PageHeader`), touching only
//! the headers' bytes, and a page must:
//! - lie within its column chunk, the pages tiling the chunk exactly;
//! - claim at most [`MAX_PAGE_BYTES`] uncompressed;
//! - if it is a dictionary, claim no more values than its bytes can hold;
//! - if its values are dictionary-encoded, follow its chunk's dictionary page.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

use parquet::basic::Type;
use parquet::file::metadata::{ColumnChunkMetaData, ParquetMetaData};

use super::error;
use crate::data::DataError;

/// The largest page gradflow decompresses: the largest record of a compressed CSV stream.
pub const MAX_PAGE_BYTES: i64 = crate::data::table::read::MAX_RECORD_BYTES as i64;

/// The longest page header read (statistics in a header can be long, never this long).
const MAX_HEADER_BYTES: usize = 16 << 20;

/// Checks the pages of every chunk of row groups `groups` in the columns under schema roots
/// `roots` (those the reader decodes).
pub(super) fn check_chunks(
    file: &Path,
    meta: &ParquetMetaData,
    groups: &[usize],
    roots: &[usize],
) -> Result<(), DataError> {
    let mut f = File::open(file).map_err(|e| error(file, format!("cannot read: {e}")))?;
    let schema = meta.file_metadata().schema_descr();
    let mut window = Vec::new();
    for &g in groups {
        for (leaf, chunk) in meta.row_group(g).columns().iter().enumerate() {
            if roots.contains(&schema.get_column_root_idx(leaf)) {
                check_chunk(&mut f, chunk, &mut window).map_err(|e| {
                    let name = chunk.column_path().string();
                    let name = crate::data::clip(&name);
                    error(file, format!("row group {g}, column '{name}': {e}"))
                })?;
            }
        }
    }
    Ok(())
}

/// The pages of one column chunk (whose bytes the footer check put within the file).
fn check_chunk(
    f: &mut File,
    chunk: &ColumnChunkMetaData,
    window: &mut Vec<u8>,
) -> Result<(), String> {
    let mut at = (chunk.dictionary_page_offset())
        .unwrap_or(chunk.data_page_offset())
        .min(chunk.data_page_offset()) as u64;
    let end = at + chunk.compressed_size() as u64;
    let mut dictionary = false;
    while at < end {
        let page = read_header(f, at, end, window)?;
        if !(0..=MAX_PAGE_BYTES).contains(&page.uncompressed) || page.compressed < 0 {
            return Err(format!(
                "a page claims {} bytes ({} compressed), more than the {} MiB a page may \
                 hold here (a damaged header, or a writer's page size set past it)",
                page.uncompressed,
                page.compressed,
                MAX_PAGE_BYTES >> 20
            ));
        }
        match page.kind {
            PageKind::Dictionary { values } => {
                let bits = least_bits(chunk);
                if values < 0 || (values as u64).saturating_mul(bits) > 8 * page.uncompressed as u64
                {
                    return Err(format!(
                        "its dictionary page claims {values} values in {} bytes (a damaged \
                         page header)",
                        page.uncompressed
                    ));
                }
                dictionary = true;
            }
            PageKind::Data { encoding } if is_dictionary(encoding) && !dictionary => {
                return Err(
                    "a dictionary-encoded page without a dictionary page before it \
                            (a damaged column chunk)"
                        .into(),
                );
            }
            _ => {}
        }
        at += page.header_len as u64 + page.compressed as u64;
    }
    match at == end {
        true => Ok(()),
        false => Err("its pages overrun the column chunk (a damaged page header)".into()),
    }
}

/// The least bits one value of the chunk's physical type takes in a dictionary page.
fn least_bits(chunk: &ColumnChunkMetaData) -> u64 {
    let column = chunk.column_descr();
    match column.physical_type() {
        Type::BOOLEAN => 1,
        Type::INT32 | Type::FLOAT | Type::BYTE_ARRAY => 32,
        Type::INT64 | Type::DOUBLE => 64,
        Type::INT96 => 96,
        Type::FIXED_LEN_BYTE_ARRAY => 8 * column.type_length().max(1) as u64,
    }
}

/// `PLAIN_DICTIONARY` or `RLE_DICTIONARY`.
fn is_dictionary(encoding: i64) -> bool {
    encoding == 2 || encoding == 8
}

/// Reads the header of the page at byte `at`, which must end before byte `end`: a window of
/// the file grown (up to [`MAX_HEADER_BYTES`]) until the header fits in it.
fn read_header(
    f: &mut File,
    at: u64,
    end: u64,
    window: &mut Vec<u8>,
) -> Result<PageHeader, String> {
    let mut size = 256;
    loop {
        let want = size.min((end - at) as usize);
        window.resize(want, 0);
        f.seek(SeekFrom::Start(at))
            .and_then(|_| f.read_exact(window))
            .map_err(|e| format!("cannot read a page header: {e}"))?;
        match PageHeader::parse(window) {
            Ok(page) => return Ok(page),
            Err(Short) if want == size && size < MAX_HEADER_BYTES => size *= 16,
            Err(_) => return Err("a damaged page header".into()),
        }
    }
}

/// What the checks need of a Parquet `PageHeader`.
#[derive(Debug, PartialEq)]
struct PageHeader {
    kind: PageKind,
    uncompressed: i64,
    compressed: i64,
    /// The header's own length in bytes (the page's bytes follow it).
    header_len: usize,
}

#[derive(Debug, PartialEq)]
enum PageKind {
    Data { encoding: i64 },
    Dictionary { values: i64 },
    Other,
}

/// Why a header was not read.
#[derive(Debug, PartialEq)]
enum Unread {
    /// It goes on past the bytes given (a longer window may hold it).
    Short,
    /// It is not a page header.
    Damaged,
}
use Unread::{Damaged, Short};

// Thrift compact protocol type codes.
const I32: u8 = 5;
const STRUCT: u8 = 12;

impl PageHeader {
    /// Parses a `PageHeader` (fields: 1 type, 2 uncompressed size, 3 compressed size, 5 data
    /// page header, 7 dictionary page header, 8 data page header v2), skipping the rest.
    fn parse(bytes: &[u8]) -> Result<PageHeader, Unread> {
        let mut r = Compact { bytes, at: 0 };
        let (mut kind, mut uncompressed, mut compressed) = (None, None, None);
        let mut body = PageKind::Other;
        r.fields(0, |r, id, ty| {
            match (id, ty) {
                (1, I32) => kind = Some(r.zigzag()?),
                (2, I32) => uncompressed = Some(r.zigzag()?),
                (3, I32) => compressed = Some(r.zigzag()?),
                // DataPageHeader: 2 encoding; DataPageHeaderV2: 4 encoding.
                (5 | 8, STRUCT) => {
                    let want = if id == 5 { 2 } else { 4 };
                    let mut encoding = -1;
                    r.fields(1, |r, id, ty| match (id == want, ty) {
                        (true, I32) => r.zigzag().map(|e| encoding = e),
                        _ => r.skip(ty, 2),
                    })?;
                    body = PageKind::Data { encoding };
                }
                // DictionaryPageHeader: 1 num_values.
                (7, STRUCT) => {
                    let mut values = -1;
                    r.fields(1, |r, id, ty| match (id, ty) {
                        (1, I32) => r.zigzag().map(|v| values = v),
                        _ => r.skip(ty, 2),
                    })?;
                    body = PageKind::Dictionary { values };
                }
                _ => r.skip(ty, 1)?,
            }
            Ok(())
        })?;
        let (Some(kind), Some(uncompressed), Some(compressed)) = (kind, uncompressed, compressed)
        else {
            return Err(Damaged);
        };
        // Page types: 0 data, 2 dictionary, 3 data v2; the body must match the type.
        let kind = match (kind, body) {
            (0 | 3, body @ PageKind::Data { .. }) | (2, body @ PageKind::Dictionary { .. }) => body,
            (0 | 2 | 3, _) => return Err(Damaged),
            _ => PageKind::Other,
        };
        Ok(PageHeader {
            kind,
            uncompressed,
            compressed,
            header_len: r.at,
        })
    }
}

/// A reader of Thrift's compact protocol, enough to read a struct's integer fields and skip
/// any other value; every step is bounded by the bytes given.
struct Compact<'a> {
    bytes: &'a [u8],
    at: usize,
}

/// The deepest nesting skipped (Parquet's headers nest three deep).
const MAX_DEPTH: u32 = 32;

impl Compact<'_> {
    fn byte(&mut self) -> Result<u8, Unread> {
        let b = *self.bytes.get(self.at).ok_or(Short)?;
        self.at += 1;
        Ok(b)
    }

    /// Moves past `n` bytes, which must be there.
    fn advance(&mut self, n: u64) -> Result<(), Unread> {
        if n > (self.bytes.len() - self.at) as u64 {
            return Err(Short);
        }
        self.at += n as usize;
        Ok(())
    }

    fn varint(&mut self) -> Result<u64, Unread> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let b = self.byte()?;
            v |= ((b & 0x7f) as u64) << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(Damaged)
    }

    fn zigzag(&mut self) -> Result<i64, Unread> {
        let v = self.varint()?;
        Ok((v >> 1) as i64 ^ -((v & 1) as i64))
    }

    /// Calls `field(self, id, type)` for each field of a struct, up to its stop byte; `field`
    /// must read or skip the value.
    fn fields(
        &mut self,
        depth: u32,
        mut field: impl FnMut(&mut Self, i64, u8) -> Result<(), Unread>,
    ) -> Result<(), Unread> {
        if depth > MAX_DEPTH {
            return Err(Damaged);
        }
        let mut id = 0i64;
        loop {
            let b = self.byte()?;
            if b == 0 {
                return Ok(());
            }
            id = match b >> 4 {
                0 => self.zigzag()?,
                delta => id.wrapping_add(delta as i64),
            };
            match b & 0x0f {
                // A boolean field's value is its type code.
                1 | 2 => {}
                ty => field(self, id, ty)?,
            }
        }
    }

    /// Skips a value of compact type `ty` nested `depth` deep.
    fn skip(&mut self, ty: u8, depth: u32) -> Result<(), Unread> {
        if depth > MAX_DEPTH {
            return Err(Damaged);
        }
        match ty {
            // Booleans: in a field, the type code is the value; in a collection, one byte.
            1 | 2 => self.advance(1),
            3 => self.advance(1),
            4..=6 => self.varint().map(drop),
            7 => self.advance(8),
            8 => {
                let n = self.varint()?;
                self.advance(n)
            }
            9 | 10 => {
                let b = self.byte()?;
                let n = match b >> 4 {
                    15 => self.varint()?,
                    n => n as u64,
                };
                self.elements(n, &[b & 0x0f], depth)
            }
            11 => match self.varint()? {
                0 => Ok(()),
                n => {
                    let kv = self.byte()?;
                    self.elements(n, &[kv >> 4, kv & 0x0f], depth)
                }
            },
            STRUCT => self.fields(depth + 1, |r, _, ty| r.skip(ty, depth + 1)),
            _ => Err(Damaged),
        }
    }

    /// Skips `n` collection elements, each a value of each of `types`: each takes a byte at
    /// least, so `n` is first bounded by the bytes left.
    fn elements(&mut self, n: u64, types: &[u8], depth: u32) -> Result<(), Unread> {
        if n > (self.bytes.len() - self.at) as u64 {
            return Err(Short);
        }
        for _ in 0..n {
            for &t in types {
                self.skip(t, depth + 1)?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A field header byte: the id delta and the type.
    fn field(delta: u8, ty: u8) -> u8 {
        delta << 4 | ty
    }

    fn zigzag(v: i64, out: &mut Vec<u8>) {
        let mut u = ((v << 1) ^ (v >> 63)) as u64;
        while u >= 0x80 {
            out.push(u as u8 | 0x80);
            u >>= 7;
        }
        out.push(u as u8);
    }

    /// A page header as a writer encodes it: type, sizes, then the page's own header.
    fn header(kind: i64, uncompressed: i64, compressed: i64, body: &[u8]) -> Vec<u8> {
        let mut b = vec![field(1, I32)];
        zigzag(kind, &mut b);
        b.push(field(1, I32));
        zigzag(uncompressed, &mut b);
        b.push(field(1, I32));
        zigzag(compressed, &mut b);
        b.extend(body);
        b.push(0);
        b
    }

    /// A data page header (field 5): 1 num_values, 2 encoding, 3 and 4 level encodings, and
    /// statistics (field 5: a struct with a binary max) that must be skipped.
    fn data_body(encoding: i64) -> Vec<u8> {
        let mut b = vec![field(2, STRUCT), field(1, I32)];
        zigzag(100, &mut b);
        b.push(field(1, I32));
        zigzag(encoding, &mut b);
        b.extend([field(1, I32), 6, field(1, I32), 6]);
        b.extend([field(1, STRUCT), field(1, 8), 3, b'a', b'b', b'c', 0]);
        b.push(0);
        b
    }

    #[test]
    fn a_data_page_header_gives_its_sizes_encoding_and_length() {
        let bytes = header(0, 1000, 400, &data_body(8));
        let page = PageHeader::parse(&bytes).unwrap();
        assert_eq!(
            page,
            PageHeader {
                kind: PageKind::Data { encoding: 8 },
                uncompressed: 1000,
                compressed: 400,
                header_len: bytes.len(),
            }
        );
        // Cut anywhere, the header is short, never misread.
        for cut in 0..bytes.len() {
            assert_eq!(PageHeader::parse(&bytes[..cut]), Err(Short), "cut at {cut}");
        }
    }

    #[test]
    fn a_dictionary_page_header_gives_its_count() {
        let mut body = vec![field(4, STRUCT), field(1, I32)];
        zigzag(3_000_000, &mut body);
        body.extend([field(1, I32), 0, 0]);
        let page = PageHeader::parse(&header(2, 12, 12, &body)).unwrap();
        assert_eq!(page.kind, PageKind::Dictionary { values: 3_000_000 });
        // A dictionary page's type with a data page's header is no header.
        assert_eq!(
            PageHeader::parse(&header(2, 12, 12, &data_body(0))),
            Err(Damaged)
        );
    }

    /// Collections that claim more elements than bytes follow, nesting past the limit, and
    /// an endless varint are refused at once, however large the claim.
    #[test]
    fn hostile_headers_are_refused_without_work_past_their_bytes() {
        let mut list = header(0, 10, 10, &[]);
        list.pop();
        list.extend([field(4, 9), 0xf1, 0xff, 0xff, 0xff, 0xff, 0x0f, 0]);
        assert_eq!(PageHeader::parse(&list), Err(Short));
        let mut map = header(0, 10, 10, &[]);
        map.pop();
        map.extend([field(4, 11), 0xff, 0xff, 0xff, 0xff, 0x0f, 0x11, 0]);
        assert_eq!(PageHeader::parse(&map), Err(Short));
        let mut deep = vec![field(4, STRUCT); 10_000];
        deep.extend(vec![0; 10_000]);
        assert_eq!(PageHeader::parse(&deep), Err(Damaged));
        let endless = [
            field(1, I32),
            0xff,
            0xff,
            0xff,
            0xff,
            0xff,
            0xff,
            0xff,
            0xff,
            0xff,
            0xff,
            0x01,
            0,
        ];
        assert_eq!(PageHeader::parse(&endless), Err(Damaged));
    }
}
