//! The container log: Docker's json-file format, size-capped, written by the monitor.
//!
//! Theory of operation: the monitor feeds [`Logger`] what it reads from the container's stdout
//! and stderr pipes; each complete line (or a 16 KiB piece of a longer one, as Docker splits)
//! becomes one JSON line `{"log":"…\n","stream":"stdout","time":"RFC 3339 nanos"}` appended to
//! `<container dir>/container.log`. When a line would take the file past the cap (10 MiB by
//! default, `PIER_LOG_MAX_SIZE` bytes), the file is renamed to `container.log.1` (replacing the
//! older one) and a new file is started: at most twice the cap is kept. [`read`] prints the
//! log lines back (the rotated file first), the last N with `tail`; with `follow` it keeps
//! printing what is appended (inotify on the container directory, which also sees a rotation)
//! until the monitor, whose pidfd it polls, has exited.
//! Privileges: none beyond the state directory. Tests: unit tests below.
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify};
use serde::{Deserialize, Serialize};
use std::fs::{self, File, OpenOptions};
use std::io::{self, BufRead, BufReader, Seek, SeekFrom, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// The current log file's name in the container directory.
pub const FILE: &str = "container.log";
/// The rotated one.
pub const ROTATED: &str = "container.log.1";
/// Default cap of one file.
pub const DEFAULT_MAX: u64 = 10 << 20;
/// Longest piece of a line written as one record (Docker's split size).
const MAX_LINE: usize = 16 << 10;

/// Which stream a line came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Stream {
    Stdout,
    Stderr,
}

/// One line of the log file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Line {
    pub log: String,
    pub stream: Stream,
    pub time: String,
}

/// Why the log could not be written or read.
#[derive(Debug, thiserror::Error)]
#[error("{step} {path}: {source}")]
pub struct LogError {
    step: &'static str,
    path: PathBuf,
    source: io::Error,
}

fn log_err<'a>(step: &'static str, path: &'a Path) -> impl FnOnce(io::Error) -> LogError + 'a {
    move |source| LogError {
        step,
        path: path.to_owned(),
        source,
    }
}

/// The cap from `PIER_LOG_MAX_SIZE` (bytes), else [`DEFAULT_MAX`].
pub fn max_size() -> u64 {
    std::env::var("PIER_LOG_MAX_SIZE")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(DEFAULT_MAX)
}

/// Appends a container's output to its log file.
#[derive(Debug)]
pub struct Logger {
    dir: PathBuf,
    file: File,
    size: u64,
    max: u64,
    /// Bytes of an unfinished line, per stream.
    partial: [Vec<u8>; 2],
}

impl Logger {
    /// Opens (appending) `<dir>/container.log`.
    pub fn open(dir: &Path, max: u64) -> Result<Logger, LogError> {
        let path = dir.join(FILE);
        let file = open_append(&path)?;
        let size = file.metadata().map_err(log_err("stat", &path))?.len();
        Ok(Logger {
            dir: dir.to_owned(),
            file,
            size,
            max,
            partial: [Vec::new(), Vec::new()],
        })
    }

    /// Logs `data` read from `stream`: complete lines now, the rest when its line ends.
    pub fn write(&mut self, stream: Stream, data: &[u8]) -> Result<(), LogError> {
        let index = stream as usize;
        let mut pending = std::mem::take(&mut self.partial[index]);
        pending.extend_from_slice(data);
        let mut start = 0;
        while let Some(end) = next_piece(&pending[start..]) {
            self.record(stream, &pending[start..start + end])?;
            start += end;
        }
        pending.drain(..start);
        self.partial[index] = pending;
        Ok(())
    }

    /// Writes what is left of unfinished lines (at the container's end).
    pub fn flush(&mut self) -> Result<(), LogError> {
        for stream in [Stream::Stdout, Stream::Stderr] {
            let rest = std::mem::take(&mut self.partial[stream as usize]);
            if !rest.is_empty() {
                self.record(stream, &rest)?;
            }
        }
        Ok(())
    }

    fn record(&mut self, stream: Stream, piece: &[u8]) -> Result<(), LogError> {
        let line = Line {
            log: String::from_utf8_lossy(piece).into_owned(),
            stream,
            time: pier_runtime::state::rfc3339_now(),
        };
        let mut text = serde_json::to_vec(&line).expect("a log line serialises");
        text.push(b'\n');
        if self.size > 0 && self.size + text.len() as u64 > self.max {
            self.rotate()?;
        }
        let path = self.dir.join(FILE);
        self.file
            .write_all(&text)
            .map_err(log_err("write", &path))?;
        self.size += text.len() as u64;
        Ok(())
    }

    fn rotate(&mut self) -> Result<(), LogError> {
        let (current, rotated) = (self.dir.join(FILE), self.dir.join(ROTATED));
        fs::rename(&current, &rotated).map_err(log_err("rotate", &current))?;
        self.file = open_append(&current)?;
        self.size = 0;
        Ok(())
    }
}

/// Length of the next record in `data`: through a newline, or a full 16 KiB piece.
fn next_piece(data: &[u8]) -> Option<usize> {
    match data.iter().take(MAX_LINE).position(|&b| b == b'\n') {
        Some(i) => Some(i + 1),
        None if data.len() >= MAX_LINE => Some(MAX_LINE),
        None => None,
    }
}

fn open_append(path: &Path) -> Result<File, LogError> {
    OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(log_err("open", path))
}

/// Prints the log of the container directory `dir`: the last `tail` lines (all with `None`),
/// then, while `follow` (the monitor's pidfd) has not exited, whatever is appended.
pub fn read(
    dir: &Path,
    tail: Option<usize>,
    follow: Option<OwnedFd>,
    stdout: &mut dyn Write,
    stderr: &mut dyn Write,
) -> Result<(), LogError> {
    // Watch before reading, so nothing appended in between is missed.
    let watch = match &follow {
        Some(_) => Some(watch(dir)?),
        None => None,
    };
    let mut lines = Vec::new();
    for name in [ROTATED, FILE] {
        if let Ok(file) = File::open(dir.join(name)) {
            lines.extend(BufReader::new(file).lines().map_while(Result::ok));
        }
    }
    let skip = tail.map_or(0, |n| lines.len().saturating_sub(n));
    for line in &lines[skip..] {
        emit(line, stdout, stderr);
    }
    match (follow, watch) {
        (Some(pidfd), Some(inotify)) => follow_file(dir, &pidfd, &inotify, stdout, stderr),
        _ => Ok(()),
    }
}

fn watch(dir: &Path) -> Result<Inotify, LogError> {
    let inotify = Inotify::init(InitFlags::IN_CLOEXEC | InitFlags::IN_NONBLOCK)
        .map_err(|e| log_err("inotify_init", dir)(e.into()))?;
    let mask = AddWatchFlags::IN_MODIFY | AddWatchFlags::IN_CREATE | AddWatchFlags::IN_MOVED_TO;
    inotify
        .add_watch(dir, mask)
        .map_err(|e| log_err("inotify_add_watch", dir)(e.into()))?;
    Ok(inotify)
}

/// Prints appended lines until the monitor exits; follows a rotation by inode.
fn follow_file(
    dir: &Path,
    monitor: &OwnedFd,
    inotify: &Inotify,
    stdout: &mut dyn Write,
    stderr: &mut dyn Write,
) -> Result<(), LogError> {
    let path = dir.join(FILE);
    let mut current = open_at_end(&path);
    loop {
        let mut fds = [
            PollFd::new(monitor.as_fd(), PollFlags::POLLIN),
            PollFd::new(inotify.as_fd(), PollFlags::POLLIN),
        ];
        match poll(&mut fds, PollTimeout::NONE) {
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => return Err(log_err("poll", &path)(e.into())),
            Ok(_) => {}
        }
        while inotify.read_events().is_ok_and(|e| !e.is_empty()) {}
        let exited = fds[0].revents().is_some_and(|r| !r.is_empty());
        if let Some(reader) = current.as_mut() {
            drain(reader, stdout, stderr);
        }
        let inode = fs::metadata(&path).map(|m| m.ino()).ok();
        if inode != current.as_ref().map(|r| r.1) {
            current = File::open(&path).ok().and_then(with_inode);
            if let Some(reader) = current.as_mut() {
                drain(reader, stdout, stderr);
            }
        }
        if exited {
            return Ok(());
        }
    }
}

type Tailer = (BufReader<File>, u64, String);

fn open_at_end(path: &Path) -> Option<Tailer> {
    let mut file = File::open(path).ok()?;
    file.seek(SeekFrom::End(0)).ok()?;
    with_inode(file)
}

fn with_inode(file: File) -> Option<Tailer> {
    let inode = file.metadata().ok()?.ino();
    Some((BufReader::new(file), inode, String::new()))
}

/// Prints every complete line now in the file; keeps an incomplete one for later.
fn drain(reader: &mut Tailer, stdout: &mut dyn Write, stderr: &mut dyn Write) {
    let (file, _, partial) = reader;
    while let Ok(n) = file.read_line(partial) {
        if n == 0 || !partial.ends_with('\n') {
            return;
        }
        emit(partial.trim_end_matches('\n'), stdout, stderr);
        partial.clear();
    }
}

fn emit(text: &str, stdout: &mut dyn Write, stderr: &mut dyn Write) {
    let Ok(line) = serde_json::from_str::<Line>(text) else {
        return;
    };
    let out: &mut dyn Write = match line.stream {
        Stream::Stdout => stdout,
        Stream::Stderr => stderr,
    };
    let _ = out.write_all(line.log.as_bytes());
    let _ = out.flush();
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read_all(dir: &Path, tail: Option<usize>) -> (String, String) {
        let (mut out, mut err) = (Vec::new(), Vec::new());
        read(dir, tail, None, &mut out, &mut err).expect("read");
        (
            String::from_utf8(out).unwrap(),
            String::from_utf8(err).unwrap(),
        )
    }

    #[test]
    fn lines_split_across_writes_and_streams_stay_apart() {
        let dir = tempfile::tempdir().unwrap();
        let mut logger = Logger::open(dir.path(), DEFAULT_MAX).unwrap();
        logger.write(Stream::Stdout, b"hel").unwrap();
        logger.write(Stream::Stderr, b"oops\n").unwrap();
        logger.write(Stream::Stdout, b"lo\nwor").unwrap();
        logger.flush().unwrap();
        let (out, err) = read_all(dir.path(), None);
        assert_eq!(out, "hello\nwor");
        assert_eq!(err, "oops\n");
        let text = fs::read_to_string(dir.path().join(FILE)).unwrap();
        let first: serde_json::Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
        assert_eq!(first["stream"], "stderr");
        assert!(first["time"].as_str().unwrap().ends_with('Z'));
    }

    #[test]
    fn tail_keeps_the_last_lines() {
        let dir = tempfile::tempdir().unwrap();
        let mut logger = Logger::open(dir.path(), DEFAULT_MAX).unwrap();
        logger.write(Stream::Stdout, b"1\n2\n3\n").unwrap();
        assert_eq!(read_all(dir.path(), Some(2)).0, "2\n3\n");
        assert_eq!(read_all(dir.path(), Some(0)).0, "");
    }

    #[test]
    fn the_cap_rotates_once_and_bounds_the_size() {
        let dir = tempfile::tempdir().unwrap();
        let mut logger = Logger::open(dir.path(), 1000).unwrap();
        for i in 0..200 {
            logger
                .write(Stream::Stdout, format!("line {i}\n").as_bytes())
                .unwrap();
        }
        let size = |name| fs::metadata(dir.path().join(name)).unwrap().len();
        assert!(size(FILE) <= 1000 && size(ROTATED) <= 1000);
        let out = read_all(dir.path(), None).0;
        assert!(out.ends_with("line 199\n"), "{out}");
        assert!(!out.contains("line 0\n"));
    }

    #[test]
    fn long_lines_are_split_like_docker() {
        assert_eq!(next_piece(&vec![b'a'; MAX_LINE + 5]), Some(MAX_LINE));
        assert_eq!(next_piece(b"ab"), None);
        assert_eq!(next_piece(b"a\nb"), Some(2));
    }
}
