//! Reading what a local execution's tasks printed (`tasks/<i>/stdout.log`
//! and `stderr.log`), a page at a time.
//!
//! The cursor is the byte offset reached in each file, task by task
//! (`out:err,out:err,…`), so a follower asking again reads only what was
//! appended since. A line still being written (no newline yet) is left for
//! the next call, unless the execution has finished.

use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

use super::layout::{self, ExecSpec};
use crate::{LogLine, LogPage, LogStream, MAX_LOG_LINE_BYTES, MAX_LOG_PAGE, bounded_line};

/// The most bytes one call reads from one file.
const CHUNK: u64 = 256 * 1024;

/// Offsets per task: (stdout, stderr).
#[derive(Debug, Default, PartialEq, Eq)]
struct Cursor(Vec<(u64, u64)>);

impl Cursor {
    fn parse(s: &str) -> Option<Cursor> {
        if s.is_empty() {
            return Some(Cursor::default());
        }
        let mut tasks = Vec::new();
        for part in s.split(',') {
            let (out, err) = part.split_once(':')?;
            tasks.push((out.parse().ok()?, err.parse().ok()?));
        }
        Some(Cursor(tasks))
    }

    fn render(&self) -> String {
        self.0.iter().map(|(o, e)| format!("{o}:{e}")).collect::<Vec<_>>().join(",")
    }
}

/// The page after `cursor` of the execution in `dir`; `Err(None)` for a cursor this module did
/// not make.
pub(super) fn read(dir: &Path, cursor: Option<&str>, limit: usize) -> Result<LogPage, ReadError> {
    let mut at = Cursor::parse(cursor.unwrap_or("")).ok_or(ReadError::Cursor)?;
    let Some(spec) = layout::read_json::<ExecSpec>(dir, layout::SPEC)? else {
        return Ok(LogPage { lines: Vec::new(), cursor: at.render(), more: false });
    };
    let finished = dir.join(layout::STATUS).exists();
    let tasks = usize::try_from(spec.task_count).unwrap_or(usize::MAX);
    if at.0.len() > tasks {
        return Err(ReadError::Cursor);
    }
    at.0.resize(tasks, (0, 0));
    let limit = limit.clamp(1, MAX_LOG_PAGE);
    let (mut lines, mut more) = (Vec::new(), false);
    for (task, offsets) in (0u32..).zip(at.0.iter_mut()) {
        let tdir = layout::task_dir(dir, task);
        for (stream, offset) in [(LogStream::Stdout, &mut offsets.0), (LogStream::Stderr, &mut offsets.1)] {
            let name = match stream {
                LogStream::Stdout => "stdout.log",
                LogStream::Stderr => "stderr.log",
            };
            let left = limit - lines.len();
            let read = read_file(&tdir.join(name), *offset, left, finished)?;
            *offset = read.offset;
            more |= read.more;
            lines.extend(read.texts.into_iter().map(|text| LogLine { task, stream, at: None, text }));
        }
    }
    Ok(LogPage { lines, cursor: at.render(), more })
}

/// Why a page could not be read.
#[derive(Debug, thiserror::Error)]
pub(super) enum ReadError {
    #[error("the cursor is not one this executor gave out")]
    Cursor,
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

struct FileRead {
    texts: Vec<String>,
    offset: u64,
    more: bool,
}

/// Up to `left` whole lines from `path` at `offset`.
fn read_file(path: &Path, offset: u64, left: usize, finished: bool) -> std::io::Result<FileRead> {
    let mut file = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Ok(FileRead { texts: Vec::new(), offset, more: false });
        }
        Err(e) => return Err(e),
    };
    let len = file.metadata()?.len();
    if left == 0 || offset >= len {
        return Ok(FileRead { texts: Vec::new(), offset, more: offset < len });
    }
    file.seek(SeekFrom::Start(offset))?;
    let mut buf = Vec::new();
    file.take(CHUNK).read_to_end(&mut buf)?;
    let (mut texts, mut used) = (Vec::new(), 0usize);
    while texts.len() < left {
        let rest = &buf[used..];
        let Some(nl) = rest.iter().position(|&b| b == b'\n') else {
            let whole_file_read = offset + buf.len() as u64 == len;
            // A line longer than a chunk is cut into pieces, and the last line of a finished
            // execution needs no newline.
            let cut = rest.len() as u64 == CHUNK;
            if !rest.is_empty() && ((finished && whole_file_read) || cut) {
                texts.push(text_of(rest));
                used = buf.len();
            }
            break;
        };
        texts.push(text_of(&rest[..nl]));
        used += nl + 1;
    }
    let unread = &buf[used..];
    let offset = offset + used as u64;
    // More is ready when what is left holds a whole line, goes past this chunk, or is the last
    // line of a finished execution.
    let more = offset < len && (finished || unread.contains(&b'\n') || offset + (unread.len() as u64) < len);
    Ok(FileRead { texts, offset, more })
}

fn text_of(bytes: &[u8]) -> String {
    let bytes = bytes.strip_suffix(b"\r").unwrap_or(bytes);
    let cut = &bytes[..bytes.len().min(MAX_LOG_LINE_BYTES + 4)];
    bounded_line(&String::from_utf8_lossy(cut))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_round_trip_and_refuse_what_they_did_not_make() {
        let c = Cursor(vec![(12, 0), (3, 4)]);
        assert_eq!(Cursor::parse(&c.render()), Some(c));
        assert_eq!(Cursor::parse(""), Some(Cursor::default()));
        for bad in ["x", "1", "1:2,", "1:-2", ":"] {
            assert_eq!(Cursor::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn whole_lines_are_read_once_and_a_partial_line_waits_for_its_newline() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("stdout.log");
        std::fs::write(&path, b"one\ntwo\nthr").expect("write");
        let first = read_file(&path, 0, 10, false).expect("read");
        assert_eq!(first.texts, ["one", "two"]);
        assert_eq!(first.offset, 8);
        assert!(!first.more, "the partial line is not ready");
        let again = read_file(&path, first.offset, 10, false).expect("read");
        assert!(again.texts.is_empty());
        let done = read_file(&path, first.offset, 10, true).expect("read");
        assert_eq!(done.texts, ["thr"], "a finished execution's last line needs no newline");
        let limited = read_file(&path, 0, 1, false).expect("read");
        assert_eq!((limited.texts.len(), limited.offset, limited.more), (1, 4, true));
    }

    #[test]
    fn a_line_longer_than_a_page_line_is_cut() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("stdout.log");
        let long = "é".repeat(MAX_LOG_LINE_BYTES);
        std::fs::write(&path, format!("{long}\nshort\n")).expect("write");
        let read = read_file(&path, 0, 10, false).expect("read");
        assert_eq!(read.texts.len(), 2);
        assert!(read.texts[0].ends_with('…') && read.texts[0].len() <= MAX_LOG_LINE_BYTES + 3);
        assert_eq!(read.texts[1], "short");
    }
}
