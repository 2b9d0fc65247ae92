#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| splitnet_fuzz::frame_wire(data));
