//! The client against real typescript-language-server with TypeScript 5 beside it
//! (test-deps/lsp): one diagnostic, one definition.

mod common;

use common::*;
use hanzo_lsp::{Freshness, Position, Severity};
use std::path::Path;

#[tokio::test]
async fn a_type_error_is_diagnosed() {
    let ws = workspace();
    let events = Events::default();
    let servers = real_servers(ws.path(), &events);
    write(
        ws.path(),
        "app.ts",
        "function f(x: number): number {\n  return x;\n}\nconst y: number = f(\"no\");\n",
    );
    let d = servers
        .diagnostics(Path::new("app.ts"))
        .await
        .expect("diagnostics");
    assert_eq!(d.server, "typescript");
    // typescript-language-server publishes without versions.
    assert_eq!(d.freshness, Freshness::Settled);
    assert_eq!(d.diagnostics.len(), 1, "{d:?}");
    let e = &d.diagnostics[0];
    assert_eq!(
        (e.severity, e.code.as_deref(), e.source.as_deref()),
        (Severity::Error, Some("2345"), Some("typescript"))
    );
    assert_eq!(
        (e.range.start, e.range.end),
        (Position::new(4, 21), Position::new(4, 25))
    );
    assert_eq!(
        e.message,
        "Argument of type 'string' is not assignable to parameter of type 'number'."
    );
}

#[tokio::test]
async fn definition_across_modules() {
    let ws = workspace();
    let events = Events::default();
    let servers = real_servers(ws.path(), &events);
    write(
        ws.path(),
        "util.ts",
        "// helpers\nexport function add(a: number, b: number): number {\n  return a + b;\n}\n",
    );
    write(
        ws.path(),
        "main.ts",
        "import { add } from \"./util\";\n\nconsole.log(add(1, 2));\n",
    );
    let defs = servers
        .definition(Path::new("main.ts"), Position::new(3, 13))
        .await
        .expect("definition");
    assert_eq!(defs.len(), 1, "{defs:?}");
    assert_eq!(defs[0].path, "util.ts");
    assert_eq!(
        (defs[0].range.start, defs[0].range.end),
        (Position::new(2, 17), Position::new(2, 20))
    );
}
