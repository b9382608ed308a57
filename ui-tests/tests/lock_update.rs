//! `SAGA_LOCK=update cargo build` on a crate that has no `saga.lock` yet
//! writes one, even when cargo built the crate already (and would, without
//! the macros asking cargo to track the variable, reuse its cached build).
//!
//! A crate of one workflow is made in a temporary directory and built
//! twice with the workspace's own target directory (its dependencies are
//! built already): first plainly, then with `SAGA_LOCK=update`.

use std::path::{Path, PathBuf};
use std::process::Command;

fn cargo(dir: &Path, target: &Path, update: bool) -> std::process::Output {
    let mut command = Command::new(env!("CARGO"));
    command
        .args(["build", "--quiet", "--offline"])
        .current_dir(dir)
        .env("CARGO_TARGET_DIR", target)
        .env_remove("SAGA_LOCK_PATH");
    if update {
        command.env("SAGA_LOCK", "update");
    } else {
        command.env_remove("SAGA_LOCK");
    }
    command.output().expect("cargo runs")
}

#[test]
fn the_first_lock_update_writes_the_lock_of_a_crate_built_without_one() {
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace");
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace.join("target"))
        .join("lock-update");
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("lock-update-crate");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("src")).unwrap();
    std::fs::write(
        dir.join("Cargo.toml"),
        format!(
            "[package]\nname = \"lock-update-crate\"\nversion = \"0.0.0\"\nedition = \"2024\"\npublish = false\n\n\
             [dependencies]\nsaga-runtime = {{ path = {:?} }}\n\n[workspace]\n",
            workspace.join("saga-runtime")
        ),
    )
    .unwrap();
    std::fs::copy(workspace.join("Cargo.lock"), dir.join("Cargo.lock")).unwrap();
    std::fs::write(
        dir.join("src/lib.rs"),
        "use saga_runtime::prelude::*;\n\n\
         #[workflow(name = \"greet\")]\n\
         pub async fn greet(ctx: WorkflowContext, who: String) -> Result<String, WorkflowError> {\n\
         \x20   ctx.sleep(\"pause\", \"1 second\").await?;\n\
         \x20   Ok(who)\n\
         }\n",
    )
    .unwrap();
    let plain = cargo(&dir, &target, false);
    assert!(
        plain.status.success(),
        "{}",
        String::from_utf8_lossy(&plain.stderr)
    );
    assert!(!dir.join("saga.lock").exists());
    let update = cargo(&dir, &target, true);
    assert!(
        update.status.success(),
        "{}",
        String::from_utf8_lossy(&update.stderr)
    );
    let lock = std::fs::read_to_string(dir.join("saga.lock")).expect("the update wrote saga.lock");
    assert!(lock.contains("workflow greet"), "{lock}");
    assert!(lock.contains("sleep greet pause"), "{lock}");
    let _ = std::fs::remove_dir_all(&dir);
}
