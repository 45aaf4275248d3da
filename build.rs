//! Generates the CSI, control API and state protobuf messages and the
//! grpcio service stubs from `proto/` at build time.
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

const PROTOS: &[&str] = &[
    "proto/csi.proto",
    "proto/agent.proto",
    "proto/state.proto",
    "proto/etcd.proto",
    "proto/cluster.proto",
];

fn main() -> Result<(), Box<dyn Error>> {
    for proto in PROTOS {
        println!("cargo:rerun-if-changed={proto}");
    }
    let out = PathBuf::from(std::env::var("OUT_DIR")?).join("proto");
    fs::create_dir_all(&out)?;

    protobuf_codegen::Codegen::new()
        .pure()
        .include("proto")
        .inputs(PROTOS)
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
        fs::write(out.join(&generated.name), generated.content)?;
        modules.push(generated.name.trim_end_matches(".rs").to_string());
    }

    let mod_rs: String = modules.iter().map(|m| format!("pub mod {m};\n")).collect();
    fs::write(out.join("mod.rs"), mod_rs)?;
    Ok(())
}
