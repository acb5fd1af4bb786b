//! Which language server handles which file: the built-in servers (pyright, typescript-language-
//! server, rust-analyzer), entries from the `lsp_servers` settings key that add servers or
//! override fields of a built-in one, the lookup by file and workspace, and finding a server's
//! program (and TypeScript's `tsserver`, which typescript-language-server needs beside it).

use globset::{GlobBuilder, GlobSet, GlobSetBuilder};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// One entry of the `lsp_servers` settings key (defined with the settings, in `hanzo-policy`).
pub use hanzo_policy::settings::LspServerEntry;

/// The `lsp_servers` settings key: server name → entry.
pub type LspServers = BTreeMap<String, LspServerEntry>;

/// A server definition after settings were applied.
#[derive(Debug, Clone)]
pub struct ServerSpec {
    /// Its name in `lsp_servers` (or the built-in name).
    pub name: String,
    /// The program: a name looked up on the search path, or a path relative to the workspace.
    pub command: String,
    /// Its arguments.
    pub args: Vec<String>,
    /// Globs, relative to the workspace, of the files it handles.
    pub files: Vec<String>,
    matcher: GlobSet,
    /// The language id for every file, instead of the one by extension.
    pub language_id: Option<String>,
    /// It applies only if one of these exists at the workspace root (empty: always).
    pub root_markers: Vec<String>,
    /// Sent as `initializationOptions` in `initialize`.
    pub initialization_options: Option<Value>,
    /// The answers to its `workspace/configuration` requests, by section.
    pub settings: Option<Value>,
    /// What to tell the user when the program is not installed.
    pub install_hint: String,
    /// typescript-language-server: `tsserver` must be found in the workspace or beside it.
    pub needs_typescript: bool,
}

impl ServerSpec {
    /// Whether this server handles `rel` (a path relative to the workspace).
    pub fn handles(&self, rel: &Path) -> bool {
        self.matcher.is_match(rel)
    }

    /// Whether the workspace has what this server needs at its root.
    pub fn applies_to(&self, root: &Path) -> bool {
        self.root_markers.is_empty() || self.root_markers.iter().any(|m| root.join(m).exists())
    }
}

/// Why settings could not be turned into servers.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RegistryError {
    /// An added (not built-in) server lacks a required field.
    #[error("lsp_servers.{server}: {field} is required for a server that is not built in")]
    Missing {
        /// The server's name.
        server: String,
        /// The missing field (`command`, `files`).
        field: &'static str,
    },
    /// A `files` glob does not compile.
    #[error("lsp_servers.{server}.files: invalid glob {glob:?}: {detail}")]
    BadGlob {
        /// The server's name.
        server: String,
        /// The glob as written.
        glob: String,
        /// What is wrong with it.
        detail: String,
    },
}

struct Builtin {
    name: &'static str,
    command: &'static str,
    args: &'static [&'static str],
    files: &'static [&'static str],
    root_markers: &'static [&'static str],
    install_hint: &'static str,
    needs_typescript: bool,
    /// Initialization options (JSON) that settings are merged over.
    options: &'static str,
}

const BUILTINS: &[Builtin] = &[
    Builtin {
        name: "pyright",
        command: "pyright-langserver",
        args: &["--stdio"],
        files: &["**/*.py", "**/*.pyi"],
        root_markers: &[],
        install_hint: "install it with `npm install -g pyright` (or `pip install pyright`)",
        needs_typescript: false,
        options: "",
    },
    Builtin {
        name: "typescript",
        command: "typescript-language-server",
        args: &["--stdio"],
        files: &[
            "**/*.ts", "**/*.tsx", "**/*.mts", "**/*.cts", "**/*.js", "**/*.jsx", "**/*.mjs",
            "**/*.cjs",
        ],
        root_markers: &[],
        install_hint: "install it with `npm install -g typescript-language-server typescript` \
                       (TypeScript may also be a dev dependency of the workspace)",
        needs_typescript: true,
        // Without a syntax server every request waits for the project to load. With one (the
        // server's default), requests during the load are answered from the open files alone:
        // a definition lands on the import instead of the declaration.
        options: r#"{"tsserver": {"useSyntaxServer": "never"}}"#,
    },
    Builtin {
        name: "rust-analyzer",
        command: "rust-analyzer",
        args: &[],
        files: &["**/*.rs"],
        root_markers: &["Cargo.toml", "rust-project.json"],
        install_hint: "install it with `rustup component add rust-analyzer`",
        needs_typescript: false,
        options: "",
    },
];

/// The servers, in the order they are consulted.
#[derive(Debug, Clone)]
pub struct Registry {
    servers: Vec<ServerSpec>,
}

fn compile(server: &str, files: &[String]) -> Result<GlobSet, RegistryError> {
    let mut set = GlobSetBuilder::new();
    for f in files {
        let glob = GlobBuilder::new(f)
            .literal_separator(true)
            .build()
            .map_err(|e| RegistryError::BadGlob {
                server: server.to_string(),
                glob: f.clone(),
                detail: e.kind().to_string(),
            })?;
        set.add(glob);
    }
    set.build().map_err(|e| RegistryError::BadGlob {
        server: server.to_string(),
        glob: files.join(", "),
        detail: e.to_string(),
    })
}

impl Registry {
    /// The built-in servers only.
    pub fn builtin() -> Self {
        Self::with_settings(&BTreeMap::new()).expect("the built-in globs are valid")
    }

    /// The built-in servers with `lsp_servers` applied.
    pub fn with_settings(
        entries: &BTreeMap<String, LspServerEntry>,
    ) -> Result<Self, RegistryError> {
        let mut added = Vec::new();
        for (name, e) in entries {
            if BUILTINS.iter().any(|b| b.name == name) || e.disabled == Some(true) {
                continue;
            }
            let command = e.command.clone().ok_or_else(|| RegistryError::Missing {
                server: name.clone(),
                field: "command",
            })?;
            let files = e.files.clone().ok_or_else(|| RegistryError::Missing {
                server: name.clone(),
                field: "files",
            })?;
            added.push(ServerSpec {
                name: name.clone(),
                matcher: compile(name, &files)?,
                install_hint: e.install_hint.clone().unwrap_or_else(|| {
                    format!("install {command} or fix lsp_servers.{name}.command")
                }),
                command,
                args: e.args.clone().unwrap_or_default(),
                files,
                language_id: e.language_id.clone(),
                root_markers: e.root_markers.clone().unwrap_or_default(),
                initialization_options: e.initialization_options.clone(),
                settings: e.settings.clone(),
                needs_typescript: false,
            });
        }
        let mut servers = added;
        for b in BUILTINS {
            let e = entries.get(b.name).cloned().unwrap_or_default();
            if e.disabled == Some(true) {
                continue;
            }
            let files = e
                .files
                .clone()
                .unwrap_or_else(|| b.files.iter().map(|s| s.to_string()).collect());
            servers.push(ServerSpec {
                name: b.name.to_string(),
                matcher: compile(b.name, &files)?,
                command: e.command.clone().unwrap_or_else(|| b.command.to_string()),
                args: e
                    .args
                    .clone()
                    .unwrap_or_else(|| b.args.iter().map(|s| s.to_string()).collect()),
                files,
                language_id: e.language_id.clone(),
                root_markers: e
                    .root_markers
                    .clone()
                    .unwrap_or_else(|| b.root_markers.iter().map(|s| s.to_string()).collect()),
                initialization_options: merge_options(b.options, e.initialization_options.clone()),
                settings: e.settings.clone(),
                install_hint: e
                    .install_hint
                    .clone()
                    .unwrap_or_else(|| b.install_hint.to_string()),
                needs_typescript: b.needs_typescript,
            });
        }
        Ok(Registry { servers })
    }

    /// Every server, in the order they are consulted (added ones first).
    pub fn servers(&self) -> &[ServerSpec] {
        &self.servers
    }

    /// The index of the server for `rel` (relative to `root`): the first that handles the file
    /// and applies to the workspace.
    pub fn index_for(&self, root: &Path, rel: &Path) -> Option<usize> {
        self.servers
            .iter()
            .position(|s| s.handles(rel) && s.applies_to(root))
    }
}

/// A built-in server's options with the settings' options merged over them (objects key by key).
fn merge_options(builtin: &str, over: Option<Value>) -> Option<Value> {
    let base: Option<Value> = (!builtin.is_empty())
        .then(|| serde_json::from_str(builtin).expect("built-in options are JSON"));
    match (base, over) {
        (None, over) => over,
        (Some(base), None) => Some(base),
        (Some(mut base), Some(over)) => {
            merge_into(&mut base, over);
            Some(base)
        }
    }
}

fn merge_into(base: &mut Value, over: Value) {
    match (base, over) {
        (Value::Object(b), Value::Object(o)) => {
            for (k, v) in o {
                match b.get_mut(&k) {
                    Some(existing) => merge_into(existing, v),
                    None => {
                        b.insert(k, v);
                    }
                }
            }
        }
        (slot, over) => *slot = over,
    }
}

/// The program of `command`: a path (absolute, or relative to the workspace) that is an
/// executable file, or the first executable of that name in `search_path`.
pub fn resolve_program(command: &str, search_path: &[PathBuf], root: &Path) -> Option<PathBuf> {
    let executable = |p: &Path| {
        std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    if command.contains('/') {
        let p = Path::new(command);
        let p = if p.is_absolute() {
            p.to_path_buf()
        } else {
            root.join(p)
        };
        return executable(&p).then_some(p);
    }
    search_path
        .iter()
        .map(|d| d.join(command))
        .find(|p| executable(p))
}

/// The directories of `PATH`.
pub fn path_from_env() -> Vec<PathBuf> {
    std::env::var_os("PATH")
        .map(|p| {
            std::env::split_paths(&p)
                .filter(|d| d.is_absolute())
                .collect()
        })
        .unwrap_or_default()
}

/// Where typescript-language-server will find TypeScript.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TypeScriptLib {
    /// In the workspace's `node_modules` (the server prefers it on its own).
    Workspace,
    /// Beside the server (a `lib` directory), passed as `tsserver.path`.
    Beside(PathBuf),
    /// Nowhere: the server cannot start.
    Missing,
}

/// Where typescript-language-server (at `server_program`) will find TypeScript for the
/// workspace at `root`.
pub fn find_typescript(root: &Path, server_program: &Path) -> TypeScriptLib {
    let tsserver = |nm: &Path| nm.join("typescript/lib/tsserver.js");
    if tsserver(&root.join("node_modules")).is_file() {
        return TypeScriptLib::Workspace;
    }
    // `.bin/typescript-language-server` is a link into the package; look up from its target.
    let real =
        std::fs::canonicalize(server_program).unwrap_or_else(|_| server_program.to_path_buf());
    for dir in real.ancestors().skip(1) {
        let mut candidates = vec![dir.join("node_modules")];
        if dir.file_name().is_some_and(|n| n == "node_modules") {
            candidates.insert(0, dir.to_path_buf());
        }
        if let Some(nm) = candidates.into_iter().find(|nm| tsserver(nm).is_file()) {
            return TypeScriptLib::Beside(nm.join("typescript/lib"));
        }
    }
    TypeScriptLib::Missing
}

/// Adds `tsserver.path` to initialization options unless they set it already.
pub fn with_tsserver_path(options: Option<Value>, lib: &Path) -> Value {
    let mut options = match options {
        Some(Value::Object(o)) => Value::Object(o),
        _ => json!({}),
    };
    if options.pointer("/tsserver/path").is_none() {
        match options.get_mut("tsserver") {
            Some(Value::Object(ts)) => {
                ts.insert("path".into(), json!(lib.to_string_lossy()));
            }
            _ => options["tsserver"] = json!({"path": lib.to_string_lossy()}),
        }
    }
    options
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(v: Value) -> LspServerEntry {
        serde_json::from_value(v).expect("entry")
    }

    #[test]
    fn the_settings_entry_has_a_schema_and_reads_snake_case_keys() {
        let schema = serde_json::to_value(schemars::schema_for!(LspServers)).expect("schema");
        let props = &schema["additionalProperties"]["properties"];
        let props = if props.is_null() {
            let name = schema["additionalProperties"]["$ref"]
                .as_str()
                .expect("ref")
                .rsplit('/')
                .next()
                .expect("name")
                .to_string();
            schema["$defs"][name]["properties"].clone()
        } else {
            props.clone()
        };
        for key in [
            "command",
            "args",
            "files",
            "language_id",
            "root_markers",
            "initialization_options",
            "settings",
            "install_hint",
            "disabled",
        ] {
            assert!(props.get(key).is_some(), "{key} in {schema}");
        }
        let e = entry(
            json!({"command": "x", "root_markers": ["Cargo.toml"], "initialization_options": {"a": 1}}),
        );
        assert_eq!(e.root_markers, Some(vec!["Cargo.toml".to_string()]));
    }

    #[test]
    fn files_pick_the_builtin_servers() {
        let r = Registry::builtin();
        let root = tempfile::tempdir().expect("tmp");
        let name = |p: &str| {
            r.index_for(root.path(), Path::new(p))
                .map(|i| r.servers()[i].name.clone())
        };
        assert_eq!(name("a.py").as_deref(), Some("pyright"));
        assert_eq!(name("src/x/b.pyi").as_deref(), Some("pyright"));
        assert_eq!(name("web/app.tsx").as_deref(), Some("typescript"));
        assert_eq!(name("index.mjs").as_deref(), Some("typescript"));
        // rust-analyzer only with a Cargo.toml at the root.
        assert_eq!(name("src/main.rs"), None);
        std::fs::write(root.path().join("Cargo.toml"), "").expect("write");
        assert_eq!(name("src/main.rs").as_deref(), Some("rust-analyzer"));
        assert_eq!(name("README.md"), None);
    }

    #[test]
    fn settings_add_servers_first_and_override_builtin_fields() {
        let mut entries = BTreeMap::new();
        entries.insert(
            "pyright".to_string(),
            entry(json!({"command": "/opt/pyright", "settings": {"python": {}}})),
        );
        entries.insert(
            "mine".to_string(),
            entry(
                json!({"command": "my-ls", "args": ["--stdio"], "files": ["**/*.py", "**/*.zz"]}),
            ),
        );
        entries.insert(
            "rust-analyzer".to_string(),
            entry(json!({"disabled": true})),
        );
        let r = Registry::with_settings(&entries).expect("registry");
        let names: Vec<&str> = r.servers().iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["mine", "pyright", "typescript"]);
        let py = &r.servers()[1];
        assert_eq!(
            (py.command.as_str(), py.args.as_slice()),
            ("/opt/pyright", &["--stdio".to_string()][..])
        );
        assert_eq!(py.settings, Some(json!({"python": {}})));
        assert_eq!(
            r.index_for(Path::new("/nonexistent"), Path::new("a.py")),
            Some(0)
        );
        assert!(entries["mine"].sets_launch() && !entry(json!({"settings": {}})).sets_launch());
    }

    #[test]
    fn incomplete_or_invalid_entries_are_errors_that_name_the_field() {
        let mut entries = BTreeMap::new();
        entries.insert("x".to_string(), entry(json!({"command": "x"})));
        assert_eq!(
            Registry::with_settings(&entries)
                .expect_err("no files")
                .to_string(),
            "lsp_servers.x: files is required for a server that is not built in"
        );
        entries.insert(
            "x".to_string(),
            entry(json!({"command": "x", "files": ["a/{b"]})),
        );
        assert!(matches!(
            Registry::with_settings(&entries),
            Err(RegistryError::BadGlob { .. })
        ));
    }

    #[test]
    fn programs_are_found_on_the_search_path_if_executable() {
        let dir = tempfile::tempdir().expect("tmp");
        let bin = dir.path().join("bin");
        std::fs::create_dir(&bin).expect("mkdir");
        let exe = bin.join("srv");
        std::fs::write(&exe, "#!/bin/sh\n").expect("write");
        std::fs::write(bin.join("plain"), "").expect("write");
        std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        let path = vec![dir.path().join("nothing"), bin.clone()];
        assert_eq!(resolve_program("srv", &path, dir.path()), Some(exe.clone()));
        assert_eq!(resolve_program("plain", &path, dir.path()), None);
        assert_eq!(resolve_program("bin/srv", &[], dir.path()), Some(exe));
        assert_eq!(resolve_program("absent", &path, dir.path()), None);
    }

    #[test]
    fn typescript_is_found_in_the_workspace_or_beside_the_server() {
        let dir = tempfile::tempdir().expect("tmp");
        let nm = dir.path().join("tools/node_modules");
        let pkg = nm.join("typescript-language-server/lib");
        std::fs::create_dir_all(&pkg).expect("mkdir");
        std::fs::create_dir_all(nm.join(".bin")).expect("mkdir");
        std::fs::write(pkg.join("cli.mjs"), "").expect("write");
        std::os::unix::fs::symlink(
            "../typescript-language-server/lib/cli.mjs",
            nm.join(".bin/tls"),
        )
        .expect("link");
        let ws = dir.path().join("ws");
        std::fs::create_dir(&ws).expect("mkdir");
        assert_eq!(
            find_typescript(&ws, &nm.join(".bin/tls")),
            TypeScriptLib::Missing
        );
        std::fs::create_dir_all(nm.join("typescript/lib")).expect("mkdir");
        std::fs::write(nm.join("typescript/lib/tsserver.js"), "").expect("write");
        let real_nm = std::fs::canonicalize(&nm).expect("canon");
        assert_eq!(
            find_typescript(&ws, &nm.join(".bin/tls")),
            TypeScriptLib::Beside(real_nm.join("typescript/lib"))
        );
        std::fs::create_dir_all(ws.join("node_modules/typescript/lib")).expect("mkdir");
        std::fs::write(ws.join("node_modules/typescript/lib/tsserver.js"), "").expect("write");
        assert_eq!(
            find_typescript(&ws, &nm.join(".bin/tls")),
            TypeScriptLib::Workspace
        );
    }

    #[test]
    fn builtin_options_are_merged_under_the_settings() {
        let r = Registry::builtin();
        let ts = r
            .servers()
            .iter()
            .find(|s| s.name == "typescript")
            .expect("ts");
        assert_eq!(
            ts.initialization_options,
            Some(json!({"tsserver": {"useSyntaxServer": "never"}}))
        );
        let mut entries = BTreeMap::new();
        entries.insert(
            "typescript".to_string(),
            entry(json!({"initialization_options": {"tsserver": {"logVerbosity": "off"}, "preferences": {"a": 1}}})),
        );
        let r = Registry::with_settings(&entries).expect("registry");
        let ts = r
            .servers()
            .iter()
            .find(|s| s.name == "typescript")
            .expect("ts");
        assert_eq!(
            ts.initialization_options,
            Some(
                json!({"tsserver": {"useSyntaxServer": "never", "logVerbosity": "off"}, "preferences": {"a": 1}})
            )
        );
    }

    #[test]
    fn tsserver_path_is_added_unless_set() {
        let lib = Path::new("/x/typescript/lib");
        assert_eq!(
            with_tsserver_path(None, lib),
            json!({"tsserver": {"path": "/x/typescript/lib"}})
        );
        assert_eq!(
            with_tsserver_path(
                Some(json!({"tsserver": {"logVerbosity": "off"}, "a": 1})),
                lib
            ),
            json!({"tsserver": {"logVerbosity": "off", "path": "/x/typescript/lib"}, "a": 1})
        );
        assert_eq!(
            with_tsserver_path(Some(json!({"tsserver": {"path": "/mine"}})), lib),
            json!({"tsserver": {"path": "/mine"}})
        );
    }
}
