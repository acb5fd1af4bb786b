//! A plain HTTP server on the host's loopback (Python's `http.server`): the destination the
//! egress tests reach, or are refused, through the broker's proxy.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};

/// `dir` served on `127.0.0.1:port`; the server is killed on drop.
pub struct StaticSite {
    child: Child,
    pub port: u16,
}

impl StaticSite {
    /// Starts the server on a port the kernel picks, and waits until it has said which.
    pub fn serve(dir: &Path) -> StaticSite {
        let script = "import functools, http.server, sys\n\
            h = functools.partial(http.server.SimpleHTTPRequestHandler, directory=sys.argv[1])\n\
            s = http.server.ThreadingHTTPServer(('127.0.0.1', 0), h)\n\
            print(s.server_address[1], flush=True)\n\
            s.serve_forever()\n";
        let mut child = Command::new("/usr/bin/python3")
            .arg("-c")
            .arg(script)
            .arg(dir)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("python3 (run ./scripts/setup.sh, which installs it): {e}"));
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("stdout"))
            .read_line(&mut line)
            .expect("the server's port");
        let port = line.trim().parse().expect("a port");
        StaticSite { child, port }
    }

    /// `127.0.0.1:PORT`, as an allow-list names it.
    pub fn host_port(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }
}

impl Drop for StaticSite {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
