#![no_main]
// This target keeps a world of hv threads across inputs and drops it when an
// input took the vif down; those threads end a moment later, and LeakSanitizer
// would report what they still hold. The check is off for this binary only
// (docs/FUZZING.md); a real leak would show as growing RSS instead.
#[no_mangle]
pub extern "C" fn __lsan_default_options() -> *const std::ffi::c_char {
    c"detect_leaks=0".as_ptr()
}

libfuzzer_sys::fuzz_target!(|data: &[u8]| splitnet_fuzz::netback_requests(data));
