//! Bit-level writer and reader (LSB-first within little-endian bytes), the building block of
//! every variable-length code. The reader never reads past its input: running out of bits is a
//! [`CodecError::Truncated`].

use super::CodecError;

/// Appends bit fields to a byte vector.
///
/// Fewer than 8 bits wait in the accumulator between fields; each field is added to it and the
/// accumulator is stored, all eight bytes, at the vector's end (into spare capacity), which
/// then grows by the whole bytes it holds. No branch depends on the data (the technique of
/// Giesen's "Writing bits in far too many ways"; a flush of every 32 bits cost a mispredicted
/// branch on every few fields).
pub struct BitWriter<'a> {
    out: &'a mut Vec<u8>,
    acc: u64,
    used: u32,
}

impl<'a> BitWriter<'a> {
    /// A writer appending to `out`.
    pub fn new(out: &'a mut Vec<u8>) -> Self {
        BitWriter {
            out,
            acc: 0,
            used: 0,
        }
    }

    /// Writes the low `bits` bits of `value` (`bits <= 32`).
    #[inline]
    pub fn write(&mut self, value: u64, bits: u32) {
        debug_assert!(bits <= 32 && value >> bits == 0);
        self.write_fields([(value, bits)]);
    }

    /// Writes each `(value, bits)` field (`bits <= 56`, `value < 2^bits`): the same bits as one
    /// [`write`](Self::write) per field, with the accumulator, the length and the vector's
    /// pointer in locals for the whole run (through `&mut self` they were stored and reloaded
    /// for every field: a raw store into the vector might have changed them).
    #[inline]
    pub fn write_fields(&mut self, fields: impl IntoIterator<Item = (u64, u32)>) {
        let (mut acc, mut used) = (self.acc, self.used);
        let out = &mut *self.out;
        let mut len = out.len();
        let (mut ptr, mut room) = (out.as_mut_ptr(), out.capacity() - len);
        for (value, bits) in fields {
            debug_assert!(bits <= 56 && value >> bits == 0);
            // `used < 8` on entry, so the accumulator never overflows.
            acc |= value << used;
            used += bits;
            if room < 8 {
                // SAFETY: the first `len` bytes are initialised (whole bytes stored below).
                unsafe { out.set_len(len) };
                out.reserve(4096);
                (ptr, room) = (out.as_mut_ptr(), out.capacity() - len);
            }
            let whole = used / 8;
            // SAFETY: `room >= 8` bytes of capacity follow `len`, so the 8-byte store stays in
            // the allocation; the `whole <= 7` bytes counted are initialised by it.
            unsafe { std::ptr::write_unaligned(ptr.add(len).cast::<u64>(), acc.to_le()) };
            (len, room) = (len + whole as usize, room - whole as usize);
            acc >>= whole * 8; // at most 56: `used < 64`
            used -= whole * 8;
        }
        // SAFETY: as above.
        unsafe { out.set_len(len) };
        (self.acc, self.used) = (acc, used);
    }

    /// Writes `value` in unary: `value` one-bits then a zero.
    #[inline]
    pub fn write_unary(&mut self, mut value: u64) {
        while value >= 32 {
            self.write(u32::MAX as u64, 32);
            value -= 32;
        }
        self.write((1u64 << value) - 1, value as u32 + 1);
    }

    /// Writes `value >= 1` in Elias gamma code: the bit length minus one in unary, then the
    /// bits below the leading one. 1 costs one bit, 2-3 three, 4-7 five: for the small integers
    /// of quantisation levels it is never longer than the recursive (omega) code below 2^16.
    #[inline]
    pub fn write_gamma(&mut self, value: u32) {
        debug_assert!(value >= 1);
        let n = 31 - value.leading_zeros();
        let low = (value as u64) & ((1u64 << n) - 1);
        if n <= 15 {
            // One field: n ones, a zero, then the low bits.
            self.write(((1u64 << n) - 1) | low << (n + 1), 2 * n + 1);
        } else {
            self.write_unary(n as u64);
            self.write(low, n);
        }
    }

    /// Writes `value` as a Golomb-Rice code with parameter `k <= 31`: `value >> k` in unary, then
    /// the low `k` bits. One field when the code fits in 32 bits (the common case for gaps near
    /// their mean), the unary loop otherwise.
    #[inline]
    pub fn write_rice(&mut self, value: u64, k: u32) {
        let q = value >> k;
        let low = value & ((1u64 << k) - 1);
        if q + 1 + k as u64 <= 32 {
            let q = q as u32;
            self.write(((1u64 << q) - 1) | low << (q + 1), q + 1 + k);
        } else {
            self.write_unary(q);
            self.write(low, k);
        }
    }

    /// Writes each value in `bits` bits (`1 <= bits <= 32`): the same bits as one
    /// [`write`](Self::write) per value, as many to a field as fit in 56 bits
    /// ([`write_grouped`](Self::write_grouped)).
    pub fn write_packed(&mut self, values: impl Iterator<Item = u64>, bits: u32) {
        debug_assert!((1..=32).contains(&bits));
        self.write_grouped(values.map(|v| (v, bits)), (56 / bits) as usize);
    }

    /// Writes each `(value, bits)` field, the same bits as one [`write`](Self::write) each,
    /// `per` consecutive fields joined into one field of [`write_fields`](Self::write_fields)
    /// (the caller's promise: any `per` of them hold at most 56 bits together). The writer's
    /// accumulator chains one field to the next; joining them shortens that chain, which was
    /// the cost of writing many short fields (eighteen 3-bit values to a field instead of ten
    /// halved it).
    #[inline]
    pub fn write_grouped(&mut self, mut fields: impl Iterator<Item = (u64, u32)>, per: usize) {
        self.write_fields(std::iter::from_fn(|| {
            let (mut joined, mut at, mut n) = (0u64, 0u32, 0);
            while n < per {
                let Some((value, bits)) = fields.next() else {
                    break;
                };
                joined |= value << at;
                at += bits;
                n += 1;
            }
            (n > 0).then_some((joined, at))
        }));
    }

    /// Writes an f32 as its 32 bits.
    #[inline]
    pub fn write_f32(&mut self, x: f32) {
        self.write(x.to_bits() as u64, 32);
    }

    /// Pads the last byte with zeros and returns the number of bytes written in total.
    pub fn finish(mut self) -> usize {
        while self.used > 0 {
            self.out.push(self.acc as u8);
            self.acc >>= 8;
            self.used = self.used.saturating_sub(8);
        }
        self.out.len()
    }
}

/// Writes the sign bit of each value (1 for negative), 32 to a field.
pub fn write_signs(values: impl Iterator<Item = f32>, w: &mut BitWriter) {
    w.write_packed(values.map(|v| (v.to_bits() >> 31) as u64), 1);
}

/// Reads `count` sign bits written by [`write_signs`] and appends `±magnitude` for each.
pub fn read_signs(
    count: usize,
    magnitude: f32,
    r: &mut BitReader,
    out: &mut Vec<f32>,
) -> Result<(), CodecError> {
    let positive = magnitude.abs().to_bits();
    let mut left = count;
    while left > 0 {
        let n = left.min(32) as u32;
        let word = r.read(n)?;
        out.extend((0..n).map(|j| f32::from_bits(positive | (((word >> j) & 1) as u32) << 31)));
        left -= n as usize;
    }
    Ok(())
}

/// A [`BitReader`]'s buffer inside [`BitReader::buffered`]: the next `avail` bits of the input
/// (at least 56), lowest first.
pub struct Buffered {
    acc: u64,
    avail: u32,
}

impl Buffered {
    /// The buffered bits (those above `avail` are zero or the input's next bits).
    #[inline]
    pub fn peek(&self) -> u64 {
        self.acc
    }

    /// How many bits are buffered.
    #[inline]
    pub fn avail(&self) -> u32 {
        self.avail
    }

    /// Drops the next `bits <= avail()` bits (`bits < 64`).
    #[inline]
    pub fn consume(&mut self, bits: u32) {
        debug_assert!(bits <= self.avail && bits < 64);
        self.acc >>= bits;
        self.avail -= bits;
    }

    /// Reads the next `bits <= 32` bits.
    #[inline]
    pub fn take(&mut self, bits: u32) -> u64 {
        let v = self.acc & ((1u64 << bits) - 1);
        self.consume(bits);
        v
    }
}

/// Reads bit fields written by [`BitWriter`].
pub struct BitReader<'a> {
    bytes: &'a [u8],
    pos: usize,
    acc: u64,
    avail: u32,
}

impl<'a> BitReader<'a> {
    /// A reader over `bytes`.
    pub fn new(bytes: &'a [u8]) -> Self {
        BitReader {
            bytes,
            pos: 0,
            acc: 0,
            avail: 0,
        }
    }

    #[inline]
    fn refill(&mut self, bits: u32) -> Result<(), CodecError> {
        if self.avail < bits && self.avail <= 32 && self.pos + 4 <= self.bytes.len() {
            let word = u32::from_le_bytes(self.bytes[self.pos..self.pos + 4].try_into().unwrap());
            self.acc |= (word as u64) << self.avail;
            self.avail += 32;
            self.pos += 4;
        }
        while self.avail < bits {
            let Some(&b) = self.bytes.get(self.pos) else {
                return Err(CodecError::Truncated {
                    needed: self.pos + 1,
                    have: self.bytes.len(),
                });
            };
            self.acc |= (b as u64) << self.avail;
            self.avail += 8;
            self.pos += 1;
        }
        Ok(())
    }

    /// Reads `bits` bits (`bits <= 32`).
    #[inline]
    pub fn read(&mut self, bits: u32) -> Result<u64, CodecError> {
        if bits == 0 {
            return Ok(0);
        }
        self.refill(bits)?;
        let v = self.acc & ((1u64 << bits) - 1);
        self.acc >>= bits;
        self.avail -= bits;
        Ok(v)
    }

    /// Runs `step` on the buffer, topped up to at least 56 bits before each call, while eight
    /// bytes of input remain and `step` returns `true`; `step` consumes at most the bits it
    /// is shown. The buffer stays in registers and is topped up without a branch (an unaligned
    /// 8-byte load, advancing by the whole bytes it adds: variant 4 of Giesen's "Reading bits
    /// in far too many ways"). The caller reads what is left the checked way.
    #[inline]
    pub fn buffered(&mut self, mut step: impl FnMut(&mut Buffered) -> bool) {
        // The top-up needs fewer than 64 bits buffered: give a full buffer's last byte back to
        // the input (it came from there: bytes are buffered in order).
        if self.avail == 64 {
            self.acc &= u64::MAX >> 8;
            self.avail = 56;
            self.pos -= 1;
        }
        let mut b = Buffered {
            acc: self.acc,
            avail: self.avail,
        };
        let (bytes, mut pos) = (self.bytes, self.pos);
        while let Some(next8) = bytes.get(pos..pos + 8) {
            // The next eight bytes shifted in above the buffered bits, of which the whole
            // bytes count (the rest are read again next time).
            b.acc |= u64::from_le_bytes(next8.try_into().unwrap()) << b.avail;
            pos += ((63 - b.avail) >> 3) as usize;
            b.avail |= 56;
            if !step(&mut b) {
                break;
            }
        }
        // Only the buffered bits stay in the buffer (`finish` checks them for padding).
        self.acc = b.acc & ((1u64 << b.avail) - 1);
        (self.avail, self.pos) = (b.avail, pos);
    }

    /// Reads one field per item, of `width(&item) <= 56` bits, and hands each to `sink` with
    /// its item: the same bits as one [`read`](Self::read) per field (two above 32 bits). While eight bytes of input
    /// remain, each field is an unaligned 8-byte load at its own bit position, shifted and
    /// masked: the fields' reads are independent and the only chain from one field to the next
    /// is the position's addition (a buffer topped up field by field chained three or four
    /// dependent instructions per field, and ran at half the speed). The last few take the
    /// checked path. Inlined, so that what `sink` updates stays in registers.
    #[inline(always)]
    pub fn read_fields<T>(
        &mut self,
        items: impl IntoIterator<Item = T>,
        width: impl Fn(&T) -> u32,
        mut sink: impl FnMut(T, u64),
    ) -> Result<(), CodecError> {
        let mut items = items.into_iter();
        let bytes = self.bytes;
        // The position of the next unread bit; a field starting before `fast_end` has eight
        // bytes from its first byte on.
        let mut bit = self.pos * 8 - self.avail as usize;
        let fast_end = bytes.len().saturating_sub(7) * 8;
        while bit < fast_end {
            let Some(item) = items.next() else { break };
            let w = width(&item);
            debug_assert!(w <= 56);
            let at = bit >> 3;
            let word = u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap());
            sink(item, (word >> (bit & 7)) & ((1u64 << w) - 1));
            bit += w as usize;
        }
        self.seek(bit);
        for item in items {
            let w = width(&item);
            let low = self.read(w.min(32))?;
            let v = low | self.read(w.saturating_sub(32))? << 32;
            sink(item, v);
        }
        Ok(())
    }

    /// Moves the reader to bit `bit` of its input (`bit <= 8 · len`), dropping what it
    /// buffered: the partial byte's bits above `bit` are buffered again.
    fn seek(&mut self, bit: usize) {
        (self.pos, self.acc, self.avail) = (bit / 8, 0, 0);
        let skip = (bit % 8) as u32;
        if skip > 0 {
            self.acc = (self.bytes[self.pos] >> skip) as u64;
            self.avail = 8 - skip;
            self.pos += 1;
        }
    }

    /// Fills `out` with values written by [`BitWriter::write_packed`] in `bits` bits
    /// (`1 <= bits <= 8`), failing on a value above `max`. The caller bounds `out.len()` by
    /// what the message can hold before sizing it.
    pub fn read_packed(&mut self, out: &mut [u8], bits: u32, max: u64) -> Result<(), CodecError> {
        debug_assert!((1..=8).contains(&bits));
        // Eight values to a field (`8 · bits <= 56`; four of 8 bits), split with fixed shifts.
        // The bound is checked after, in a pass that vectorises (a value above `max` does not
        // change how many bits are read; a running maximum here chained every value).
        let per = if bits <= 7 { 8 } else { 4 };
        let mask = (1u64 << bits) - 1;
        let split = |chunk: &mut [u8], word: u64| {
            for (j, c) in chunk.iter_mut().enumerate() {
                *c = ((word >> (j as u32 * bits)) & mask) as u8;
            }
        };
        self.read_fields(
            out.chunks_mut(per),
            |c| c.len() as u32 * bits,
            |chunk, word| match chunk.len() {
                8 => split(&mut chunk[..8], word),
                _ => split(chunk, word),
            },
        )?;
        let over = out.iter().fold(0u8, |m, &v| m.max(v)) as u64 > max;
        if over {
            return Err(CodecError::Corrupt(format!("packed value above {max}")));
        }
        Ok(())
    }

    /// Reads an f32 written by [`BitWriter::write_f32`].
    #[inline]
    pub fn read_f32(&mut self) -> Result<f32, CodecError> {
        Ok(f32::from_bits(self.read(32)? as u32))
    }

    /// Reads a unary value, failing beyond `max`.
    #[inline]
    pub fn read_unary(&mut self, max: u64) -> Result<u64, CodecError> {
        let mut n = 0u64;
        loop {
            self.refill(1)?;
            let ones = (!self.acc).trailing_zeros().min(self.avail);
            n += ones as u64;
            if n > max {
                return Err(CodecError::Corrupt(format!("unary value above {max}")));
            }
            if ones < self.avail {
                self.acc = self.acc.checked_shr(ones + 1).unwrap_or(0);
                self.avail -= ones + 1;
                return Ok(n);
            }
            self.acc = 0;
            self.avail = 0;
        }
    }

    /// Reads a Golomb-Rice code written by [`BitWriter::write_rice`], failing when its quotient
    /// exceeds `max_q`. With 32 bits buffered, a code of up to 32 bits is one peek and one shift.
    #[inline]
    pub fn read_rice(&mut self, k: u32, max_q: u64) -> Result<u64, CodecError> {
        self.fill();
        let q = (!self.acc).trailing_zeros();
        if q + 1 + k <= self.avail && (q as u64) <= max_q {
            // q + 1 + k <= avail <= 64: with k = 0 and 63 ones in a full buffer, both shifts
            // are by 64, which `checked_shr` turns into an empty buffer (found by fuzzing).
            let low = self.acc.checked_shr(q + 1).unwrap_or(0) & ((1u64 << k) - 1);
            self.acc = self.acc.checked_shr(q + 1 + k).unwrap_or(0);
            self.avail -= q + 1 + k;
            return Ok((q as u64) << k | low);
        }
        let q = self.read_unary(max_q)?;
        Ok(q << k | self.read(k)?)
    }

    /// Buffers one more 32-bit word when at most 32 bits are buffered and the input has one;
    /// never fails (the slow paths of the readers handle the last bytes).
    #[inline]
    fn fill(&mut self) {
        if self.avail <= 32 && self.pos + 4 <= self.bytes.len() {
            let word = u32::from_le_bytes(self.bytes[self.pos..self.pos + 4].try_into().unwrap());
            self.acc |= (word as u64) << self.avail;
            self.avail += 32;
            self.pos += 4;
        }
    }

    /// Reads an Elias gamma value written by [`BitWriter::write_gamma`], failing above `max`.
    #[inline]
    pub fn read_gamma(&mut self, max: u32) -> Result<u32, CodecError> {
        let n = self.read_unary(31)? as u32;
        let value = (1u64 << n) | self.read(n)?;
        if value > max as u64 {
            return Err(CodecError::Corrupt(format!(
                "Elias gamma value {value} above {max}"
            )));
        }
        Ok(value as u32)
    }

    /// Bits not read yet: an upper bound on what the rest of a message can hold, used to bound
    /// allocations and work by the bytes actually received.
    pub fn remaining_bits(&self) -> usize {
        (self.bytes.len() - self.pos) * 8 + self.avail as usize
    }

    /// Bytes consumed so far (a partly read byte counts; bytes merely buffered do not).
    pub fn bytes_consumed(&self) -> usize {
        (self.pos * 8 - self.avail as usize).div_ceil(8)
    }

    /// Fails unless the fields read so far end in the last byte and the rest of that byte is
    /// zero padding. (The reader buffers up to four bytes ahead, so this counts bits consumed,
    /// not bytes fetched.)
    pub fn finish(self) -> Result<(), CodecError> {
        let used = self.bytes_consumed();
        if used != self.bytes.len() {
            return Err(CodecError::Trailing {
                extra: self.bytes.len() - used,
            });
        }
        if self.acc != 0 {
            return Err(CodecError::Corrupt("nonzero padding bits".into()));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gamma_codes_have_their_lengths_and_round_trip() {
        let values = [1u32, 2, 3, 4, 7, 8, 1000, u32::MAX >> 1, u32::MAX];
        for &v in &values {
            let mut buf = Vec::new();
            let mut w = BitWriter::new(&mut buf);
            w.write_gamma(v);
            w.write(1, 1); // a marker: the gamma code must end exactly before it
            w.finish();
            let mut r = BitReader::new(&buf);
            assert_eq!(r.read_gamma(u32::MAX).unwrap(), v);
            assert_eq!(
                r.read(1).unwrap(),
                1,
                "gamma({v}) read too few or too many bits"
            );
            let len = 2 * (32 - v.leading_zeros()) - 1;
            assert_eq!(
                buf.len(),
                (len as usize + 1).div_ceil(8),
                "gamma({v}) length"
            );
        }
        let mut buf = Vec::new();
        let mut w = BitWriter::new(&mut buf);
        w.write_gamma(9);
        w.finish();
        assert!(
            BitReader::new(&buf).read_gamma(8).is_err(),
            "bound not enforced"
        );
    }

    #[test]
    fn rice_codes_round_trip_on_both_paths() {
        // Codes of 32 bits and less take the one-field paths, longer ones the unary loops; mix
        // them so that both paths meet every buffer position.
        let mut cases = Vec::new();
        for k in [0u32, 1, 4, 15, 30, 31] {
            for q in [
                0u64,
                1,
                2,
                30 - k.min(30) as u64,
                31 - k as u64,
                32 - k as u64,
                40,
                100,
            ] {
                cases.push((k, (q << k) | (0x5555_5555 & ((1u64 << k) - 1))));
            }
        }
        let mut buf = Vec::new();
        let mut w = BitWriter::new(&mut buf);
        for &(k, v) in &cases {
            w.write_rice(v, k);
            w.write(1, 1);
        }
        w.finish();
        let mut r = BitReader::new(&buf);
        for &(k, v) in &cases {
            assert_eq!(r.read_rice(k, u64::MAX).unwrap(), v, "k {k}");
            assert_eq!(r.read(1).unwrap(), 1, "rice({v}, {k}) length");
        }
        r.finish().unwrap();
        // 63 ones and a zero with k = 0 fill the buffer exactly (a shift by 64).
        // (One bit, then a 31-bit code, leave exactly 32 bits buffered, so the next fill makes
        // 64.)
        let mut buf = Vec::new();
        let mut w = BitWriter::new(&mut buf);
        w.write(1, 1);
        w.write_rice(5, 30);
        w.write_rice(63, 0);
        w.write_rice(2, 0);
        w.finish();
        let mut r = BitReader::new(&buf);
        assert_eq!(r.read(1).unwrap(), 1);
        assert_eq!(r.read_rice(30, u64::MAX).unwrap(), 5);
        assert_eq!(r.avail, 32);
        assert_eq!(r.read_rice(0, u64::MAX).unwrap(), 63);
        assert_eq!(r.read_rice(0, u64::MAX).unwrap(), 2);
        // A quotient above the bound is an error on the fast path too.
        let mut buf = Vec::new();
        let mut w = BitWriter::new(&mut buf);
        w.write_rice(5 << 3, 3);
        w.finish();
        assert!(BitReader::new(&buf).read_rice(3, 4).is_err());
        assert_eq!(BitReader::new(&buf).read_rice(3, 5).unwrap(), 40);
    }

    #[test]
    fn packed_fields_are_the_bits_of_single_writes_and_bound_their_values() {
        for bits in 1..=8u32 {
            let mut values: Vec<u64> = (0..77u64).map(|i| (i * 37) % (1 << bits)).collect();
            values[40] = (1 << bits) - 1; // the largest value the width holds
            let (mut packed, mut single) = (Vec::new(), Vec::new());
            let mut w = BitWriter::new(&mut packed);
            w.write(1, 3); // an odd start, so fields straddle bytes
            w.write_packed(values.iter().copied(), bits);
            w.finish();
            let mut w = BitWriter::new(&mut single);
            w.write(1, 3);
            values.iter().for_each(|&v| w.write(v, bits));
            w.finish();
            assert_eq!(packed, single, "{bits} bits");
            let mut r = BitReader::new(&packed);
            r.read(3).unwrap();
            let mut out = vec![0u8; values.len()];
            r.read_packed(&mut out, bits, u64::MAX).unwrap();
            r.finish().unwrap();
            assert!(
                out.iter().zip(&values).all(|(&a, &b)| a as u64 == b),
                "{bits}"
            );
            // One value above the bound, in the buffered words or in the checked tail.
            let max = (1u64 << bits) - 2;
            for at in [0, 40, 76] {
                let mut over = values.clone();
                over.iter_mut().for_each(|v| *v = (*v).min(max));
                over[at] = max + 1;
                let mut packed = Vec::new();
                let mut w = BitWriter::new(&mut packed);
                w.write(1, 3);
                w.write_packed(over.iter().copied(), bits);
                w.finish();
                let read = |max| {
                    let mut r = BitReader::new(&packed);
                    r.read(3).unwrap();
                    r.read_packed(&mut vec![0u8; over.len()], bits, max)
                };
                assert!(read(max + 1).is_ok(), "{bits} bits");
                assert!(read(max).is_err(), "{bits} bits: {} at {at}", max + 1);
            }
        }
    }

    #[test]
    fn signs_round_trip_in_words_and_a_tail() {
        let values: Vec<f32> = (0..77)
            .map(|i| if i % 3 == 0 { -1.0 } else { 0.5 })
            .collect();
        let mut buf = Vec::new();
        let mut w = BitWriter::new(&mut buf);
        write_signs(values.iter().copied(), &mut w);
        assert_eq!(w.finish(), 10, "77 bits");
        let mut out = Vec::new();
        let mut r = BitReader::new(&buf);
        read_signs(77, 2.0, &mut r, &mut out).unwrap();
        r.finish().unwrap();
        let want: Vec<f32> = values.iter().map(|v| 2.0f32.copysign(*v)).collect();
        assert_eq!(out, want);
        assert!(read_signs(81, 2.0, &mut BitReader::new(&buf), &mut out).is_err());
    }

    #[test]
    fn fields_round_trip_and_overrun_is_an_error() {
        let mut buf = Vec::new();
        let mut w = BitWriter::new(&mut buf);
        let fields: Vec<(u64, u32)> = (0..500)
            .map(|i| ((i * 7919) as u64 % (1 << (i % 33)), (i % 33) as u32))
            .collect();
        for &(v, b) in &fields {
            w.write(v, b);
            w.write_unary(v % 70);
        }
        let n = w.finish();
        assert_eq!(n, buf.len());
        let mut r = BitReader::new(&buf);
        for (i, &(v, b)) in fields.iter().enumerate() {
            assert_eq!(r.read(b).unwrap(), v, "field {i}");
            assert_eq!(
                r.read_unary(100).unwrap(),
                v % 70,
                "unary {i} (bits {b}, avail {}, acc {:x})",
                r.avail,
                r.acc
            );
        }
        r.finish().unwrap();
        // Bytes after the last field are an error however the reader buffered them.
        for extra in 1..6 {
            let mut longer = buf.clone();
            longer.extend(std::iter::repeat_n(0u8, extra));
            let mut r = BitReader::new(&longer);
            for &(v, b) in &fields {
                r.read(b).unwrap();
                r.read_unary(100).unwrap();
                let _ = v;
            }
            assert!(
                matches!(r.finish(), Err(CodecError::Trailing { .. })),
                "{extra} extra bytes"
            );
        }
        let mut short = BitReader::new(&buf[..buf.len() - 1]);
        let mut failed = false;
        for &(_, b) in &fields {
            if short.read(b).is_err() || short.read_unary(100).is_err() {
                failed = true;
                break;
            }
        }
        assert!(failed, "reading past the end must fail");
    }

    proptest::proptest! {
        /// `write_fields` writes the bits of one `write` per field (two, above 32 bits), from
        /// any offset, into a vector with any spare capacity.
        #[test]
        fn write_fields_writes_what_write_writes(
            fields in proptest::collection::vec((0u32..=56, proptest::prelude::any::<u64>()), 0..2000),
            lead in 0u32..=32,
            spare in 0usize..64,
        ) {
            let fields: Vec<(u64, u32)> = fields
                .iter()
                .map(|&(b, v)| (v & ((1u64 << b) - 1), b))
                .collect();
            let (mut batched, mut single) = (Vec::with_capacity(spare), Vec::new());
            let mut w = BitWriter::new(&mut batched);
            w.write((1u64 << lead) - 1, lead);
            w.write_fields(fields.iter().copied());
            w.write(5, 3);
            w.finish();
            let mut w = BitWriter::new(&mut single);
            w.write((1u64 << lead) - 1, lead);
            for &(v, b) in &fields {
                w.write(v & 0xFFFF_FFFF, b.min(32));
                w.write(v >> 32.min(b), b.saturating_sub(32));
            }
            w.write(5, 3);
            w.finish();
            proptest::prop_assert_eq!(batched, single);
        }

        /// `write_grouped` writes the bits of one `write` per field, whatever the group size
        /// that keeps a group within 56 bits, with groups cut short at the end.
        #[test]
        fn write_grouped_writes_what_write_writes(
            values in proptest::collection::vec(proptest::prelude::any::<u64>(), 0..500),
            widest in 0u32..=32,
            lead in 0u32..=32,
        ) {
            // Widths up to `widest`, at least one of them `widest`: the group size is the most
            // such fields 56 bits hold.
            let fields: Vec<(u64, u32)> = values
                .iter()
                .enumerate()
                .map(|(i, &v)| {
                    let b = if i % 7 == 0 { widest } else { (v >> 58) as u32 % (widest + 1) };
                    (v & ((1u64 << b) - 1), b)
                })
                .collect();
            let per = (56 / widest.max(1)) as usize;
            let (mut grouped, mut single) = (Vec::new(), Vec::new());
            let mut w = BitWriter::new(&mut grouped);
            w.write((1u64 << lead) - 1, lead);
            w.write_grouped(fields.iter().copied(), per);
            w.finish();
            let mut w = BitWriter::new(&mut single);
            w.write((1u64 << lead) - 1, lead);
            fields.iter().for_each(|&(v, b)| w.write(v, b));
            w.finish();
            proptest::prop_assert_eq!(grouped, single);
        }

        /// `read_fields` reads the same fields (up to 56 bits) as plain reads (two above 32
        /// bits), from any state a reader can be in (after plain reads or a Rice code), hands back a reader that goes on where it
        /// stopped, and fails on a message one byte short.
        #[test]
        fn read_fields_reads_what_read_reads(
            fields in proptest::collection::vec((0u32..=56, proptest::prelude::any::<u64>()), 0..300),
            lead in proptest::collection::vec(0u32..=32, 0..4),
            rice in proptest::prelude::any::<bool>(),
            tail in 0usize..4,
        ) {
            let fields: Vec<(u32, u64)> = fields
                .iter()
                .map(|&(b, v)| (b, v & ((1u64 << b) - 1)))
                .collect();
            // Fields above 32 bits as two reads and writes of at most 32.
            let halves = |b: u32| (b.min(32), b.saturating_sub(32));
            let read = |r: &mut BitReader, b: u32| {
                let (lo, hi) = halves(b);
                r.read(lo).and_then(|v| Ok(v | r.read(hi)? << 32))
            };
            let mut buf = Vec::new();
            let mut w = BitWriter::new(&mut buf);
            lead.iter().for_each(|&b| w.write((1u64 << b) - 1, b));
            if rice {
                w.write_rice(5, 2);
            }
            fields.iter().for_each(|&(b, v)| {
                let (lo, hi) = halves(b);
                w.write(v & 0xFFFF_FFFF, lo);
                w.write(v >> 32, hi);
            });
            w.finish();
            let lead_in = |r: &mut BitReader| {
                for &b in &lead {
                    assert_eq!(r.read(b).unwrap(), (1u64 << b) - 1);
                }
                if rice {
                    assert_eq!(r.read_rice(2, 100).unwrap(), 5);
                }
            };
            // The last `tail` fields by plain reads after `read_fields`.
            let split = fields.len().saturating_sub(tail);
            let mut r = BitReader::new(&buf);
            lead_in(&mut r);
            let mut got = Vec::new();
            r.read_fields(&fields[..split], |f| f.0, |f, v| got.push((f.0, v))).unwrap();
            for &(b, _) in &fields[split..] {
                got.push((b, read(&mut r, b).unwrap()));
            }
            proptest::prop_assert_eq!(&got, &fields);
            r.finish().unwrap();
            let total: u32 = fields.iter().map(|f| f.0).sum();
            if total >= 8 {
                let mut r = BitReader::new(&buf[..buf.len() - 1]);
                lead_in(&mut r);
                proptest::prop_assert!(r.read_fields(&fields, |f| f.0, |_, _| ()).is_err());
            }
        }
    }
}
