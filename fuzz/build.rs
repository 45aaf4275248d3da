//! Compiles the artifact fetcher's C shim (`src/task/artifact/ffi.c`) for
//! the archive target, whose gzip and zip readers inflate through it.
//!
//! The agent's builds of gRPC from source compile the shim against the
//! BoringSSL that grpcio-sys builds; this crate does not build gRPC, so it
//! compiles the same file against the system's OpenSSL and zlib (Debian's
//! `libssl-dev` and `zlib1g-dev`) and links those, as the agent's
//! development build does for OpenSSL. The shim uses only API that both TLS
//! libraries have. The warnings are the main build's, errors here too, so
//! that a call that does not match OpenSSL's declarations fails this build
//! as it would fail the agent's against BoringSSL's.

fn main() {
    const SHIM: &str = "../src/task/artifact/ffi.c";
    println!("cargo:rerun-if-changed={SHIM}");
    println!("cargo:rerun-if-changed=../src/task/artifact/ffi.h");
    let mut build = cc::Build::new();
    build
        .file(SHIM)
        .std("c11")
        .warnings(true)
        .extra_warnings(true)
        .warnings_into_errors(true);
    for flag in [
        "-Wconversion",
        "-Wsign-conversion",
        "-Wmissing-prototypes",
        "-Wstrict-prototypes",
    ] {
        build.flag(flag);
    }
    build.compile("csi_artifact_ffi");
    // After the shim's own static library, which needs them.
    for lib in ["ssl", "crypto", "z"] {
        println!("cargo:rustc-link-lib={lib}");
    }
}
