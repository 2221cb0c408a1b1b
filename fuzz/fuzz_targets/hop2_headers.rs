#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| outbox_fuzz::hop2_headers(data));
