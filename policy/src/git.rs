//! Git as data and decisions: what in a workspace makes a later `git` (outside the sandbox) run
//! code, how to read it from a repository's files, and how the `git` tool must run git so that
//! nothing a repository configures runs at all.
//!
//! Nothing here touches the file system: the tools crate reads the files
//! (`hanzo_tools::paths::protected_paths`) and hands the text to these parsers.
//!
//! Why a whole class and not two paths (design §11): the user's next `git` runs whatever the git
//! directory says — hooks, `core.hooksPath`, `core.fsmonitor`, filter and diff drivers, aliases,
//! includes — and `commondir` or a `gitdir:` file can point that directory anywhere.

use std::collections::BTreeSet;

/// Names at the workspace root that the file tools never write, existing or not: the git
/// directory (or `gitdir:` file) as a whole, hanzo's own settings, and husky's hooks directory
/// (husky's `prepare` script points `core.hooksPath` at it on the user's next `npm install`).
pub const ALWAYS_PROTECTED: &[&str] = &[".git", ".hanzo", ".husky"];

/// What tier B binds read-only today (`hanzo_sandbox::namespaces` re-exports it). The complete
/// set is `hanzo_tools::paths::protected_paths`, which the tier-B set-up should use instead.
pub const PROTECTED_IN_WORKSPACE: &[&str] = &[".git/hooks", ".git/config", ".hanzo"];

/// Whether a path component names a git directory. Case-insensitive: on a case-insensitive file
/// system (a mounted share, macOS) `.GIT` is the git directory, and refusing it on Linux costs
/// nothing.
pub fn is_git_dir_name(component: &str) -> bool {
    component.eq_ignore_ascii_case(".git")
}

/// The entries that make a directory a git directory git will use (`HEAD`, `objects/`, `refs/`):
/// a bare repository planted anywhere in the workspace runs its `config` when a shell prompt
/// (or the user) runs `git` inside it.
pub const GIT_DIR_MARKERS: &[&str] = &["HEAD", "objects", "refs"];

/// Where a `.git` *file* points: `gitdir: PATH` (relative to the file's directory).
pub fn parse_gitdir_file(text: &str) -> Option<String> {
    let line = text.lines().next()?.trim_end_matches('\r');
    let path = line.strip_prefix("gitdir:")?.trim();
    (!path.is_empty()).then(|| path.to_string())
}

/// A `commondir` file: one path, relative to the git directory that holds it.
pub fn parse_commondir(text: &str) -> Option<String> {
    let line = text.lines().next()?.trim_end_matches('\r').trim();
    (!line.is_empty()).then(|| line.to_string())
}

/// One `key = value` of a git configuration file. Section and key are lower-cased (git compares
/// them case-insensitively); the subsection keeps its case. `value` is `None` for a bare key
/// (boolean true).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigEntry {
    /// `[section]`, lower-cased.
    pub section: String,
    /// `[section "subsection"]`, as written.
    pub subsection: Option<String>,
    /// The key, lower-cased.
    pub key: String,
    /// The value, unquoted; `None` for a bare key.
    pub value: Option<String>,
}

impl ConfigEntry {
    /// `section.key` or `section.subsection.key` (subsection as written).
    pub fn name(&self) -> String {
        match &self.subsection {
            Some(sub) => format!("{}.{sub}.{}", self.section, self.key),
            None => format!("{}.{}", self.section, self.key),
        }
    }

    fn is(&self, section: &str, key: &str) -> bool {
        self.section == section && self.key == key
    }

    fn value_str(&self) -> &str {
        self.value.as_deref().unwrap_or("")
    }
}

/// Parses git configuration text, leniently: what cannot be parsed is skipped rather than
/// refused, because the parse only ever *adds* protection (a line git itself would reject makes
/// git refuse to run, which is safe anyway).
pub fn parse_config(text: &str) -> Vec<ConfigEntry> {
    let chars: Vec<char> = text.chars().collect();
    let mut i = 0;
    let mut section: Option<(String, Option<String>)> = None;
    let mut out = Vec::new();
    while i < chars.len() {
        let c = chars[i];
        if c.is_whitespace() {
            i += 1;
            continue;
        }
        if c == '#' || c == ';' {
            i = skip_line(&chars, i);
            continue;
        }
        if c == '[' {
            let (parsed, next) = parse_section_header(&chars, i + 1);
            i = next;
            match parsed {
                Some(s) => section = Some(s),
                None => {
                    section = None;
                    i = skip_line(&chars, i);
                }
            }
            continue;
        }
        if !c.is_ascii_alphabetic() {
            i = skip_line(&chars, i);
            continue;
        }
        let start = i;
        while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '-') {
            i += 1;
        }
        let key: String = chars[start..i].iter().collect::<String>().to_lowercase();
        while i < chars.len() && (chars[i] == ' ' || chars[i] == '\t') {
            i += 1;
        }
        let value = if i < chars.len() && chars[i] == '=' {
            let (v, next) = parse_value(&chars, i + 1);
            i = next;
            Some(v)
        } else {
            // A bare key (true), possibly followed by a comment.
            i = skip_line(&chars, i);
            None
        };
        if let Some((name, sub)) = &section {
            out.push(ConfigEntry {
                section: name.clone(),
                subsection: sub.clone(),
                key,
                value,
            });
        }
    }
    out
}

fn skip_line(chars: &[char], mut i: usize) -> usize {
    while i < chars.len() && chars[i] != '\n' {
        i += 1;
    }
    i + 1
}

/// After `[`: `name]`, `name "sub"]` or the old `name.sub]`. Returns the index after `]`.
fn parse_section_header(chars: &[char], mut i: usize) -> (Option<(String, Option<String>)>, usize) {
    let start = i;
    while i < chars.len()
        && (chars[i].is_ascii_alphanumeric() || chars[i] == '-' || chars[i] == '.')
    {
        i += 1;
    }
    let raw: String = chars[start..i].iter().collect();
    if raw.is_empty() {
        return (None, i);
    }
    if i < chars.len() && chars[i] == ']' {
        // `[section.sub]`: the old syntax, whose subsection is lower-cased.
        let lower = raw.to_lowercase();
        return match lower.split_once('.') {
            Some((name, sub)) => (Some((name.to_string(), Some(sub.to_string()))), i + 1),
            None => (Some((lower, None)), i + 1),
        };
    }
    while i < chars.len() && (chars[i] == ' ' || chars[i] == '\t') {
        i += 1;
    }
    if i >= chars.len() || chars[i] != '"' {
        return (None, i);
    }
    i += 1;
    let mut sub = String::new();
    while i < chars.len() && chars[i] != '"' {
        if chars[i] == '\n' {
            return (None, i);
        }
        if chars[i] == '\\' && i + 1 < chars.len() {
            i += 1;
        }
        sub.push(chars[i]);
        i += 1;
    }
    i += 1; // the closing quote
    if i < chars.len() && chars[i] == ']' {
        (Some((raw.to_lowercase(), Some(sub))), i + 1)
    } else {
        (None, i)
    }
}

/// A value after `=`: quotes toggle, `\` escapes (`\n`, `\t`, `\b`, `\\`, `\"`, and a
/// backslash-newline continues the line), `#`/`;` outside quotes start a comment, and
/// whitespace at the ends (outside quotes) is dropped.
fn parse_value(chars: &[char], mut i: usize) -> (String, usize) {
    let mut out = String::new();
    let mut quoted = false;
    // Length of `out` up to its last character that must be kept (quoted or not whitespace).
    let mut keep = 0;
    while i < chars.len() {
        let c = chars[i];
        match c {
            // (Inside quotes git refuses the line; ending the value here is the lenient choice.)
            '\n' => return (truncated(out, keep), i + 1),
            '#' | ';' if !quoted => {
                return (truncated(out, keep), skip_line(chars, i));
            }
            '"' => quoted = !quoted,
            '\\' => {
                i += 1;
                match chars.get(i) {
                    Some('\n') => {}
                    Some('\r') if chars.get(i + 1) == Some(&'\n') => i += 1,
                    Some('n') => out.push('\n'),
                    Some('t') => out.push('\t'),
                    Some('b') => {
                        out.pop();
                    }
                    Some(&e) => out.push(e),
                    None => {}
                }
                keep = out.len();
            }
            c if c.is_whitespace() && !quoted => {
                if !out.is_empty() {
                    out.push(c);
                }
            }
            c => {
                out.push(c);
                keep = out.len();
            }
        }
        if quoted {
            keep = out.len();
        }
        i += 1;
    }
    (truncated(out, keep), i)
}

fn truncated(mut s: String, keep: usize) -> String {
    s.truncate(keep);
    s
}

/// Whether a configuration value is a boolean git reads as "off" or "on" (so `core.fsmonitor`
/// names no program).
fn is_bool_value(v: &str) -> bool {
    matches!(
        v.to_ascii_lowercase().as_str(),
        "" | "true" | "false" | "yes" | "no" | "on" | "off" | "1" | "0"
    )
}

/// What a configuration entry makes git do later, outside the sandbox.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfigReference {
    /// `core.hooksPath`: a directory whose scripts run as hooks.
    HooksPath(String),
    /// `include.path` / `includeIf.*.path`: another configuration file.
    Include(String),
    /// `init.templateDir`: copied (hooks included) into repositories `git init` makes.
    TemplateDir(String),
    /// A value that is a command line: the words in it that are paths (a program or script git
    /// would run).
    Program {
        /// The entry (`core.sshCommand`, `alias.x`, …).
        key: String,
        /// The words of the value that name a program or script.
        paths: Vec<String>,
    },
}

/// Every reference to a path or program in `entries`, in order. Hook directories and includes
/// are listed whatever conditions (`includeIf`) guard them: protecting a file that git would not
/// read today costs nothing, missing one that it reads would be an escape.
pub fn config_references(entries: &[ConfigEntry]) -> Vec<ConfigReference> {
    let mut out = Vec::new();
    for e in entries {
        let v = e.value_str();
        if e.is("core", "hookspath") {
            if !v.is_empty() {
                out.push(ConfigReference::HooksPath(v.to_string()));
            }
        } else if e.key == "path" && (e.section == "include" || e.section == "includeif") {
            if !v.is_empty() {
                out.push(ConfigReference::Include(v.to_string()));
            }
        } else if e.is("init", "templatedir") {
            if !v.is_empty() {
                out.push(ConfigReference::TemplateDir(v.to_string()));
            }
        } else if names_program(e) {
            let paths = command_paths(v);
            if !paths.is_empty() {
                out.push(ConfigReference::Program {
                    key: e.name(),
                    paths,
                });
            }
        }
    }
    out
}

/// Keys whose value git runs as a program or shell command (from `git help config`).
pub fn names_program(e: &ConfigEntry) -> bool {
    let v = e.value_str();
    let sub = e.subsection.is_some();
    match (e.section.as_str(), e.key.as_str()) {
        ("core", "fsmonitor") => !is_bool_value(v),
        ("core", "sshcommand" | "editor" | "pager" | "askpass" | "gitproxy")
        | ("core", "alternaterefscommand") => true,
        ("diff", "external") => true,
        ("diff", "command" | "textconv") => sub,
        ("filter", "clean" | "smudge" | "process") => sub,
        ("merge", "driver") => sub,
        ("gpg", "program") => true,
        ("gpg", "defaultkeycommand") => sub,
        ("credential", "helper") => true,
        ("sequence", "editor") => true,
        ("alias", _) => v.starts_with('!'),
        ("pager", _) => sub || !is_bool_value(v),
        ("uploadpack", "packobjectshook") => true,
        ("difftool" | "mergetool", "cmd" | "path") => sub,
        ("browser" | "man", "cmd" | "path") => sub,
        ("web", "browser") => true,
        ("sendemail", "smtpserver" | "tocmd" | "cccmd" | "headercmd") => true,
        ("submodule", "update") => v.starts_with('!'),
        ("trailer", "command" | "cmd") => sub,
        ("remote", "uploadpack" | "receivepack" | "proxy") => sub,
        ("gc", "recentobjectshook") => true,
        ("guitool", "cmd") => sub,
        ("help" | "instaweb", "browser") => true,
        ("interactive", "difffilter") => true,
        _ => false,
    }
}

/// The words of a command line that look like paths (contain a `/`, and are not URLs), with a
/// leading `!` (aliases, `submodule.*.update`) and surrounding quotes removed. A command git runs
/// through the shell may name its program anywhere (`sh scripts/fsmonitor.sh`).
pub fn command_paths(command: &str) -> Vec<String> {
    let command = command.trim_start().trim_start_matches('!');
    command
        .split(|c: char| c.is_whitespace() || matches!(c, ';' | '|' | '&' | '(' | ')' | '`'))
        .map(|w| w.trim_matches(|c| c == '"' || c == '\''))
        .map(|w| w.split_once('=').map_or(w, |(_, v)| v))
        .filter(|w| w.contains('/') && !w.contains("://") && !w.starts_with('-'))
        .map(str::to_string)
        .collect()
}

/// Kinds of per-name drivers a repository's configuration can define, each a program git runs
/// on file contents.
pub const DRIVER_SECTIONS: &[(&str, &[&str])] = &[
    ("filter", &["clean", "smudge", "process"]),
    ("diff", &["command", "textconv"]),
    ("merge", &["driver"]),
];

/// `(section, name)` of every filter, diff and merge driver `entries` define.
pub fn driver_names(entries: &[ConfigEntry]) -> BTreeSet<(String, String)> {
    entries
        .iter()
        .filter_map(|e| {
            let sub = e.subsection.as_ref()?;
            let (_, keys) = DRIVER_SECTIONS.iter().find(|(s, _)| *s == e.section)?;
            keys.contains(&e.key.as_str())
                .then(|| (e.section.clone(), sub.clone()))
        })
        .collect()
}

/// Configuration files a hook manager's installed hooks read from the work tree at commit time;
/// writing one makes the user's next commit run the model's command. `hook_text` is the
/// content of an installed hook script.
pub fn hook_manager_configs(hook_text: &str) -> &'static [&'static str] {
    if hook_text.contains("pre-commit") && hook_text.contains("hook-impl")
        || hook_text.contains("pre_commit")
    {
        &[".pre-commit-config.yaml", ".pre-commit-config.yml"]
    } else if hook_text.contains("lefthook") {
        &[
            "lefthook.yml",
            "lefthook.yaml",
            ".lefthook.yml",
            ".lefthook.yaml",
            "lefthook-local.yml",
            "lefthook-local.yaml",
            ".lefthook",
            ".lefthook-local",
        ]
    } else if hook_text.contains("overcommit") {
        &[".overcommit.yml", ".git-hooks"]
    } else {
        &[]
    }
}

/// The hooks git knows (githooks(5)); a hooks directory is scanned for these names only.
pub const HOOK_NAMES: &[&str] = &[
    "applypatch-msg",
    "pre-applypatch",
    "post-applypatch",
    "pre-commit",
    "pre-merge-commit",
    "prepare-commit-msg",
    "commit-msg",
    "post-commit",
    "pre-rebase",
    "post-checkout",
    "post-merge",
    "pre-push",
    "pre-receive",
    "update",
    "proc-receive",
    "post-receive",
    "post-update",
    "reference-transaction",
    "push-to-checkout",
    "pre-auto-gc",
    "post-rewrite",
    "sendemail-validate",
    "fsmonitor-watchman",
    "p4-changelist",
    "p4-prepare-changelist",
    "p4-post-changelist",
    "p4-pre-submit",
    "post-index-change",
];

/// Why a ref name is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{what} {name:?} is not allowed: {problem}")]
pub struct RefError {
    /// What was named (`branch`, `remote`, …).
    pub what: &'static str,
    /// The refused name.
    pub name: String,
    /// Which rule it breaks.
    pub problem: &'static str,
}

/// A branch name the `git` tool accepts: `git check-ref-format --branch` rules, within a
/// conservative alphabet (`A-Z a-z 0-9 . _ / - +`), never starting with `-` (an option).
pub fn validate_branch_name(name: &str) -> Result<(), RefError> {
    let err = |problem| RefError {
        what: "branch name",
        name: name.to_string(),
        problem,
    };
    if name.is_empty() {
        return Err(err("it is empty"));
    }
    if name.len() > 255 {
        return Err(err("it is longer than 255 bytes"));
    }
    if name.starts_with('-') {
        return Err(err("it starts with `-`"));
    }
    if name == "HEAD" || name == "@" {
        return Err(err("it is reserved"));
    }
    if !name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '/' | '-' | '+'))
    {
        return Err(err("only letters, digits and . _ / - + are allowed"));
    }
    if name.contains("..") || name.contains("//") {
        return Err(err("it contains `..` or `//`"));
    }
    if name.ends_with('/') || name.ends_with('.') || name.starts_with('/') {
        return Err(err("it starts or ends with `/`, or ends with `.`"));
    }
    if name
        .split('/')
        .any(|c| c.starts_with('.') || c.ends_with(".lock"))
    {
        return Err(err("a component starts with `.` or ends with `.lock`"));
    }
    Ok(())
}

/// A revision the `git` tool accepts for `diff`, `log` and `show`: a branch-like name or an
/// object id (4–64 hex digits), with any `~N` / `^N` suffixes; `A..B` and `A...B` ranges of
/// those. Nothing else of gitrevisions(7): `@{…}`, `:/text` and `^{…}` can search or name
/// arbitrary things, and a leading `-` would be an option.
pub fn validate_revision(rev: &str) -> Result<(), RefError> {
    let err = |problem| RefError {
        what: "revision",
        name: rev.to_string(),
        problem,
    };
    if rev.is_empty() {
        return Err(err("it is empty"));
    }
    if rev.len() > 512 {
        return Err(err("it is longer than 512 bytes"));
    }
    let sides: Vec<&str> = if let Some((a, b)) = rev.split_once("...") {
        vec![a, b]
    } else if let Some((a, b)) = rev.split_once("..") {
        vec![a, b]
    } else {
        vec![rev]
    };
    for side in sides {
        if side.is_empty() {
            return Err(err("a side of the range is empty"));
        }
        let base_end = side.find(['~', '^']).unwrap_or(side.len());
        let (base, suffix) = side.split_at(base_end);
        // `base_end` is the first `~` or `^`, so a non-empty suffix starts with one.
        if !suffix
            .chars()
            .all(|c| c == '~' || c == '^' || c.is_ascii_digit())
        {
            return Err(err("only `~N` and `^N` may follow a name"));
        }
        let is_hex = (4..=64).contains(&base.len()) && base.chars().all(|c| c.is_ascii_hexdigit());
        if !(is_hex || base == "HEAD" || validate_branch_name(base).is_ok()) {
            return Err(err(
                "use a branch or tag name, HEAD, or a commit id, optionally with ~N or ^N",
            ));
        }
    }
    Ok(())
}

/// The `git` tool's subcommands, in the order its schema lists them.
pub const GIT_SUBCOMMANDS: &[&str] = &[
    "status", "diff", "log", "show", "add", "commit", "branch", "switch",
];

/// Subcommands that change nothing (the tool runs them with `GIT_OPTIONAL_LOCKS=0`, so `status`
/// does not even refresh the index): they count as read-only for `--approval allow-listed`.
pub const GIT_READ_ONLY_SUBCOMMANDS: &[&str] = &["status", "diff", "log", "show"];

/// Configuration given on every `git` tool command line (`-c`, which outranks every file), so
/// that nothing a repository configures runs a program: no hooks, no fsmonitor, no pager, no
/// editor, no signing program, no external diff, no transport (so no ssh command, proxy or
/// remote helper), no credential helper, no automatic gc in the background. Per-name drivers
/// (filters, diff and merge drivers) are disabled by name on top of this, see
/// [`driver_overrides`].
pub const SAFE_CONFIG: &[(&str, &str)] = &[
    ("core.hooksPath", "/dev/null"),
    ("core.fsmonitor", "false"),
    ("core.sshCommand", "false"),
    ("core.pager", "cat"),
    ("core.editor", "false"),
    ("core.askPass", ""),
    ("core.gitProxy", ""),
    ("core.alternateRefsCommand", ""),
    ("core.attributesFile", "/dev/null"),
    ("sequence.editor", "false"),
    ("diff.external", ""),
    ("gpg.program", "false"),
    ("gpg.openpgp.program", "false"),
    ("gpg.ssh.program", "false"),
    ("gpg.x509.program", "false"),
    ("gpg.ssh.defaultKeyCommand", ""),
    ("commit.gpgSign", "false"),
    ("tag.gpgSign", "false"),
    ("log.showSignature", "false"),
    ("credential.helper", ""),
    ("protocol.allow", "never"),
    ("submodule.recurse", "false"),
    ("diff.ignoreSubmodules", "all"),
    ("status.submoduleSummary", "false"),
    ("uploadpack.packObjectsHook", ""),
    ("gc.auto", "0"),
    ("maintenance.auto", "false"),
    ("color.ui", "never"),
    ("advice.detachedHead", "false"),
];

/// Environment of every `git` tool command (on top of `PATH`, `HOME`, `LANG`): no system or
/// global configuration (the private `$HOME` is writable by commands, so its `.gitconfig` is
/// the model's), no prompts, no pager, no lazy fetches of missing objects, literal pathspecs.
pub const SAFE_ENV: &[(&str, &str)] = &[
    ("GIT_CONFIG_NOSYSTEM", "1"),
    ("GIT_CONFIG_GLOBAL", "/dev/null"),
    ("GIT_CONFIG_COUNT", "0"),
    ("GIT_TERMINAL_PROMPT", "0"),
    ("GIT_ASKPASS", ""),
    ("SSH_ASKPASS", ""),
    ("GIT_PAGER", "cat"),
    ("PAGER", "cat"),
    ("GIT_EDITOR", "false"),
    ("GIT_SEQUENCE_EDITOR", "false"),
    ("GIT_NO_LAZY_FETCH", "1"),
    ("GIT_LITERAL_PATHSPECS", "1"),
    ("GIT_OPTIONAL_LOCKS", "0"),
    ("GIT_ADVICE", "0"),
    ("GIT_PROTOCOL_FROM_USER", "0"),
    ("GIT_ALLOW_PROTOCOL", ""),
    ("GIT_ATTR_NOSYSTEM", "1"),
];

/// `-c` pairs that switch off every filter, diff and merge driver the repository defines: an
/// empty command is no command.
pub fn driver_overrides(drivers: &BTreeSet<(String, String)>) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for (section, name) in drivers {
        let Some((_, keys)) = DRIVER_SECTIONS.iter().find(|(s, _)| s == section) else {
            continue;
        };
        for key in *keys {
            out.push((format!("{section}.{name}.{key}"), String::new()));
        }
        if section == "filter" {
            out.push((format!("filter.{name}.required"), "false".to_string()));
        }
    }
    out
}

/// A driver name `-c` cannot carry safely (git splits `-c` at the first `=`).
pub fn is_unusual_driver_name(name: &str) -> bool {
    name.is_empty() || name.contains(['=', '\n', '\0'])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(name: &str, value: Option<&str>) -> ConfigEntry {
        let parts: Vec<&str> = name.splitn(2, '.').collect();
        let (section, rest) = (parts[0], parts[1]);
        let (subsection, key) = match rest.rsplit_once('.') {
            Some((sub, key)) => (Some(sub.to_string()), key),
            None => (None, rest),
        };
        ConfigEntry {
            section: section.to_string(),
            subsection,
            key: key.to_lowercase(),
            value: value.map(str::to_string),
        }
    }

    #[test]
    fn gitdir_and_commondir_files() {
        assert_eq!(
            parse_gitdir_file("gitdir: ../main/.git/worktrees/x\n"),
            Some("../main/.git/worktrees/x".into())
        );
        assert_eq!(
            parse_gitdir_file("gitdir:/abs/path\r\n"),
            Some("/abs/path".into())
        );
        assert_eq!(parse_gitdir_file("not a gitdir file"), None);
        assert_eq!(parse_gitdir_file("gitdir:   \n"), None);
        assert_eq!(parse_commondir("../..\n"), Some("../..".into()));
        assert_eq!(parse_commondir("\n"), None);
    }

    #[test]
    fn config_sections_keys_values_and_comments() {
        let text = "# comment\n[core]\n\trepositoryformatversion = 0\n\tbare\n\
                    [core] hooksPath = .githooks ; trailing comment\n\
                    [remote \"Origin\"]\n  url = \"git@host:a b\"  # c\n\
                    [Filter.LFS]\n clean = git-lfs clean -- %f\n\
                    [alias]\n  x = \"!sh -c \\\"echo hi\\\"\"\n\
                    [includeIf \"gitdir:~/work/\"]\n path = ../shared.inc\n\
                    [diff \"pdf\"]\n textconv = \"tools/pdf to text\" \\\n  --flag\n";
        let e = parse_config(text);
        let names: Vec<(String, Option<String>)> =
            e.iter().map(|e| (e.name(), e.value.clone())).collect();
        assert_eq!(
            names,
            vec![
                ("core.repositoryformatversion".into(), Some("0".into())),
                ("core.bare".into(), None),
                ("core.hookspath".into(), Some(".githooks".into())),
                ("remote.Origin.url".into(), Some("git@host:a b".into())),
                (
                    "filter.lfs.clean".into(),
                    Some("git-lfs clean -- %f".into())
                ),
                ("alias.x".into(), Some("!sh -c \"echo hi\"".into())),
                (
                    "includeif.gitdir:~/work/.path".into(),
                    Some("../shared.inc".into())
                ),
                (
                    "diff.pdf.textconv".into(),
                    Some("tools/pdf to text   --flag".into())
                ),
            ]
        );
    }

    #[test]
    fn config_parser_is_lenient_and_never_panics() {
        for text in [
            "[",
            "[core",
            "[core \"x",
            "[core]\nkey = \"unterminated\n",
            "=\n[x]\n=y\n",
            "\\",
            "[a]\nk = v\\",
            "[a.b.c]\nk=v",
            "[\u{e9}]\nk=v",
        ] {
            let _ = parse_config(text);
        }
        let e = parse_config("[a]\nk = \"unterminated\n[b]\nj = 1\n");
        assert_eq!(e.last().map(ConfigEntry::name), Some("b.j".into()));
    }

    #[test]
    fn references_hooks_paths_includes_and_programs() {
        let e = parse_config(
            "[core]\n hooksPath = .husky\n fsmonitor = scripts/fsmon.sh\n fsmonitor = true\n\
             [include]\n path = ../project.gitconfig\n\
             [alias]\n st = status\n evil = !./bin/run --now\n\
             [diff \"x\"]\n textconv = sh tools/conv.sh\n\
             [filter \"y\"]\n smudge = /usr/bin/y\n\
             [remote \"o\"]\n url = https://example.com/a/b\n",
        );
        let refs = config_references(&e);
        assert_eq!(
            refs,
            vec![
                ConfigReference::HooksPath(".husky".into()),
                ConfigReference::Program {
                    key: "core.fsmonitor".into(),
                    paths: vec!["scripts/fsmon.sh".into()]
                },
                ConfigReference::Include("../project.gitconfig".into()),
                ConfigReference::Program {
                    key: "alias.evil".into(),
                    paths: vec!["./bin/run".into()]
                },
                ConfigReference::Program {
                    key: "diff.x.textconv".into(),
                    paths: vec!["tools/conv.sh".into()]
                },
                ConfigReference::Program {
                    key: "filter.y.smudge".into(),
                    paths: vec!["/usr/bin/y".into()]
                },
            ]
        );
    }

    #[test]
    fn program_keys() {
        assert!(names_program(&entry("core.fsmonitor", Some(".git/fsmon"))));
        assert!(!names_program(&entry("core.fsmonitor", Some("false"))));
        assert!(names_program(&entry("filter.lfs.process", Some("x"))));
        assert!(!names_program(&entry("filter.required", Some("x"))));
        assert!(names_program(&entry("alias.x", Some("!rm -rf /"))));
        assert!(!names_program(&entry("alias.x", Some("log --oneline"))));
        assert!(names_program(&entry("pager.log", Some("less"))));
        assert!(!names_program(&entry("pager.log", Some("false"))));
        assert!(names_program(&entry("credential.helper", Some("store"))));
        assert!(names_program(&entry("gc.recentObjectsHook", Some("./x"))));
        assert!(names_program(&entry("interactive.diffFilter", Some("x"))));
        assert!(!names_program(&entry("user.name", Some("x/y"))));
    }

    #[test]
    fn drivers_are_found_and_overridden_by_name() {
        let e = parse_config(
            "[filter \"lfs\"]\n clean = a\n smudge = b\n required\n\
             [diff \"pdf\"]\n textconv = c\n[merge \"ours\"]\n driver = true\n\
             [diff]\n external = d\n[filter \"noop\"]\n required = true\n",
        );
        let d = driver_names(&e);
        assert_eq!(
            d.iter().cloned().collect::<Vec<_>>(),
            vec![
                ("diff".to_string(), "pdf".to_string()),
                ("filter".to_string(), "lfs".to_string()),
                ("merge".to_string(), "ours".to_string()),
            ]
        );
        let o = driver_overrides(&d);
        assert!(o.contains(&("filter.lfs.process".into(), String::new())));
        assert!(o.contains(&("filter.lfs.required".into(), "false".into())));
        assert!(o.contains(&("diff.pdf.command".into(), String::new())));
        assert!(o.contains(&("merge.ours.driver".into(), String::new())));
        assert!(is_unusual_driver_name("a=b"));
        assert!(!is_unusual_driver_name("lfs"));
    }

    #[test]
    fn hook_managers_name_their_configs() {
        assert!(hook_manager_configs(
            "#!/usr/bin/env bash\nexec pre-commit hook-impl --config=.pre-commit-config.yaml"
        )
        .contains(&".pre-commit-config.yaml"));
        assert!(
            hook_manager_configs("#!/bin/sh\nlefthook run pre-commit \"$@\"")
                .contains(&"lefthook.yml")
        );
        assert!(hook_manager_configs("#!/bin/sh\necho hi").is_empty());
    }

    #[test]
    fn branch_names() {
        for ok in ["main", "feature/x-1", "v1.2", "a+b", "user/topic_2"] {
            assert_eq!(validate_branch_name(ok), Ok(()), "{ok}");
        }
        for bad in [
            "", "-f", "--exec=x", "a..b", "a b", "a~1", "a^", "a:b", "a?", "a*", "a[b", "a\\b",
            "a/", "/a", "a.", ".a", "a/.b", "a.lock", "a//b", "HEAD", "@", "a@{1}", "é", "a\nb",
        ] {
            assert!(validate_branch_name(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn revisions() {
        for ok in [
            "HEAD",
            "HEAD~2",
            "HEAD^",
            "HEAD^2~3",
            "main",
            "abc1234",
            "main..feature",
            "v1.0...HEAD",
            "0123456789abcdef0123456789abcdef01234567",
        ] {
            assert_eq!(validate_revision(ok), Ok(()), "{ok}");
        }
        for bad in [
            "",
            "-p",
            "--output=/tmp/x",
            "HEAD@{1}",
            ":/fix",
            "HEAD^{tree}",
            "main..",
            "..main",
            "a b",
            "HEAD~x",
            "HEAD:file",
            "a..b..c",
        ] {
            assert!(validate_revision(bad).is_err(), "{bad:?}");
        }
    }
}
