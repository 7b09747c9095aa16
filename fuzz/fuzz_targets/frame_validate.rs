//! A frame-sized buffer against the stream's layout: classification never panics, and what
//! it accepts is a frame of that layout.
#![no_main]
use libfuzzer_sys::fuzz_target;
use vdifrec::record::classify::{learn_format, StreamFormat};
use vdifrec::vdif::Header;

fuzz_target!(|data: &[u8]| {
    let reference = Header::new(Some(0), 1056, 4, 2, false).expect("a valid header");
    let mut frame = vec![0u8; 1056];
    reference.write_to(&mut frame);
    let format = learn_format(&frame).expect("a valid frame");
    // The fuzzer's bytes over the start of the frame (header and some payload).
    let n = data.len().min(frame.len());
    frame[..n].copy_from_slice(&data[..n]);
    if let Ok(h) = format.classify(&frame) {
        assert_eq!(StreamFormat::of(&h), format);
        assert_eq!(h.frame_size(), 1056);
    }
    if let Some(f) = learn_format(data) {
        assert_eq!(f.frame_size, data.len());
        assert!(f.classify(data).is_ok() || f.edv.is_some_and(|e| matches!(e, 1 | 3 | 4)));
    }
});
