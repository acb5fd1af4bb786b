//! Replays the fuzz corpus (`ipc/fuzz/corpus/decode`) through the fuzz entry point as an ordinary
//! test, so every input the fuzzer ever kept is checked on every CI run.

#[test]
fn corpus_replays_without_panic() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus/decode");
    let mut count = 0;
    let mut frames = 0;
    for entry in std::fs::read_dir(&dir).expect("corpus directory exists") {
        let path = entry.expect("readable entry").path();
        let data = std::fs::read(&path).expect("readable corpus file");
        frames += hanzo_ipc::fuzzing::decode_everything(&data);
        count += 1;
    }
    assert!(count >= 10, "corpus has only {count} inputs");
    assert!(frames > 0, "no corpus input decoded to a frame");
}
