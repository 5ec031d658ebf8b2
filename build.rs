//! Compiles `proto/` with protox (pure Rust), so no system `protoc` is needed.
//! The encoded descriptor set is written to OUT_DIR for server reflection, with the list of
//! its methods' gRPC paths for the per-method metrics. Also records the commit being built.

use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto");
    git_sha();
    let fds = protox::compile(["matchmaker/v1/matchmaker.proto"], ["proto"])?;
    let out_dir = PathBuf::from(std::env::var("OUT_DIR")?);
    std::fs::write(
        out_dir.join("matchmaker_descriptor.bin"),
        prost::Message::encode_to_vec(&fds),
    )?;
    let mut methods = String::from("&[\n");
    for file in &fds.file {
        for service in &file.service {
            let name = match file.package() {
                "" => service.name().to_string(),
                package => format!("{package}.{}", service.name()),
            };
            for method in &service.method {
                methods.push_str(&format!("    \"/{name}/{}\",\n", method.name()));
            }
        }
    }
    methods.push(']');
    std::fs::write(out_dir.join("matchmaker_methods.rs"), methods)?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .compile_fds(fds)?;
    Ok(())
}

/// The commit being built, for `matchmaker_build_info` and `--version`-style reports:
/// `MATCHMAKER_GIT_SHA` when set (an image build without `.git`), else `git rev-parse`, else
/// "unknown".
fn git_sha() {
    println!("cargo:rerun-if-env-changed=MATCHMAKER_GIT_SHA");
    if std::path::Path::new(".git/HEAD").exists() {
        println!("cargo:rerun-if-changed=.git/HEAD");
        println!("cargo:rerun-if-changed=.git/refs/heads");
    }
    let sha = std::env::var("MATCHMAKER_GIT_SHA").ok().or_else(|| {
        let out = std::process::Command::new("git")
            .args(["rev-parse", "--short=12", "HEAD"])
            .output()
            .ok()?;
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
    });
    println!(
        "cargo:rustc-env=MATCHMAKER_GIT_SHA={}",
        sha.filter(|s| !s.is_empty())
            .unwrap_or_else(|| "unknown".into())
    );
}
