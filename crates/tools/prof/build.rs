//! Records whether this build keeps frame pointers (`cargo build-profiling`
//! sets `-C force-frame-pointers=yes` for every crate of the build), so a
//! profile can say when user-space call chains will stop at the kernel.

fn main() {
    let flags = std::env::var("CARGO_ENCODED_RUSTFLAGS").unwrap_or_default();
    let on = flags.split('\x1f').any(|f| {
        let f = f.trim_start_matches("-C");
        matches!(
            f,
            "force-frame-pointers"
                | "force-frame-pointers=yes"
                | "force-frame-pointers=y"
                | "force-frame-pointers=on"
                | "force-frame-pointers=true"
        )
    });
    println!("cargo:rustc-env=SPLITNET_FRAME_POINTERS={}", u8::from(on));
    println!("cargo:rerun-if-env-changed=CARGO_ENCODED_RUSTFLAGS");
}
