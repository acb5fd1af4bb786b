//! How long one permission decision takes: it sits on the path of every tool call.

use criterion::{black_box, criterion_group, criterion_main, Criterion};
use hanzo_policy::permission::{PermissionMode, PermissionRule, RuleList, ScopedPolicy};
use serde_json::json;

fn rules(n: usize, mode: PermissionMode) -> RuleList {
    let list = (0..n)
        .map(|i| PermissionRule::new(format!("bash(tool{i} *)"), mode))
        .chain([
            PermissionRule::new("bash(git status*)", PermissionMode::Allow),
            PermissionRule::new("write_file(src/**)", PermissionMode::Allow),
            PermissionRule::new("mcp__*", PermissionMode::Prompt),
        ])
        .collect();
    RuleList::new(list).expect("valid rules")
}

fn bench(c: &mut Criterion) {
    let policy = ScopedPolicy::new(
        rules(20, PermissionMode::Deny),
        rules(20, PermissionMode::Allow),
        rules(5, PermissionMode::Prompt),
        true,
    );
    let simple = json!({"command": "git status --short"});
    let compound =
        json!({"command": "git status && ls -la | grep foo; echo 'a;b' && cargo test 2>&1"});
    let file = json!({"path": "./src/deep/nested/../module/file.rs"});
    // The ids keep the `tiered/` prefix of before the settings tiers became scopes, so saved
    // criterion baselines stay comparable.
    c.bench_function("tiered/bash_simple", |b| {
        b.iter(|| policy.evaluate(black_box("bash"), black_box(&simple)))
    });
    c.bench_function("tiered/bash_compound", |b| {
        b.iter(|| policy.evaluate(black_box("bash"), black_box(&compound)))
    });
    c.bench_function("tiered/write_file", |b| {
        b.iter(|| policy.evaluate(black_box("write_file"), black_box(&file)))
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
