//! The corner turn: the payload of a frame of C interleaved channels split into one run of
//! samples per channel, the kernel behind `channels=` (`vdif::transform`).
//!
//! VDIF packs samples from the least significant bits of each 32-bit little-endian word, the
//! C channels of one sample time next to each other (channel 0 lowest); a complex sample is
//! its real then its imaginary part, so it moves as one element of twice the width. With
//! `w`-bit elements a word holds E = 32/w of them, and C words hold exactly E sample times of
//! every channel: one word's worth per channel. Such a block is a bit matrix, C rows (words)
//! of E elements, and the corner turn is a fixed permutation of it: the element at stream
//! index n = t·C + c (time t, channel c) goes to row c, element t. Written as the bits of the
//! element's address (element bits low, row bits high) that permutation is a rotation, and a
//! rotation is a few swaps of two address bits, each one a masked shift-and-xor ("delta
//! swap") on whole words — the bit-matrix transpose of Hacker's Delight §7-3, generalised:
//!
//! - two element bits: elements move within each word (`Op::Within`);
//! - an element bit and a row bit: elements move between rows a power of two apart (`Op::Across`);
//! - two row bits: whole rows change places, which costs nothing: the rows are read out in
//!   the permuted order (`Plan::row_bits`).
//!
//! 16 channels of 2 bits (each word one sample time) is four `Across` swaps, the 16×16
//! transpose; 4 channels of 2 bits is two `Within` swaps then two `Across` swaps. Two blocks
//! travel side by side in the halves of a u64, a lane (no mask lets a bit cross from one half
//! into the other), so each channel's 8 output bytes — the least a VDIF frame grows by — come
//! out of one row; 16 lanes are turned together, each swap one loop over them that the
//! compiler turns into vector instructions. The common layouts (2 to 32 channels of 1 to
//! 16-bit elements) are compiled with their plan as a constant, so the swaps unroll into
//! straight-line code; any other power-of-two layout runs the same plan from memory. Safe
//! Rust throughout: 16 channels of 2 bits turn at about 8 GB/s of input on one core (in cache).

/// Address-bit swaps a plan can need: at most one per element bit of a 32-bit word (32 one-bit
/// elements have 5).
const MAX_OPS: usize = 5;

/// One swap of two address bits, applied to a block's rows (u64: two blocks side by side).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
    /// Within each row: the elements under `mask` trade places with those `shift` bits above.
    Within { shift: u32, mask: u64 },
    /// Between rows `step` apart: the upper row's elements under `mask` trade places with the
    /// lower row's elements `shift` bits above them.
    Across { step: usize, shift: u32, mask: u64 },
}

impl Op {
    /// Applies the swap to rows of `NB` u64 lanes each (NB pairs of blocks side by side).
    /// Plain index loops: with a constant op they unroll and vectorise over the lanes.
    #[inline(always)]
    fn apply<const NB: usize>(self, rows: &mut [[u64; NB]]) {
        match self {
            Op::Within { shift, mask } => {
                for row in rows.iter_mut() {
                    for x in row.iter_mut() {
                        let t = ((*x >> shift) ^ *x) & mask;
                        *x ^= t | (t << shift);
                    }
                }
            }
            Op::Across { step, shift, mask } => {
                let mut base = 0;
                while base + 2 * step <= rows.len() {
                    for i in base..base + step {
                        let (mut lo, mut hi) = (rows[i], rows[i + step]);
                        for n in 0..NB {
                            let t = ((lo[n] >> shift) ^ hi[n]) & mask;
                            hi[n] ^= t;
                            lo[n] ^= t << shift;
                        }
                        (rows[i], rows[i + step]) = (lo, hi);
                    }
                    base += 2 * step;
                }
            }
        }
    }
}

/// The swaps that turn a block of 2^log2_c rows of 2^log2_w-bit elements, and where each
/// channel's row ends up.
#[derive(Clone, Copy, Debug)]
struct Plan {
    ops: [Op; MAX_OPS],
    len: usize,
    /// Bit x of the row index that holds channel c is bit `row_bits[x]` of c.
    row_bits: [u8; 32],
    log2_c: u32,
}

/// Mask of the elements (`width` bits each, `per_word` to a 32-bit lane) whose index has bit
/// `p` set (`p_set`) or clear, and bit `q` set or clear (`q` = u32::MAX: any), copied into
/// both halves of a u64.
const fn lane_mask(width: u32, per_word: u32, p: u32, p_set: bool, q: u32, q_set: bool) -> u64 {
    let mut m = 0u64;
    let mut e = 0;
    while e < per_word {
        let p_ok = ((e >> p) & 1 == 1) == p_set;
        let q_ok = q == u32::MAX || ((e >> q) & 1 == 1) == q_set;
        if p_ok && q_ok {
            m |= ((1u64 << width) - 1) << (e * width);
        }
        e += 1;
    }
    m | (m << 32)
}

impl Plan {
    /// The plan for 2^log2_c channels of 2^log2_w-bit elements (w ≤ 32).
    const fn new(log2_c: u32, log2_w: u32) -> Plan {
        let width = 1u32 << log2_w;
        let per_word = 32 / width;
        let k = 5 - log2_w; // element bits of an address; the row bits follow
        let n = k + log2_c;
        // at[i]: which bit of the input address is now at address bit i. The output wants
        // the time bits (input bits log2_c..n) as element bits, the channel bits as row bits.
        let mut at = [0u8; 40];
        let mut i = 0;
        while i < n {
            at[i as usize] = i as u8;
            i += 1;
        }
        let mut ops = [Op::Within { shift: 0, mask: 0 }; MAX_OPS];
        let mut len = 0;
        let mut i = 0;
        while i < k {
            let want = (i + log2_c) as u8;
            let mut j = i;
            while at[j as usize] != want {
                j += 1;
            }
            if j != i {
                ops[len] = if j < k {
                    // Elements with bit i set and bit j clear trade with those 2^j - 2^i above.
                    Op::Within {
                        shift: ((1 << j) - (1 << i)) * width,
                        mask: lane_mask(width, per_word, i, true, j, false),
                    }
                } else {
                    // The lower row's elements with bit i set trade with the upper row's
                    // elements 2^i below them.
                    Op::Across {
                        step: 1 << (j - k),
                        shift: (1 << i) * width,
                        mask: lane_mask(width, per_word, i, false, u32::MAX, false),
                    }
                };
                len += 1;
                let t = at[i as usize];
                at[i as usize] = at[j as usize];
                at[j as usize] = t;
            }
            i += 1;
        }
        let mut row_bits = [0u8; 32];
        let mut x = 0;
        while x < log2_c {
            row_bits[x as usize] = at[(k + x) as usize];
            x += 1;
        }
        Plan {
            ops,
            len,
            row_bits,
            log2_c,
        }
    }

    /// Applies the swaps to a block's rows. Written out one by one rather than as a loop, so
    /// that with a constant plan each is inlined with its own constant step, shift and mask.
    #[inline(always)]
    fn apply<const NB: usize>(&self, rows: &mut [[u64; NB]]) {
        const { assert!(MAX_OPS == 5) };
        if self.len > 0 {
            self.ops[0].apply(rows);
        }
        if self.len > 1 {
            self.ops[1].apply(rows);
        }
        if self.len > 2 {
            self.ops[2].apply(rows);
        }
        if self.len > 3 {
            self.ops[3].apply(rows);
        }
        if self.len > 4 {
            self.ops[4].apply(rows);
        }
    }

    /// The row of a turned block that holds channel `c`.
    fn row_of(&self, c: usize) -> usize {
        (0..self.log2_c as usize).fold(0, |row, x| row | ((c >> self.row_bits[x]) & 1) << x)
    }
}

/// Turns `input`, lanes of 8·C bytes (two blocks of C words, C = rows.len()), NB lanes at a
/// time, and writes the rows of the channels `wanted` to `dst`: channel j's 8 bytes of lane l
/// at `dst[j * stride + 8 * l..]`. Returns the input bytes turned: whole groups of NB lanes.
#[inline(always)]
fn turn_blocks<const NB: usize>(
    plan: &Plan,
    rows: &mut [[u64; NB]],
    input: &[u8],
    dst: &mut [u8],
    stride: usize,
    wanted: &[usize],
) -> usize {
    let c = rows.len();
    let group = 8 * c * NB;
    let mut done = 0;
    for (b, chunk) in input.chunks_exact(group).enumerate() {
        for (n, block) in chunk.chunks_exact(8 * c).enumerate() {
            // The block's first C words in the low halves, its next C words in the high halves:
            // words g and g + 1 read at once keep g low, words C + g - 1 and C + g keep C + g high.
            for (g, row) in rows.iter_mut().enumerate() {
                let low = u64::from_le_bytes(block[4 * g..4 * g + 8].try_into().unwrap());
                let at = 4 * (c + g) - 4;
                let high = u64::from_le_bytes(block[at..at + 8].try_into().unwrap());
                row[n] = (low & 0xffff_ffff) | (high & !0xffff_ffff);
            }
        }
        plan.apply(rows);
        for (j, &r) in wanted.iter().enumerate() {
            let at = j * stride + 8 * NB * b;
            for (out, x) in dst[at..at + 8 * NB].chunks_exact_mut(8).zip(rows[r]) {
                out.copy_from_slice(&x.to_le_bytes());
            }
        }
        done += group;
    }
    done
}

/// `turn_blocks` over all of `input`: NB lanes at a time, then one at a time for the rest.
#[inline(always)]
fn turn_all<const NB: usize>(
    plan: &Plan,
    wide: &mut [[u64; NB]],
    one: &mut [[u64; 1]],
    input: &[u8],
    dst: &mut [u8],
    stride: usize,
    wanted: &[usize],
) {
    let done = turn_blocks(plan, wide, input, dst, stride, wanted);
    if done < input.len() {
        // Each channel's output so far: 1/C of the input turned.
        turn_blocks(
            plan,
            one,
            &input[done..],
            &mut dst[done / one.len()..],
            stride,
            wanted,
        );
    }
}

/// Lanes turned at a time: 16 make 128 output bytes per channel, two whole cache lines, so that
/// the 16 output streams of 16 channels are written a line at a time (measured: twice the speed
/// of 4 lanes into a large buffer, the same in cache; 32 lanes spill).
const LANES: usize = 16;

/// A layout compiled with its plan as a constant: C channels of W-bit elements.
struct Fixed<const C: usize, const W: u32>;

impl<const C: usize, const W: u32> Fixed<C, W> {
    const PLAN: Plan = Plan::new(C.trailing_zeros(), W.trailing_zeros());

    fn turn(input: &[u8], dst: &mut [u8], stride: usize, wanted: &[usize]) {
        let (mut wide, mut one) = ([[0u64; LANES]; C], [[0u64; 1]; C]);
        turn_all(&Self::PLAN, &mut wide, &mut one, input, dst, stride, wanted);
    }
}

type TurnFn = fn(&[u8], &mut [u8], usize, &[usize]);

/// The compiled kernel for C channels of W-bit elements, where there is one.
fn fixed(nchan: usize, width: u32) -> Option<TurnFn> {
    macro_rules! table {
        ($( ($c:literal, $w:literal) ),* $(,)?) => {
            match (nchan, width) {
                $( ($c, $w) => Some(Fixed::<$c, $w>::turn as TurnFn), )*
                _ => None,
            }
        };
    }
    table!(
        (2, 1),
        (4, 1),
        (8, 1),
        (16, 1),
        (32, 1),
        (2, 2),
        (4, 2),
        (8, 2),
        (16, 2),
        (32, 2),
        (2, 4),
        (4, 4),
        (8, 4),
        (16, 4),
        (32, 4),
        (2, 8),
        (4, 8),
        (8, 8),
        (16, 8),
        (32, 8),
        (2, 16),
        (4, 16),
        (8, 16),
        (16, 16),
        (32, 16),
    )
}

#[derive(Clone, Copy)]
enum Kernel {
    /// One channel: the payload is already that channel's samples.
    Copy,
    Fixed(TurnFn),
    /// Any other power-of-two layout: the same plan, read from memory.
    Any,
}

/// Splits payloads of `nchan` channels into the samples of chosen channels.
#[derive(Clone)]
pub struct CornerTurn {
    nchan: usize,
    plan: Plan,
    kernel: Kernel,
    /// The row of a turned block holding each chosen channel, in the order chosen.
    rows: Vec<usize>,
}

impl CornerTurn {
    /// A corner turn of `nchan` channels (a power of two) of `bits`-bit samples (complex:
    /// `bits` per part) keeping `channels` (each below `nchan`), in that order. Any sample size
    /// goes for one channel; several need samples of a power of two bits, at most 32.
    pub fn new(
        nchan: u32,
        bits: u32,
        complex: bool,
        channels: &[u32],
    ) -> Result<CornerTurn, String> {
        if nchan == 0 || !nchan.is_power_of_two() {
            return Err(format!("{nchan} channels: VDIF has a power of two"));
        }
        if let Some(c) = channels.iter().find(|&&c| c >= nchan) {
            return Err(format!(
                "channel {c} is not in a stream of {nchan} channels (0 to {})",
                nchan - 1
            ));
        }
        let nchan = nchan as usize;
        let width = bits * if complex { 2 } else { 1 };
        if nchan == 1 {
            return Ok(CornerTurn {
                nchan,
                plan: Plan::new(0, 5), // nothing to swap
                kernel: Kernel::Copy,
                rows: vec![0; channels.len()],
            });
        }
        if !width.is_power_of_two() || width > 32 {
            return Err(format!(
                "{}{bits}-bit samples of several channels cannot be split: samples of 1, 2, 4, 8, 16 or 32 bits can{}",
                if complex { "complex " } else { "" },
                if complex { " (complex: 1 to 16 bits a part)" } else { "" },
            ));
        }
        let plan = Plan::new(nchan.trailing_zeros(), width.trailing_zeros());
        Ok(CornerTurn {
            nchan,
            plan,
            kernel: fixed(nchan, width).map_or(Kernel::Any, Kernel::Fixed),
            rows: channels.iter().map(|&c| plan.row_of(c as usize)).collect(),
        })
    }

    /// The input is turned in blocks of this many bytes: 8 bytes out per channel each.
    pub fn block_bytes(&self) -> usize {
        8 * self.nchan
    }

    /// Writes the chosen channels' samples of `input` (whole blocks) to `dst`: channel j (in
    /// the order chosen) gets `input.len() / nchan` bytes from `dst[j * stride]`. Panics when
    /// `input` is not whole blocks or `dst` is too short: the caller sizes both.
    pub fn run(&self, input: &[u8], dst: &mut [u8], stride: usize) {
        assert!(
            input.len() % self.block_bytes() == 0,
            "the corner turn takes whole blocks"
        );
        match self.kernel {
            Kernel::Copy => {
                for j in 0..self.rows.len() {
                    dst[j * stride..][..input.len()].copy_from_slice(input);
                }
            }
            Kernel::Fixed(f) => f(input, dst, stride, &self.rows),
            Kernel::Any => {
                let (mut wide, mut one) =
                    (vec![[0u64; LANES]; self.nchan], vec![[0u64; 1]; self.nchan]);
                turn_all(
                    &self.plan, &mut wide, &mut one, input, dst, stride, &self.rows,
                );
            }
        }
    }

    /// The same turn, always through the plan read from memory (to test it against the
    /// compiled kernels).
    #[cfg(test)]
    fn generic(mut self) -> CornerTurn {
        if let Kernel::Fixed(_) = self.kernel {
            self.kernel = Kernel::Any;
        }
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Channel `c`'s samples, one value at a time, straight from the VDIF rule: value v of the
    /// payload sits at bits (v mod 32/b)·b of word v / (32/b); a sample is one value (two for
    /// complex: real, imaginary), the channels' samples of one time in channel order.
    fn reference(payload: &[u8], nchan: usize, bits: usize, complex: bool, c: usize) -> Vec<u8> {
        let per_word = 32 / bits;
        let parts = if complex { 2 } else { 1 };
        let value = |v: usize| {
            let w = u32::from_le_bytes(payload[4 * (v / per_word)..][..4].try_into().unwrap());
            let shift = (v % per_word) * bits;
            (w as u64 >> shift) & ((1u64 << bits) - 1)
        };
        let n_values = payload.len() / 4 * per_word;
        let mut out = vec![0u8; payload.len() / nchan];
        let mut k = 0; // value index in the output
        for t in 0..n_values / parts / nchan {
            for part in 0..parts {
                let v = value((t * nchan + c) * parts + part);
                let (word, shift) = (k / per_word, (k % per_word) * bits);
                let mut w = u32::from_le_bytes(out[4 * word..][..4].try_into().unwrap()) as u64;
                w |= v << shift;
                out[4 * word..][..4].copy_from_slice(&(w as u32).to_le_bytes());
                k += 1;
            }
        }
        out
    }

    fn turned(turn: &CornerTurn, payload: &[u8], n: usize) -> Vec<Vec<u8>> {
        let each = payload.len() / turn.nchan;
        // Outputs a little apart (stride > each), with guard bytes that must stay untouched.
        let stride = each + 8;
        let mut dst = vec![0xa5u8; stride * n];
        turn.run(payload, &mut dst, stride);
        for j in 0..n {
            assert!(dst[j * stride + each..(j + 1) * stride]
                .iter()
                .all(|&b| b == 0xa5));
        }
        (0..n).map(|j| dst[j * stride..][..each].to_vec()).collect()
    }

    fn check(nchan: usize, bits: u32, complex: bool, blocks: usize, channels: &[u32], seed: u64) {
        let turn = CornerTurn::new(nchan as u32, bits, complex, channels).unwrap();
        let len = blocks * turn.block_bytes();
        let mut x = seed | 1;
        let payload: Vec<u8> = (0..len)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect();
        let got = turned(&turn, &payload, channels.len());
        let generic = turned(&turn.clone().generic(), &payload, channels.len());
        for (j, &c) in channels.iter().enumerate() {
            let want = reference(&payload, nchan, bits as usize, complex, c as usize);
            assert_eq!(
                got[j], want,
                "{nchan} ch x {bits} bit complex={complex}: channel {c}"
            );
            assert_eq!(
                generic[j], want,
                "generic {nchan} ch x {bits} bit: channel {c}"
            );
        }
    }

    #[test]
    fn the_benchmark_case_matches_the_reference() {
        let all: Vec<u32> = (0..16).collect();
        check(16, 2, false, 64, &all, 1);
        check(16, 2, false, 3, &[15, 0, 7], 2);
    }

    #[test]
    fn a_hand_made_block_turns() {
        // 4 channels of 8 bits: word t holds sample time t as bytes [c0, c1, c2, c3].
        let payload: Vec<u8> = (0..8u8)
            .flat_map(|t| (0..4u8).map(move |c| 16 * c + t))
            .collect();
        let turn = CornerTurn::new(4, 8, false, &[2, 0]).unwrap();
        let out = turned(&turn, &payload, 2);
        assert_eq!(out[0], (32..40).collect::<Vec<u8>>());
        assert_eq!(out[1], (0..8).collect::<Vec<u8>>());
    }

    #[test]
    fn every_common_layout_matches_the_reference() {
        for nchan in [1usize, 2, 4, 8, 16, 32, 64, 128] {
            for bits in [1u32, 2, 4, 8, 16, 32] {
                for complex in [false, true] {
                    if complex && bits == 32 && nchan > 1 {
                        continue;
                    }
                    let all: Vec<u32> = (0..nchan as u32).collect();
                    // Two groups of lanes and a tail.
                    let blocks = 2 * LANES + 5;
                    check(
                        nchan,
                        bits,
                        complex,
                        blocks,
                        &all,
                        nchan as u64 * 31 + bits as u64,
                    );
                }
            }
        }
    }

    #[test]
    fn refuses_what_it_cannot_split() {
        let e = CornerTurn::new(16, 2, false, &[16]).err().unwrap();
        assert!(e.contains("0 to 15"), "{e}");
        assert!(CornerTurn::new(4, 3, false, &[0]).is_err());
        assert!(CornerTurn::new(4, 32, true, &[0]).is_err());
        // One channel: any sample size, the payload as it is.
        let t = CornerTurn::new(1, 3, false, &[0]).unwrap();
        assert_eq!(
            turned(&t, &[1, 2, 3, 4, 5, 6, 7, 8], 1),
            vec![vec![1, 2, 3, 4, 5, 6, 7, 8]]
        );
    }

    proptest! {
        #[test]
        fn any_layout_and_choice_matches_the_reference(
            log2_c in 0u32..8,
            log2_b in 0u32..6,
            complex in any::<bool>(),
            blocks in 1usize..2 * LANES + 4,
            pick in prop::collection::vec(any::<u32>(), 1..6),
            seed in any::<u64>(),
        ) {
            let nchan = 1usize << log2_c;
            let bits = 1u32 << log2_b;
            prop_assume!(!(complex && bits == 32 && nchan > 1));
            let channels: Vec<u32> = pick.iter().map(|p| p % nchan as u32).collect();
            check(nchan, bits, complex, blocks, &channels, seed);
        }
    }
}
