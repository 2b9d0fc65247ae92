#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| splitnet_fuzz::vhost_ring(data));
