//! Generates the CSI, control API and state protobuf messages and the
//! grpcio service stubs from `proto/` at build time, the `-json` form of
//! the control API's messages (`proto/json_gen.rs`), and compiles the
//! artifact fetcher's C shim (`src/task/artifact/ffi.c`).
//!
//! Generated code is not committed: `proto/*.proto` is the single source of
//! truth, and no `protoc` is needed, because both generators run on
//! protobuf-parse's pure-Rust parser. grpcio-compiler 0.13 only reads
//! protobuf-2 descriptors, so the protobuf-3 descriptors are re-encoded and
//! decoded by protobuf 2 here; protobuf 2 never reaches the binary.

use std::error::Error;
use std::fs;
use std::path::{Path, PathBuf};

use protobuf::Message as _;
use protobuf2::Message as _;

#[path = "proto/json_gen.rs"]
mod json_gen;

const PROTOS: &[&str] = &[
    "proto/csi.proto",
    "proto/agent.proto",
    "proto/state.proto",
    "proto/etcd.proto",
    "proto/cluster.proto",
];

fn main() -> Result<(), Box<dyn Error>> {
    compile_artifact_ffi()?;
    for proto in PROTOS {
        println!("cargo:rerun-if-changed={proto}");
    }
    let out = PathBuf::from(std::env::var("OUT_DIR")?).join("proto");
    fs::create_dir_all(&out)?;

    // Generated for protobuf's lite runtime: no descriptors, reflection or
    // text format. The full runtime's reflection, which only the CLI's
    // `-json` output used, put 0.9 MB of x86-64 code into the static
    // binary; that output is now written by code generated below
    // (`json_gen`).
    protobuf_codegen::Codegen::new()
        .pure()
        .include("proto")
        .inputs(PROTOS)
        .customize(protobuf_codegen::Customize::default().lite_runtime(true))
        .out_dir(&out)
        .run()?;

    let parsed = protobuf_parse::Parser::new()
        .pure()
        .include("proto")
        .inputs(PROTOS)
        .parse_and_typecheck()?;
    let mut descriptors = Vec::new();
    for file in &parsed.file_descriptors {
        let bytes = file.write_to_bytes()?;
        descriptors.push(protobuf2::descriptor::FileDescriptorProto::parse_from_bytes(&bytes)?);
    }
    let to_generate: Vec<String> = PROTOS
        .iter()
        .map(|p| {
            Path::new(p)
                .file_name()
                .unwrap()
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    let mut modules: Vec<String> = to_generate
        .iter()
        .map(|f| f.trim_end_matches(".proto").to_string())
        .collect();
    for generated in grpcio_compiler::codegen::gen(&descriptors, &to_generate) {
        // The method constants are made public so that a server may
        // register a method by the generated name without the generated
        // typed handler (api/methods.rs serves most of the control API's
        // methods through one byte-level handler).
        let content =
            String::from_utf8(generated.content)?.replace("\nconst METHOD_", "\npub const METHOD_");
        fs::write(out.join(&generated.name), content)?;
        modules.push(generated.name.trim_end_matches(".rs").to_string());
    }

    let mod_rs: String = modules.iter().map(|m| format!("pub mod {m};\n")).collect();
    fs::write(out.join("mod.rs"), mod_rs)?;

    let agent = parsed
        .file_descriptors
        .iter()
        .find(|file| file.name() == "agent.proto")
        .ok_or("protobuf-parse returned no descriptor for agent.proto")?;
    let json = json_gen::generate(agent).map_err(|e| format!("proto/agent.proto: {e}"))?;
    fs::write(out.join("agent_json.rs"), json)?;
    Ok(())
}

/// The artifact fetcher's C shim, against the headers of the TLS library
/// and zlib the binary links, so that the compiler checks every call into
/// them.
///
/// Which TLS library that is depends on how grpcio-sys gets gRPC's core:
/// - built from source (the default of grpcio-sys, and `make static`'s and
///   `GRPC=vendored` builds): grpcio-sys builds the sources of the
///   boringssl-src crate and links them statically (it exports no `DEP_`
///   metadata of its own), and those sources' `include/` is the one its
///   build copies next to the libraries.
/// - `GRPCIO_SYS_USE_PKG_CONFIG=1` (`make build` and the other development
///   targets): grpcio-sys links the system's gRPC core through pkg-config,
///   and with it the system's OpenSSL (Debian's `libgrpc-dev` requires
///   `libssl-dev`), whose headers are in the default include path; no
///   BoringSSL is built or linked.
///
/// zlib: libz-sys names the directory of the `zlib.h` it built with (none
/// when it found a system zlib in the default include path), the same in
/// both builds.
///
/// The warnings that flag a type that does not match a library's
/// declaration are errors, and so is a definition without a prototype in
/// `ffi.h`. The shim must compile without warnings under gcc and clang
/// (zig's, for `make static`), against BoringSSL's headers and OpenSSL's.
fn compile_artifact_ffi() -> Result<(), Box<dyn Error>> {
    const SHIM: &str = "src/task/artifact/ffi.c";
    println!("cargo:rerun-if-changed={SHIM}");
    println!("cargo:rerun-if-changed=src/task/artifact/ffi.h");
    // grpcio-sys's own switch, read the way it reads it.
    println!("cargo:rerun-if-env-changed=GRPCIO_SYS_USE_PKG_CONFIG");
    let system_grpc = std::env::var("GRPCIO_SYS_USE_PKG_CONFIG").is_ok_and(|v| v == "1");
    let mut build = cc::Build::new();
    if system_grpc {
        // The shim refuses BoringSSL's headers under this define.
        build.define("CSI_FFI_SYSTEM_OPENSSL", None);
    } else {
        let boringssl_include = boringssl_src::source_dir().join("src").join("include");
        if !boringssl_include.join("openssl").join("ssl.h").is_file() {
            return Err(format!(
                "BoringSSL's headers are not in {}",
                boringssl_include.display()
            )
            .into());
        }
        build
            .include(&boringssl_include)
            .define("CSI_FFI_BORINGSSL", None);
    }
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
    println!("cargo:rerun-if-env-changed=DEP_Z_INCLUDE");
    if let Ok(dirs) = std::env::var("DEP_Z_INCLUDE") {
        for dir in dirs.split(',').filter(|d| !d.is_empty()) {
            build.include(dir);
        }
    }
    if let Err(e) = build.try_compile("csi_artifact_ffi") {
        if system_grpc {
            return Err(format!(
                "the artifact shim does not compile against the system's OpenSSL \
                 (GRPCIO_SYS_USE_PKG_CONFIG=1 needs libssl-dev: make deps): {e}"
            )
            .into());
        }
        return Err(e.into());
    }
    if system_grpc {
        // After the shim's static library, which needs them: the system's
        // libssl and libcrypto, which the system's gRPC core links too.
        for lib in ["ssl", "crypto"] {
            println!("cargo:rustc-link-lib={lib}");
        }
    }
    Ok(())
}
