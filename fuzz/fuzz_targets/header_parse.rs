//! Any bytes: parsing never panics, and what parses writes back to the same bytes.
#![no_main]
use libfuzzer_sys::fuzz_target;
use vdifrec::vdif::Header;

fuzz_target!(|data: &[u8]| {
    if let Ok(h) = Header::parse_unchecked(data) {
        let bytes = h.to_bytes();
        assert_eq!(&bytes[..], &data[..bytes.len()]);
        assert_eq!(Header::parse_unchecked(&bytes), Ok(h));
        // Every accessor and the checks run on any header.
        let _ = h.validate();
        let _ = (h.samples_per_frame(), h.payload_size(), h.sample_rate_hz(), h.station_name());
        let _ = h.time(Some(125_000.0));
        for f in h.fields() {
            let mut copy = h;
            copy.set(f, h.get(f)).expect("a value read from a field fits it");
            assert_eq!(copy, h);
        }
    }
});
