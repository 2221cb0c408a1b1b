//! Replays the kept fuzz corpus (`fuzz/corpus/TARGET/*`) through the fuzz targets'
//! own bodies on stable, so a corpus input that panics, or a target that no longer
//! compiles against the crates' APIs, fails the normal suite and not only a nightly
//! fuzz run. The bodies are `fuzz/src/lib.rs` itself, compiled in here: the fuzz
//! crate stays out of the root workspace (it needs nightly and libFuzzer).

#[path = "../../fuzz/src/lib.rs"]
mod fuzz_bodies;

use std::fs;
use std::path::{Path, PathBuf};

fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz")
}

/// Runs every file of `fuzz/corpus/TARGET` through `body`; a failed property panics
/// inside `body`, and the file is named here.
fn replay(target: &str, body: fn(&[u8])) {
    let dir = fuzz_dir().join("corpus").join(target);
    let mut files: Vec<PathBuf> = fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.expect("a directory entry").path())
        .collect();
    files.sort();
    assert!(
        files.len() >= 5,
        "{target}: the corpus holds {} inputs; seed it with at least 5",
        files.len()
    );
    for file in files {
        let data = fs::read(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        if std::panic::catch_unwind(|| body(&data)).is_err() {
            panic!(
                "{target}: {} fails the target (see the panic above)",
                file.display()
            );
        }
    }
}

macro_rules! corpus_tests {
    ($($target:ident),+ $(,)?) => {
        $(
            #[test]
            fn $target() {
                replay(stringify!($target), fuzz_bodies::$target);
            }
        )+

        /// Each fuzz target has a replay test here, and each replay test a target.
        #[test]
        fn every_fuzz_target_is_replayed() {
            let mut targets: Vec<String> = fs::read_dir(fuzz_dir().join("fuzz_targets"))
                .expect("fuzz/fuzz_targets")
                .map(|entry| {
                    let name = entry.expect("a directory entry").file_name();
                    name.to_string_lossy().trim_end_matches(".rs").to_owned()
                })
                .collect();
            targets.sort();
            let mut replayed = vec![$(stringify!($target).to_owned()),+];
            replayed.sort();
            assert_eq!(targets, replayed);
        }
    };
}

corpus_tests!(
    webhook_verifier,
    webhook_body,
    hop2_headers,
    enqueue_jsonl,
    numscript,
    camt053,
    csv_statement,
    cdc_pgoutput,
);
