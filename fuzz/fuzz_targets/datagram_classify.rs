//! A received datagram as the capture sees it (length, truncation, offset, bytes) through
//! learning and classification, then the accounting: nothing panics and the counts add up.
#![no_main]
use libfuzzer_sys::fuzz_target;
use vdifrec::record::accounting::{Accounting, Fate, GapPolicy};
use vdifrec::record::classify::learn_datagram;

fuzz_target!(|data: &[u8]| {
    if data.len() < 4 {
        return;
    }
    let offset = (data[0] % 3) as usize * 4;
    let truncated = data[1] & 1 == 1;
    let big_endian = data[1] & 2 == 2;
    let body = &data[2..];
    // The first datagram teaches the layout; the rest are classified against it.
    let Ok((format, first)) = learn_datagram(body.len(), truncated, offset, body.get(offset..).unwrap_or(&[]), big_endian, None) else {
        return;
    };
    let mut acc = Accounting::new(None, GapPolicy::CountAsLoss);
    acc.frame(&first, Fate::Buffered);
    let mut accepted = 1u64;
    // Walk the rest of the input as further frames of the same size, small edits to headers.
    let fs = format.frame_size;
    let mut frame = body[offset..offset + fs].to_vec();
    for (i, b) in data.iter().enumerate().take(256) {
        frame[i % fs.min(32)] ^= b;
        if let Ok(h) = format.classify_datagram(fs + offset, false, offset, &frame, big_endian) {
            acc.frame(&h, Fate::Buffered);
            accepted += 1;
        }
    }
    acc.finish();
    let t = acc.totals();
    assert_eq!(t.counts.received, accepted);
    let rows_received: u64 = acc.take_rows().iter().map(|r| r.counts.received).sum();
    assert!(rows_received <= accepted);
});
