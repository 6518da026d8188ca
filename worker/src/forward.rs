//! `mapi-worker forward --uds PATH --port N -- PROGRAM [ARGS...]`: runs a
//! model server and makes its TCP port reachable through a Unix socket.
//!
//! A "bring your own container" revision runs its image in a sandbox with
//! no network; the platform reaches the image's server through this
//! forwarder, started inside the sandbox in front of the image's command.
//! It listens on the Unix socket `PATH` (in a directory the host shares,
//! mode 0666 so the host connects whoever it runs as) and pipes each
//! connection to `127.0.0.1:N`, closing each direction when the other side
//! closes it. A connection made before the server listens is closed.
//!
//! It exits with the program's exit code (128 + the signal when a signal
//! killed it), and passes SIGTERM and SIGINT on to it.
//!
//! Architecture invariant: it reads nothing but its arguments and the
//! environment it passes on, so it runs from any path, through the host's
//! dynamic loader inside an image's root filesystem.

use std::fs;
use std::io;
use std::net::Ipv4Addr;
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use tokio::net::{TcpStream, UnixListener, UnixStream};
use tokio::signal::unix::{SignalKind, signal};

use crate::supervisor::log;

/// The exit code when the forwarder cannot start (its socket, its runtime).
pub const EXIT_SETUP: i32 = 1;

/// What `forward` was asked to do.
#[derive(Debug, PartialEq, Eq)]
pub struct Forward {
    pub uds: PathBuf,
    pub port: u16,
    /// The program and its arguments; never empty.
    pub command: Vec<String>,
}

impl Forward {
    /// Parses the arguments after `forward`: `--uds PATH --port N -- PROGRAM [ARGS...]`
    /// (the two options in either order); `None` when they are not that.
    pub fn parse(args: &[String]) -> Option<Self> {
        let split = args.iter().position(|a| a == "--")?;
        let (options, command) = (&args[..split], &args[split + 1..]);
        let (mut uds, mut port) = (None, None);
        for pair in options.chunks(2) {
            match pair {
                [k, v] if k == "--uds" && uds.is_none() && !v.is_empty() => uds = Some(PathBuf::from(v)),
                [k, v] if k == "--port" && port.is_none() => port = Some(v.parse().ok().filter(|p| *p != 0)?),
                _ => return None,
            }
        }
        if command.is_empty() {
            return None;
        }
        Some(Self { uds: uds?, port: port?, command: command.to_vec() })
    }

    /// Runs the program and forwards until it exits; returns the exit code.
    pub fn run(self) -> i32 {
        match tokio::runtime::Builder::new_current_thread().enable_all().build() {
            Ok(rt) => rt.block_on(self.serve()),
            Err(e) => {
                log("ERROR", &format!("forward: cannot start the runtime: {e}"));
                EXIT_SETUP
            }
        }
    }

    async fn serve(self) -> i32 {
        let listener = match bind(&self.uds) {
            Ok(l) => l,
            Err(e) => {
                log("ERROR", &format!("forward: cannot listen on {}: {e}", self.uds.display()));
                return EXIT_SETUP;
            }
        };
        let (mut term, mut int) = match (signal(SignalKind::terminate()), signal(SignalKind::interrupt())) {
            (Ok(t), Ok(i)) => (t, i),
            (Err(e), _) | (_, Err(e)) => {
                log("ERROR", &format!("forward: cannot handle signals: {e}"));
                return EXIT_SETUP;
            }
        };
        let mut child = match tokio::process::Command::new(&self.command[0]).args(&self.command[1..]).spawn()
        {
            Ok(c) => c,
            Err(e) => {
                log("ERROR", &format!("forward: cannot start {}: {e}", self.command[0]));
                // As a shell says it: 127 not found, 126 found but not run.
                return if e.kind() == io::ErrorKind::NotFound { 127 } else { 126 };
            }
        };
        let pid = child.id().and_then(|id| i32::try_from(id).ok()).map(Pid::from_raw);
        let pass_on = |signal| {
            if let Some(pid) = pid {
                // The program may have just exited: its status comes next.
                kill(pid, signal).ok();
            }
        };
        loop {
            tokio::select! {
                status = child.wait() => return match status {
                    Ok(s) => s.code().unwrap_or_else(|| 128 + s.signal().unwrap_or(0)),
                    Err(e) => {
                        log("ERROR", &format!("forward: cannot wait for {}: {e}", self.command[0]));
                        EXIT_SETUP
                    }
                },
                _ = term.recv() => pass_on(Signal::SIGTERM),
                _ = int.recv() => pass_on(Signal::SIGINT),
                accepted = listener.accept() => match accepted {
                    Ok((stream, _)) => {
                        tokio::spawn(pipe(stream, self.port));
                    }
                    // Out of descriptors, most likely: let connections finish.
                    Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
                },
            }
        }
    }
}

/// Listens on `path`, replacing a stale socket there, open to every user.
fn bind(path: &Path) -> io::Result<UnixListener> {
    match fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_socket() => fs::remove_file(path)?,
        Ok(_) => {
            return Err(io::Error::new(io::ErrorKind::AlreadyExists, "a file that is not a socket is there"));
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    let listener = UnixListener::bind(path)?;
    fs::set_permissions(path, fs::Permissions::from_mode(0o666))?;
    Ok(listener)
}

/// Copies both ways between a client and the server's port until both
/// directions are closed; closes the client when the server is not up.
async fn pipe(mut client: UnixStream, port: u16) {
    if let Ok(mut server) = TcpStream::connect((Ipv4Addr::LOCALHOST, port)).await {
        // A reset ends the connection; there is no one to tell.
        tokio::io::copy_bidirectional(&mut client, &mut server).await.ok();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Vec<String> {
        s.split(' ').map(String::from).collect()
    }

    #[test]
    fn arguments_parse_or_are_refused() {
        let want = Forward { uds: "/run/s.sock".into(), port: 8000, command: args("/app/server --flag --") };
        assert_eq!(
            Forward::parse(&args("--uds /run/s.sock --port 8000 -- /app/server --flag --")),
            Some(want)
        );
        let swapped = Forward::parse(&args("--port 1 --uds a -- p")).expect("either order");
        assert_eq!((swapped.port, swapped.command), (1, args("p")));
        for bad in [
            "--uds a --port 1",
            "--uds a --port 1 --",
            "--uds a -- p",
            "--port 1 -- p",
            "--uds a --port 0 -- p",
            "--uds a --port x -- p",
            "--uds a --port 70000 -- p",
            "--uds a --uds b --port 1 -- p",
            "--uds a --port 1 --verbose -- p",
        ] {
            assert_eq!(Forward::parse(&args(bad)), None, "{bad}");
        }
    }
}
